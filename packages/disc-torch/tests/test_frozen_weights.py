"""aot_compile(freeze_weights=True): GEMM weights kept in MKL's packed format between calls.

Results are checked against the model's own eager result on row counts below, inside and
above the range where the modules pack (16-127 rows), and the modules' own pack counters
say whether packing happened: once per weight while it is unchanged, again after a change
torch's version counter sees or ``refresh_weights``, never for an unfrozen model."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn as nn
from helpers import assert_same

from disc_runtime import native
from disc_torch import aot_compile, aot_load, frozen_weights
from disc_torch.blas import torch_blas_library


@pytest.fixture(autouse=True)
def torch_mkl(monkeypatch):
    """Modules run torch's MKL here, wherever the process's measured choice would put
    f32 GEMMs (oneDNN on some AMD parts): packing is MKL's."""
    lib = torch_blas_library()
    if lib is None:
        pytest.skip("this torch has no MKL (packed GEMMs are MKL's)")
    monkeypatch.setenv("DISC_BLAS_LIB", str(lib))
    native.blas_functions.cache_clear()
    assert all(native.packed_gemm_functions()), native.blas_choice()
    yield
    monkeypatch.undo()
    native.blas_functions.cache_clear()


class Mlp(nn.Module):
    """LayerNorm (a GEMM prologue), Linear + GELU (an epilogue), Linear + residual."""

    def __init__(self, d: int = 64, hidden: int = 256):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln(x))))


def packs(compiled) -> int:
    return sum(c._pointer._module.packs_made() for c in compiled._graph.clusters
               if c._pointer is not None)


def make(seed: int = 0, **kw):
    torch.manual_seed(seed)
    model = Mlp(**kw).eval()
    return model, aot_compile(model, (torch.randn(2, 5, model.ln.normalized_shape[0]),),
                              freeze_weights=True)


def test_frozen_weights_match_eager_on_every_row_count():
    model, compiled = make()
    assert packs(compiled) == 0
    with torch.no_grad():
        # rows = batch x length: 0 and 1, below the packing range, inside it (batches
        # flattened), and above it
        for shape in [(0, 3), (1, 1), (2, 4), (1, 16), (3, 7), (4, 31), (2, 100), (3, 129)]:
            x = torch.randn(*shape, 64)
            assert_same(compiled(x), model(x))
    # both GEMMs packed their weight once, on the first call inside the range
    assert packs(compiled) == 2


class Conv1D(nn.Module):
    """transformers' GPT-2 projection: the weight laid out [in, out], x @ w + b."""

    def __init__(self, nx: int = 64, nf: int = 192):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = nn.Parameter(torch.randn(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (*x.shape[:-1], self.weight.shape[1])
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(shape)


def test_a_weight_laid_out_in_by_out_is_left_to_plain_sgemm():
    """[K, N] weights measured no faster packed (library.packable_weight): they stay
    unpacked, with the right results."""
    torch.manual_seed(0)
    model = Conv1D().eval()
    compiled = aot_compile(model, (torch.randn(2, 5, 64),), freeze_weights=True)
    with torch.no_grad():
        for shape in [(1, 3), (2, 9), (1, 40), (2, 70)]:
            x = torch.randn(*shape, 64)
            assert_same(compiled(x), model(x))
    assert packs(compiled) == 0


def test_changed_weights_are_packed_again():
    model, compiled = make()
    x = torch.randn(2, 20, 64)
    with torch.no_grad():
        assert_same(compiled(x), model(x))
        assert packs(compiled) == 2
        assert_same(compiled(x), model(x))
        assert packs(compiled) == 2  # the same stamps: the packed panels are reused
        model.fc.weight.mul_(2)  # in place: the version counter moves
        assert_same(compiled(x), model(x))
        assert packs(compiled) == 3
        model.load_state_dict(Mlp().state_dict())
        assert_same(compiled(x), model(x))
        assert packs(compiled) == 5
        # a write the version counter does not see is the caller's to announce
        model.out.weight.data.copy_(torch.randn_like(model.out.weight))
        compiled.refresh_weights()
        assert_same(compiled(x), model(x))
        assert packs(compiled) == 7


def test_unfrozen_models_never_pack_and_frozen_ones_keep_their_own_weights():
    model, plain = Mlp().eval(), None
    plain = aot_compile(model, (torch.randn(2, 5, 64),))
    x = torch.randn(2, 20, 64)
    with torch.no_grad():
        assert_same(plain(x), model(x))
        assert packs(plain) == 0
        # two frozen models of one architecture share the native module (one compile-cache
        # entry), so its slots hold one model's packed weights at a time: alternating calls
        # pack again, and each model still gets its own results
        a, ca = make(seed=1)
        b, cb = make(seed=2)
        for _ in range(2):
            assert_same(ca(x), a(x))
            assert_same(cb(x), b(x))


def test_concurrent_calls_on_frozen_weights():
    model, compiled = make()
    xs = [torch.randn(2, 8 + i, 64) for i in range(4)]
    with torch.no_grad():
        want = [model(x) for x in xs]
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with torch.no_grad():
                for _ in range(20):
                    for x, w in zip(xs, want):
                        assert_same(compiled(x), w)
        except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert packs(compiled) == 2


def test_f64_weights_are_not_packed():
    torch.manual_seed(0)
    model = Mlp().double().eval()
    compiled = aot_compile(model, (torch.randn(2, 5, 64, dtype=torch.float64),),
                           freeze_weights=True)
    x = torch.randn(2, 20, 64, dtype=torch.float64)
    with torch.no_grad():
        assert_same(compiled(x), model(x))
    assert packs(compiled) == 0


def test_saved_models_keep_the_freeze_choice(tmp_path):
    model, compiled = make()
    path = tmp_path / "mlp.disc"
    compiled.save(path)
    x = torch.randn(2, 20, 64)
    loaded = aot_load(path)
    assert loaded.freeze_weights
    assert not aot_load(path, freeze_weights=False).freeze_weights
    with torch.no_grad():
        assert_same(loaded(x), model(x))


def test_a_dead_model_leaves_no_frozen_entry():
    import gc

    before = len(frozen_weights._FROZEN)
    model, compiled = make()
    assert len(frozen_weights._FROZEN) > before
    del model, compiled
    gc.collect()
    assert len(frozen_weights._FROZEN) == before


def _live_cluster_packs() -> int:
    """Packs made by the native modules of every live cluster (torch.compile's clusters
    are not reachable from the compiled function)."""
    import gc

    from disc_torch.cluster import ClusterModule

    modules = {}
    for obj in gc.get_objects():
        try:
            if type(obj) is ClusterModule and obj._pointer is not None:
                modules[id(obj._pointer._module)] = obj._pointer._module
        except ReferenceError:  # a dead weak proxy
            continue
    return sum(m.packs_made() for m in modules.values())


def test_torch_compile_packs_the_weights_of_a_frozen_module():
    import disc_torch

    torch.manual_seed(3)
    model = disc_torch.freeze_weights(Mlp(d=48, hidden=160).eval())
    compiled = torch.compile(model, backend="disc", dynamic=True)
    before = _live_cluster_packs()
    try:
        with torch.no_grad():
            # batches of 2 or more: torch.compile traces a batch of 1 as a graph of its own
            for shape in [(2, 9), (2, 40), (3, 21), (2, 3), (2, 90)]:
                x = torch.randn(*shape, 48)
                assert_same(compiled(x), model(x))
            assert _live_cluster_packs() - before == 2
            model.fc.weight.add_(0.5)
            x = torch.randn(2, 9, 48)
            assert_same(compiled(x), model(x))
            assert _live_cluster_packs() - before == 3
            disc_torch.unfreeze_weights(model)
            model.out.weight.add_(0.5)
            assert_same(compiled(x), model(x))
            assert _live_cluster_packs() - before == 3
    finally:
        disc_torch.unfreeze_weights(model)
