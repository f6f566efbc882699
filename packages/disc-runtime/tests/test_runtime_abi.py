"""The engine's cffi declarations: the precompiled module ``_abi_ffi.py`` declares what
today's ABI text does, regenerating it works, the engine uses it (no C parser imported),
and a stale one is never used."""

from __future__ import annotations

import subprocess
import sys

from disc_runtime import abi


def test_the_precompiled_declarations_are_current() -> None:
    """Made from today's ABI text (its marker), and declaring what a run-time ``cdef`` of
    that text declares: the same types, sizes and field offsets. After a change to the ABI
    text, ``python -m disc_runtime.abi`` regenerates the module; this fails until then (and
    the engine declares at run time, slower to start). Not compared as text: another cffi
    version may write the same declarations differently."""
    import cffi

    from disc_runtime import _abi_ffi

    assert _abi_ffi.CDEF_HASH == abi._CDEF_HASH
    fresh = cffi.FFI()
    fresh.cdef(abi.CDEF)
    kept = _abi_ffi.ffi
    assert kept.list_types() == fresh.list_types()
    typedefs, structs, unions = fresh.list_types()
    for name in typedefs + [f"struct {n}" for n in structs]:
        assert kept.typeof(name).cname == fresh.typeof(name).cname
        t = fresh.typeof(name)
        if t.kind == "struct":
            assert kept.sizeof(name) == fresh.sizeof(name)
            assert [(f, kept.offsetof(name, f)) for f, _ in t.fields] == [
                (f, fresh.offsetof(name, f)) for f, _ in t.fields]


def test_regenerating_them_gives_a_working_module(tmp_path) -> None:
    """``emit_ffi_module`` writes a module that imports and declares the engine's types."""
    out = tmp_path / "_abi_ffi.py"
    abi.emit_ffi_module(out)
    code = (f"import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('m', {str(out)!r})\n"
            f"m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            f"assert m.CDEF_HASH == {abi._CDEF_HASH!r}\n"
            f"print(m.ffi.sizeof('disc_env'))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    from disc_runtime import _abi_ffi

    assert int(res.stdout.strip()) == _abi_ffi.ffi.sizeof("disc_env")


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
