"""Modules are dlopened by file identity, not by path: the launch ops of the TF and Paddle
bridges get the same name the runtime loads under."""

from __future__ import annotations

import os

from disc_runtime.native import module_load_path


def test_one_file_one_name_and_a_replaced_file_a_new_one(tmp_path) -> None:
    module = tmp_path / "module.so"
    module.write_bytes(b"first build")
    first = module_load_path(module)
    assert first == module_load_path(str(module)) != str(module)
    assert os.path.realpath(first) == str(module.resolve())
    keep = tmp_path / "old.so"
    module.rename(keep)  # as a rebuilt cache entry: a new file at the same path
    module.write_bytes(b"second build")
    second = module_load_path(module)
    assert second != first  # dlopen(second) cannot return the module loaded as `first`
    assert os.path.realpath(second) == str(module.resolve())


def test_a_missing_file_keeps_its_path_for_dlopen_to_name(tmp_path) -> None:
    missing = tmp_path / "gone.so"
    assert module_load_path(missing) == str(missing)
