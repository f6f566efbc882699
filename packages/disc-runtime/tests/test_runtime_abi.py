"""The engine's cffi declarations: the precompiled module ``_abi_ffi.py`` is what
``abi.emit_ffi_module`` writes for today's ABI text, it is what the engine uses, and a
stale one is never used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import disc_runtime
from disc_runtime import abi


def test_the_precompiled_declarations_are_current(tmp_path) -> None:
    """After a change to the ABI text, ``python -m disc_runtime.abi`` regenerates it;
    this fails until then (and the engine declares at run time, slower to start)."""
    fresh = tmp_path / "_abi_ffi.py"
    abi.emit_ffi_module(fresh)
    committed = Path(disc_runtime.__file__).parent / "_abi_ffi.py"
    assert committed.read_text() == fresh.read_text()


def test_the_engine_uses_them_and_imports_no_c_parser() -> None:
    """In a new process: the engine's FFI is the precompiled one (types parsed in C), and
    importing the engine and making its call state imports neither cffi's Python layer
    nor pycparser."""
    code = (
        "import sys\n"
        "import disc_runtime.native as n\n"
        "from disc_runtime import _abi_ffi\n"
        "assert n._ffi is _abi_ffi.ffi, type(n._ffi)\n"
        "n._ffi.new('disc_env *'); n._ffi.new('int64_t[]', 3); n._ffi.typeof('void *[]')\n"
        "print(sorted(m for m in ('cffi', 'pycparser') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_stale_module_is_not_used(monkeypatch) -> None:
    """Declarations whose marker differs from today's ABI text are ignored: the FFI is
    declared at run time from the text itself, and works the same."""
    from disc_runtime import _abi_ffi

    monkeypatch.setattr(_abi_ffi, "CDEF_HASH", "stale")
    ffi = abi.load_ffi()
    assert ffi is not _abi_ffi.ffi
    env = ffi.new("disc_env *", {"counters": ffi.NULL})
    assert ffi.sizeof(env[0]) == _abi_ffi.ffi.sizeof("disc_env")
