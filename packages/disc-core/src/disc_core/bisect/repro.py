"""A culprit cluster as a standalone reproducer, and a first diagnosis of whose bug it is.

The reproducer is a folder that needs neither the user's program nor its framework:

    artifact/            the cluster's compiled artifact, copied from the compile cache
    inputs/input_<i>.npy one array per artifact input
    expected/            framework_<i>.npy (what the framework computed, when recorded)
                         and reference_<i>.npy (what the reference interpreter computes)
    README.md            what it is and the disc-run command line

Inputs are *recorded* when the bridge runs clusters from Python (disc-torch saves the
cluster's real inputs and eager torch's outputs on its first call, ``DISC_BISECT_DUMP``),
else *synthetic*: random arrays that match the artifact's signature, every size symbol
bound to one small value (TF and Paddle run clusters inside a C++ launch op, which does not
hand its inputs back to Python).

The diagnosis runs the artifact natively and on the reference interpreter (which runs the
same core graph op by op in numpy): when they disagree, DISC's code generation is at fault;
when they agree, the core graph itself computes something else than the framework's ops,
a converter (lowering) bug, shown directly when the framework's outputs were recorded.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .compare import compare_arrays

__all__ = ["Check", "Reproducer", "recorded_inputs", "synthetic_inputs", "write_reproducer"]

#: the values tried in turn for every size symbol of synthetic inputs
SYMBOL_TRIALS = (4, 3, 2, 1, 8)


@dataclass
class Check:
    """One comparison of the diagnosis: which two engines, and how they compare."""

    what: str
    same: bool
    detail: str


@dataclass
class Reproducer:
    """A written reproducer folder and what was found running it."""

    folder: Path
    key: str
    inputs_kind: str  # "recorded" or "synthetic"
    input_files: list[Path]
    checks: list[Check] = field(default_factory=list)
    verdict: str = ""
    #: "float32 (3, 5)" per input: the shapes the reproducer runs at
    shapes: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        """The disc-run command line, from the current directory."""
        return self.command_in(self.folder)

    def command_in(self, folder: Path) -> str:
        """The disc-run command line with the reproducer's folder at ``folder``."""
        inputs = " ".join(str(folder / "inputs" / p.name) for p in self.input_files)
        return f"disc-run {folder / 'artifact'} --inputs {inputs} --out {folder / 'out'}"


def recorded_inputs(dump: Path, key: str
                    ) -> tuple[list[np.ndarray], list[np.ndarray] | None] | None:
    """(inputs, framework outputs or None) a run saved for ``key``, or None."""
    folder = dump / key
    if not (folder / "done").is_file():
        return None
    inputs = _numbered(folder, "input")
    framework = _numbered(folder, "framework")
    return inputs, framework or None


def _numbered(folder: Path, stem: str) -> list[np.ndarray]:
    out = []
    while (folder / f"{stem}_{len(out)}.npy").is_file():
        out.append(np.load(folder / f"{stem}_{len(out)}.npy", allow_pickle=False))
    return out


def synthetic_inputs(signature: object, runs: Callable[[list[np.ndarray]], object],
                     seed: int = 0) -> tuple[list[np.ndarray], dict[str, int]]:
    """Random inputs for ``signature`` (a disc_runtime Signature) that ``runs`` accepts
    (it raises on shapes the graph's constraints refuse): each trial binds every size
    symbol to one of :data:`SYMBOL_TRIALS`. Floats are standard normal, integers in
    [0, 3) (valid as indices into most sizes), booleans random."""
    from ..symbolic import parse_expr

    specs = list(signature.inputs)  # type: ignore[attr-defined]
    symbols = {d for s in specs for d in s.dims if isinstance(d, str) and d.isidentifier()}
    last: Exception | None = None
    for value in SYMBOL_TRIALS:
        env = {name: value for name in symbols}
        rng = np.random.default_rng(seed)
        try:
            arrays = []
            for spec in specs:
                shape = tuple(d if isinstance(d, int) else env[d] if d in env
                              else parse_expr(d).evaluate(env) for d in spec.dims)
                arrays.append(_random(rng, spec.dtype, shape))
            runs(arrays)
        except Exception as exc:  # a shape the graph refuses: try the next size
            last = exc
            continue
        return arrays, env
    raise RuntimeError(f"no synthetic inputs fit the signature ({last})")


def _random(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 3, shape).astype(dtype)
    if dtype == "bfloat16":
        raise ValueError("bfloat16 inputs cannot be saved as .npy")
    if dtype.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _compare(what: str, want: Sequence[np.ndarray], got: Sequence[np.ndarray],
             rtol: float, atol: float) -> Check:
    """``what`` is "GOT vs WANT": the engines compared, ``want`` the baseline."""
    if len(want) != len(got):
        return Check(what, False, f"{len(got)} outputs against {len(want)}")
    problems, worst = [], 0.0
    baseline = what.split(" vs ")[-1]
    for i, (w, g) in enumerate(zip(want, got)):
        why, max_abs = compare_arrays(f"output #{i}", w, g, rtol, atol, baseline)
        worst = max(worst, max_abs)
        if why is not None:
            problems.append(why)
    if problems:
        return Check(what, False, "; ".join(problems[:2]))
    return Check(what, True, f"agree (max |diff| {worst:.3g})")


def write_reproducer(folder: Path, key: str, artifact_dir: Path, *,
                     recorded: tuple[list[np.ndarray], list[np.ndarray] | None] | None,
                     framework: str | None, rtol: float, atol: float) -> Reproducer:
    """Write the reproducer of ``key`` (whose artifact is at ``artifact_dir``) in
    ``folder`` and diagnose it; see the module docstring."""
    from disc_runtime import Artifact, Executable

    from ..compiler import with_dtypes_loaded
    from ..engine import load_reference_engine

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "artifact"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(artifact_dir, target)
    artifact = Artifact.load(target)
    interpret = load_reference_engine(artifact)
    expected_framework = None
    if recorded is not None:
        inputs, expected_framework = recorded
        kind, bindings = "recorded", None
    else:
        inputs, bindings = synthetic_inputs(artifact.signature, interpret)
        kind = "synthetic"
    files = []
    for sub in ("inputs", "expected", "out"):
        shutil.rmtree(folder / sub, ignore_errors=True)
        (folder / sub).mkdir()
    for i, array in enumerate(inputs):
        files.append(folder / "inputs" / f"input_{i}.npy")
        np.save(files[-1], array, allow_pickle=False)
    repro = Reproducer(folder, key, kind, files,
                       shapes=[f"{np.asarray(a).dtype} {tuple(np.shape(a))}" for a in inputs])
    reference = [np.asarray(r) for r in interpret(list(inputs))]
    for i, array in enumerate(reference):
        np.save(folder / "expected" / f"reference_{i}.npy", array, allow_pickle=False)
    for i, array in enumerate(expected_framework or []):
        np.save(folder / "expected" / f"framework_{i}.npy", array, allow_pickle=False)
    fw = framework or "the framework"
    native_check: Check | None = None  # None: the artifact has no native code
    native = None
    if artifact.engine == "native":
        try:
            with_dtypes_loaded(artifact)
            native = [np.asarray(r) for r in Executable.load(target).run(list(inputs))]
        except Exception as exc:
            native_check = Check("native engine", False, f"failed: {type(exc).__name__}: {exc}")
        else:
            native_check = _compare("native engine vs reference interpreter", reference,
                                    native, rtol, atol)
    else:
        repro.checks.append(Check("native engine", True, "none: the artifact runs on the "
                                  "reference interpreter (it has no native code)"))
    if native_check is not None:
        repro.checks.append(native_check)
    framework_check: Check | None = None
    if expected_framework is not None:
        framework_check = _compare(f"reference interpreter vs {fw}", expected_framework,
                                   reference, rtol, atol)
        repro.checks.append(framework_check)
        if native is not None:
            repro.checks.append(_compare(f"native engine vs {fw}", expected_framework,
                                         native, rtol, atol))
    repro.verdict = _verdict(native_check, framework_check, fw)
    (folder / "README.md").write_text(_readme(repro, artifact, bindings), encoding="utf-8")
    return repro


def _verdict(native: Check | None, framework: Check | None, fw: str) -> str:
    """Whose bug it is, from the native-vs-interpreter check (None: no native code) and
    the interpreter-vs-framework check (None: the framework's outputs were not recorded)."""
    if native is not None and " vs " not in native.what:
        return "the native engine fails on these inputs: a DISC runtime or codegen bug"
    if native is not None and not native.same:
        return ("the native engine disagrees with the reference interpreter on the same core "
                "graph: a bug in DISC's native code generation")
    agree = "the native engine agrees with the interpreter, but " if native else ""
    if framework is not None and not framework.same:
        return (f"{agree}the cluster's core graph computes other values than {fw}: a "
                "converter (lowering) bug in the bridge")
    if framework is not None:
        return (f"on these inputs the cluster matches {fw}: the difference shows on other "
                "calls (other shapes or values) or through its interplay with other clusters")
    if native is None:
        return (f"the cluster has no native code and {fw}'s outputs were not recorded: "
                "nothing to compare on these inputs; a converter (lowering) bug is likely")
    return (f"the native engine agrees with the interpreter on synthetic inputs; {fw}'s "
            "own outputs were not recorded, so a converter (lowering) bug is likely but "
            "unconfirmed")


def _readme(repro: Reproducer, artifact: object, bindings: dict[str, int] | None) -> str:
    sig = artifact.signature  # type: ignore[attr-defined]
    lines = [f"# DISC bisect reproducer: cluster {repro.key}", "",
             "Run the culprit cluster alone, without the program or its framework, from "
             "this folder:", "", "```", repro.command_in(Path(".")), "```", "",
             "`out/output_<i>.npy` then holds what DISC's native code computes.", ""]
    if repro.inputs_kind == "recorded":
        lines.append("Inputs: recorded, the cluster's real inputs on its first call; "
                     "`expected/framework_<i>.npy` is what the framework computed from them.")
    else:
        sizes = ", ".join(f"{k}={v}" for k, v in sorted((bindings or {}).items())) or "none"
        lines.append("Inputs: synthetic, random arrays matching the signature (size symbols: "
                     f"{sizes}); the framework's outputs were not recorded.")
    lines += ["`expected/reference_<i>.npy` is what the reference interpreter computes.", "",
              "Signature:", ""]
    lines += [f"* input #{i} `{s.name}`: {s.dtype} {list(s.dims)}" for i, s in
              enumerate(sig.inputs)]
    lines += [f"* output #{i} `{s.name}`: {s.dtype} {list(s.dims)}" for i, s in
              enumerate(sig.outputs)]
    lines += ["", "Checks:", ""] + [f"* {c.what}: {c.detail}" for c in repro.checks]
    lines += ["", f"Verdict: {repro.verdict}", ""]
    return "\n".join(lines)
