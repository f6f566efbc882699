"""The traced-graph cache (disc_torch.precompile): a new process with the same model and
code runs without tracing, with the same results; anything stale or damaged costs a trace,
never the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    import torch, torch.nn as nn, torch.nn.functional as F
    import disc_torch
    from torch._dynamo.utils import counters

    HIDDEN = int(sys.argv[1])
    SHAPES = [int(s) for s in sys.argv[2].split(",")]
    OPTIONS = json.loads(sys.argv[3])
    TRAIN = sys.argv[4] == "both"

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, HIDDEN)
            self.norm = nn.LayerNorm(HIDDEN)
            self.head = nn.Linear(HIDDEN, 4)

        def forward(self, x, y):
            h = F.gelu(self.norm(self.proj(x))) * torch.sigmoid(x.sum(-1, keepdim=True))
            return F.cross_entropy(self.head(h).flatten(0, 1), y.flatten())

    torch.manual_seed(0)
    model = Net()
    reference = Net()
    reference.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = disc_torch.optimize(model, **OPTIONS)
        g = torch.Generator().manual_seed(1)
        out = {"losses": [], "eager": [], "inference": []}
        for seq in SHAPES:
            x = torch.randn(2, seq, 8, generator=g)
            y = torch.randint(0, 4, (2, seq), generator=g)
            with torch.no_grad():
                out["inference"].append([run(x, y).item(), reference(x, y).item()])
            if not TRAIN:
                continue
            loss = run(x, y)
            loss.backward()
            opt.step(); opt.zero_grad()
            ref = reference(x, y)
            ref.backward()
            ref_opt.step(); ref_opt.zero_grad()
            out["losses"].append(loss.item())
            out["eager"].append(ref.item())
    report = disc_torch.report()
    out.update(
        traced=int(counters["stats"]["unique_graphs"]),
        disc_compiles=disc_torch.compile_count(),
        graphs=len(report.graphs),
        cluster_hits=sum(c.cache_hits for g in report.graphs for c in g.clusters),
        cluster_calls=sum(c.calls for g in report.graphs for c in g.clusters),
        warnings=[str(w.message) for w in caught if "DISC" in str(w.message)],
        weights=float(sum(p.detach().double().sum() for p in model.parameters())),
        ref_weights=float(sum(p.detach().double().sum() for p in reference.parameters())),
    )
    print("RESULT" + json.dumps(out))
""")


def _run(tmp_path: Path, cache: Path, hidden: int = 16, shapes: str = "3,1,6",
         options: dict | None = None, modes: str = "both") -> dict:
    script = tmp_path / "cached_model.py"
    if not script.exists():
        script.write_text(SCRIPT)
    env = {**os.environ, "DISC_CACHE_DIR": str(cache),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("DISC_CACHE_GRAPHS", None)
    proc = subprocess.run([sys.executable, str(script), str(hidden), shapes,
                           json.dumps(options or {}), modes], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(s for s in proc.stdout.splitlines() if s.startswith("RESULT"))
    return {**json.loads(line[len("RESULT"):]), "stderr": proc.stderr}


def _packages(cache: Path) -> list[Path]:
    return sorted((cache / "torch-graphs-v1").glob("*.pkl"))


def _assert_matches_eager(out: dict) -> None:
    for got, want in zip(out["losses"], out["eager"]):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    for got, want in out["inference"]:
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert out["weights"] == pytest.approx(out["ref_weights"], rel=1e-5, abs=1e-5)


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """One cold and one warm process over the same cache (training and inference)."""
    tmp = tmp_path_factory.mktemp("graph-cache")
    cache = tmp / "disc-cache"
    cold = _run(tmp, cache)
    packages = _packages(cache)
    hot = _run(tmp, cache, shapes="3,1,6,11")  # 11: a length the first process never saw
    return tmp, cache, cold, hot, packages


def test_cold_process_traces_and_writes_one_package(warm):
    _, _, cold, _, packages = warm
    assert cold["traced"] == 2  # one graph with grad (training), one without (inference)
    assert cold["disc_compiles"] >= 1
    assert len(packages) == 1
    _assert_matches_eager(cold)


def test_warm_process_runs_without_tracing_or_compiling(warm):
    _, _, cold, hot, _ = warm
    assert hot["traced"] == 0, "dynamo traced again in the warm process"
    assert hot["disc_compiles"] == 0, "DISC compiled again in the warm process"
    assert not hot["warnings"], hot["warnings"]
    # the same compiled code on the same data: the same numbers, bit for bit
    assert hot["losses"][:3] == cold["losses"]
    assert [i[0] for i in hot["inference"][:3]] == [i[0] for i in cold["inference"]]
    _assert_matches_eager(hot)


def test_warm_process_reports_the_loaded_graphs(warm):
    _, _, cold, hot, _ = warm
    assert hot["graphs"] == cold["graphs"] >= 3  # inference, forward, backward
    assert hot["cluster_hits"] >= 1 and hot["cluster_calls"] >= 1


def test_a_different_model_gets_its_own_package(warm):
    tmp, cache, _, _, _ = warm
    before = set(_packages(cache))
    other = _run(tmp, cache, hidden=24)
    assert other["traced"] == 2
    assert len(set(_packages(cache)) - before) == 1
    _assert_matches_eager(other)


def test_damaged_package_warns_and_traces_again(warm, tmp_path):
    tmp, cache, _, _, _ = warm
    copy = tmp_path / "damaged"
    subprocess.run(["cp", "-r", str(cache), str(copy)], check=True)
    for package in _packages(copy):
        package.write_bytes(b"not a pickle")
    out = _run(tmp, copy)
    assert out["traced"] == 2
    assert any("cannot be used" in w for w in out["warnings"]), out["warnings"]
    _assert_matches_eager(out)
    # and it is rewritten: the next process is warm again
    assert _run(tmp, copy)["traced"] == 0


def test_cache_graphs_off_writes_nothing(tmp_path):
    cache = tmp_path / "disc-cache"
    out = _run(tmp_path, cache, options={"cache_graphs": False})
    assert not _packages(cache)
    assert _run(tmp_path, cache, options={"cache_graphs": False})["traced"] == 2
    _assert_matches_eager(out)


def test_a_loaded_package_grows_and_keeps_what_it_had(tmp_path):
    """Inference in one process, training in the next (which loads the inference graph
    and traces only the training one), both in a third without tracing."""
    cache = tmp_path / "disc-cache"
    assert _run(tmp_path, cache, modes="infer")["traced"] == 1
    grown = _run(tmp_path, cache)
    assert grown["traced"] == 1  # the training graph only
    _assert_matches_eager(grown)
    both = _run(tmp_path, cache)
    assert both["traced"] == 0 and both["disc_compiles"] == 0
    assert both["losses"] == grown["losses"]
    assert len(_packages(cache)) == 1


def test_an_edited_forward_is_traced_again(tmp_path):
    cache = tmp_path / "disc-cache"
    assert _run(tmp_path, cache)["traced"] == 2
    script = tmp_path / "cached_model.py"
    script.write_text(script.read_text().replace("torch.sigmoid(", "torch.tanh("))
    edited = _run(tmp_path, cache)
    assert edited["traced"] == 2, "the edited forward ran from the old package"
    _assert_matches_eager(edited)


def _script_variant(tmp_path: Path, *edits: tuple[str, str]) -> None:
    """Write the test script with ``edits`` (old, new) applied, each exactly once."""
    text = SCRIPT
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (tmp_path / "cached_model.py").write_text(text)


#: the loss comes from a property whose getter dynamo cannot inline (a graph break
#: inside): dynamo compiles the getter as a frame of its own, which it has no dotted name
#: for (transformers' ``loss_function`` under GPT-2 with labels)
PROPERTY_LOSS = (
    ("    def forward(self, x, y):",
     "    @property\n"
     "    def loss_fn(self):\n"
     "        torch._dynamo.graph_break()\n"
     "        return F.cross_entropy\n\n"
     "    def forward(self, x, y):"),
    ("return F.cross_entropy(", "return self.loss_fn("),
)

#: forward wrapped twice by decorators of another module (``wrappers.py``, written next to
#: the script), as transformers' ``deprecate_kwarg`` wraps ``can_return_tuple``: the outer
#: wrapper takes ``*a`` (the module among them), closes over a flag and formats the
#: wrapped function's name; a submodule's decorated forward is inlined, and dynamo guards
#: the function its wrapper closes over through ``a[0]``
DECORATED_FORWARD = (
    ("class Net(nn.Module):",
     "from wrappers import flagged, outer\n\n"
     "class Head(nn.Linear):\n"
     "    @outer\n"
     "    def forward(self, x):\n"
     "        return super().forward(x)\n\n"
     "class Net(nn.Module):"),
    ("self.head = nn.Linear(HIDDEN, 4)", "self.head = Head(HIDDEN, 4)"),
    ("    def forward(self, x, y):",
     "    @flagged(False)\n    @outer\n    def forward(self, x, y):"),
)
WRAPPERS = textwrap.dedent("""
    import functools

    def outer(func):
        @functools.wraps(func)
        def wrapper(self, *a, **k):
            return func(self, *a, **k)
        return wrapper

    def flagged(enabled):
        def deco(func):
            @functools.wraps(func)
            def wrapped(*a, **k):
                name = f"{a[0].__class__.__name__}.{func.__name__}"  # for a message
                if enabled:
                    print("flag on", name)
                return func(*a, **k)
            return wrapped
        return deco
""")


def test_a_frame_dynamo_cannot_name_runs_and_the_rest_is_kept(tmp_path):
    """dynamo raised PackageError out of the user's call for such a frame; now it is
    compiled and run as usual and left out of the package, which a new process loads."""
    cache = tmp_path / "disc-cache"
    _script_variant(tmp_path, *PROPERTY_LOSS)
    cold = _run(tmp_path, cache)
    _assert_matches_eager(cold)
    assert not [w for w in cold["warnings"] if "cache" in w], cold["warnings"]
    assert len(_packages(cache)) == 1
    hot = _run(tmp_path, cache, shapes="3,1,6,11")
    _assert_matches_eager(hot)
    assert not hot["warnings"], hot["warnings"]
    assert hot["traced"] < cold["traced"], (hot["traced"], cold["traced"])
    assert hot["losses"][:3] == cold["losses"]


def test_a_decorated_forward_is_kept(tmp_path):
    """dynamo wrote the function a decorator wraps as a placeholder (its qualified name
    leads to the wrapper) and filed the frame under the wrapped function's module: the
    package did not install in the next process, which traced again (every transformers
    model optimized directly). Both are kept now."""
    cache = tmp_path / "disc-cache"
    _script_variant(tmp_path, *DECORATED_FORWARD)
    (tmp_path / "wrappers.py").write_text(WRAPPERS)
    cold = _run(tmp_path, cache)
    _assert_matches_eager(cold)
    assert not cold["warnings"], cold["warnings"]
    hot = _run(tmp_path, cache, shapes="3,1,6,11")
    _assert_matches_eager(hot)
    assert hot["traced"] == 0, hot["warnings"]
    assert not hot["warnings"], hot["warnings"]
    assert hot["losses"][:3] == cold["losses"]


#: the output is an OrderedDict subclass (transformers' ModelOutput) in a module that does
#: not name ``collections``: dynamo's code rebuilds it through a global it installs under
#: an id-based name (``___module_collections_<id>_c0``) and its package does not record
MODEL_OUTPUT = (
    ("class Net(nn.Module):",
     "from collections import OrderedDict\n\n"
     "class Out(OrderedDict):\n"
     "    def item(self):\n"
     "        return self['loss'].item()\n\n"
     "    def backward(self):\n"
     "        self['loss'].backward()\n\n"
     "class Net(nn.Module):"),
    ("return F.cross_entropy(self.head(h).flatten(0, 1), y.flatten())",
     "return Out(loss=F.cross_entropy(self.head(h).flatten(0, 1), y.flatten()))"),
)


def test_an_output_rebuilt_through_an_installed_module_global_is_kept(tmp_path):
    cache = tmp_path / "disc-cache"
    _script_variant(tmp_path, *MODEL_OUTPUT)
    cold = _run(tmp_path, cache)
    _assert_matches_eager(cold)
    hot = _run(tmp_path, cache, shapes="3,1,6,11")
    _assert_matches_eager(hot)
    assert hot["traced"] == 0, hot["warnings"]
    assert not hot["warnings"], hot["warnings"]


def _strip_backends(package: Path) -> None:
    """Make ``package`` read back whole and fail to install (its graphs are gone)."""
    import pickle

    entry, pins, module_globals = pickle.loads(package.read_bytes())
    entry.backends.clear()
    package.write_bytes(pickle.dumps((entry, pins, module_globals)))


def test_a_package_that_does_not_install_is_not_written_again(tmp_path):
    """A package that reads back whole and does not install. Its partial install is undone
    (it used to collide with the trace that followed: "Name '__builtins_dict___0' already
    exists in scope"), the process traces and runs, and from then on no process writes or
    reads a package for that callable."""
    cache = tmp_path / "disc-cache"
    cold = _run(tmp_path, cache)
    _assert_matches_eager(cold)
    (package,) = _packages(cache)
    _strip_backends(package)
    written = package.stat().st_mtime_ns
    second = _run(tmp_path, cache)
    _assert_matches_eager(second)
    assert second["traced"] == cold["traced"]
    assert any("cannot be kept on disk" in w for w in second["warnings"]), second["warnings"]
    # that warning says it once; torch's traceback per guard is not repeated to the user
    assert "Error while creating guard" not in second["stderr"], second["stderr"][-2000:]
    assert package.with_suffix(".unusable").exists()
    third = _run(tmp_path, cache)
    _assert_matches_eager(third)
    assert any("an earlier process found" in w for w in third["warnings"]), third["warnings"]
    assert package.stat().st_mtime_ns == written


def test_code_without_a_source_file_is_not_cached(tmp_path):
    code = ("import torch, disc_torch\n"
            "f = disc_torch.optimize(lambda x: torch.relu(x) * 2 + 1)\n"
            "x = torch.randn(4)\n"
            "assert torch.allclose(f(x), torch.relu(x) * 2 + 1)\n")
    cache = tmp_path / "disc-cache"
    proc = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DISC_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not _packages(cache)


# -- identity guards (disc_torch.identity): what dynamo cannot keep, DISC checks ----------

import torch  # noqa: E402

import disc_torch  # noqa: E402


def test_a_function_argument_that_changes_is_never_run_as_the_old_one():
    x = torch.randn(5)

    def f(t, op):
        return op(t) + 1

    compiled = disc_torch.optimize(f)
    with pytest.warns(UserWarning, match="traced-graph cache is off"):
        for op in (torch.sin, torch.cos, torch.sin, torch.exp):
            torch.testing.assert_close(compiled(x, op), op(x) + 1)


def _times_three(op):
    return lambda t: op(t) * 3


def test_closures_of_one_code_over_different_functions_are_told_apart():
    """Same code, same qualified name and line: one package key. The closure's callee is
    pinned, so the second and third do not run the first's graph."""
    x = torch.randn(5)
    with pytest.warns(UserWarning, match="traced-graph cache is off"):
        for op in (torch.sin, torch.cos, torch.exp):
            torch.testing.assert_close(disc_torch.optimize(_times_three(op))(x), op(x) * 3)


class _WithAct(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.act = act  # a plain function: not in repr(module), so not in the package key
        self.lin = torch.nn.Linear(5, 5)

    def forward(self, t):
        return self.act(self.lin(t)) * 2


def test_function_attributes_of_same_looking_modules_are_told_apart():
    x = torch.randn(3, 5)
    with pytest.warns(UserWarning, match="traced-graph cache is off"):
        for act in (torch.tanh, torch.sigmoid):
            module = _WithAct(act)
            torch.testing.assert_close(disc_torch.optimize(module)(x), module(x))


def test_a_torch_module_keeps_the_cache(recwarn):
    """For nn.Conv2d, dynamo's guards name module aliases that are not in its forward's
    globals; the pins resolve them (no fallback to full guards)."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 8, 8)
    for _ in range(2):  # the second optimize loads the package the first wrote
        torch.testing.assert_close(disc_torch.optimize(conv)(x), conv(x))
    assert not [w for w in recwarn if "cache is off" in str(w.message)]


DDP_SCRIPT = textwrap.dedent("""
    import warnings
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import disc_torch

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                                    torch.nn.Linear(16, 8))
    reference.load_state_dict(model.state_dict())
    warnings.simplefilter("always")
    run = disc_torch.optimize(DDP(model))
    for n in (3, 5, 7):
        x = torch.randn(n, 8)
        torch.testing.assert_close(run(x), reference(x), rtol=1e-5, atol=1e-5)
        run(x).sum().backward()
        reference(x).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    dist.destroy_process_group()
""")


def test_a_ddp_module_is_optimized_without_a_graph_package(tmp_path):
    """dynamo traces DDP's own forward (its guards name locals DISC cannot pin) and splits
    it per gradient bucket: optimize() keeps no package for it, rather than writing one that
    turns the cache off (and traces again) on the next call."""
    script = tmp_path / "ddp_script.py"
    script.write_text(DDP_SCRIPT)
    cache = tmp_path / "disc-cache"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "DISC_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cache is off" not in proc.stderr, proc.stderr[-3000:]
    assert not _packages(cache)


class _TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(6, 6), torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).sum()


def test_a_package_failure_inside_dynamo_falls_back_to_tracing_without_it(monkeypatch):
    """Whatever else dynamo's package bookkeeping raises while compiling (here: every
    frame it records) costs the cache, not the call: the call runs without it, once."""
    from torch._dynamo.exc import PackageError

    import disc_torch.precompile as precompile

    def failing(package):
        def code_context(code):
            raise PackageError(f"simulated: cannot record {code.co_name}")
        package.code_context = code_context

    monkeypatch.setattr(precompile, "_record_unnamed_frames", failing)
    torch.manual_seed(0)
    model, reference = _TwoLayers(), _TwoLayers()
    reference.load_state_dict(model.state_dict())
    run = disc_torch.optimize(model)
    with pytest.warns(UserWarning, match="cache is off.*simulated: cannot record forward"):
        for n in (4, 7):
            x = torch.randn(n, 6)
            got, want = run(x), reference(x)
            torch.testing.assert_close(got, want)
            got.backward()
            want.backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert disc_torch.compile_count() >= 1
