"""disc_torch.report(): this process's coverage report of torch graphs only, with per-step
kernel times when profiling is on."""

import torch
import torch._dynamo

import disc_torch
from disc_core import report


def test_report_lists_only_torch_graphs() -> None:
    collector = report.get_collector()
    for fw, name in (("torch", "mine"), ("tensorflow", "theirs")):
        collector.add_graph(report.GraphReport(name=name, run=""), framework=fw)
    names = [g.name for g in disc_torch.report().graphs]
    assert "mine" in names and "theirs" not in names
    assert {r.framework for r in disc_torch.report().runs} == {"torch"}


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8),
                               torch.nn.LayerNorm(8))


def _profiled_clusters(r: report.Report) -> list[report.ClusterRecord]:
    return [c for g in r.graphs for c in g.clusters if c.profile is not None]


def test_profile_option_times_every_step_of_every_cluster() -> None:
    model = _mlp()
    fn = disc_torch.optimize(model, profile=True)
    with torch.no_grad():
        for n in (3, 7, 1, 40):
            x = torch.randn(n, 16)
            torch.testing.assert_close(fn(x), model(x), rtol=1e-4, atol=1e-5)
    r = disc_torch.report()
    clusters = _profiled_clusters(r)
    assert clusters, "no cluster carries a profile"
    for c in clusters:
        assert c.profile[0].kind == "host"
        assert {k.calls for k in c.profile} == {c.calls}
        assert "library" in {k.kind for k in c.profile}  # the GEMMs
        # GELU and LayerNorm are timed too: in kernels of their own, or in the GEMM step
        # that runs them as its epilogue (the entry lists the ops it runs)
        timed = {op for k in c.profile for op in k.ops}
        assert {"dot_general", "erf", "rsqrt"} <= timed, timed
        assert all(k.seconds > 0 for k in c.profile)
        assert sum(k.seconds for k in c.profile) <= c.seconds
    hottest = max((k for c in clusters for k in c.profile), key=lambda k: k.seconds)
    text = report.render_text(r)
    assert "Kernel time" in text and hottest.name in text


def test_profiling_is_off_unless_asked_for(monkeypatch) -> None:
    model = _mlp()
    with torch.no_grad():
        disc_torch.optimize(model)(torch.randn(5, 16))
    assert not _profiled_clusters(disc_torch.report())
    monkeypatch.setenv("DISC_PROFILE", "1")
    torch._dynamo.reset()
    with torch.no_grad():
        disc_torch.optimize(_mlp())(torch.randn(5, 16))
    assert _profiled_clusters(disc_torch.report())


def test_each_cluster_names_its_engine_and_only_native_counts() -> None:
    import warnings

    from disc_core.bridge import fallback

    model = _mlp()
    torch._dynamo.reset()
    compiled = disc_torch.optimize(model)
    with torch.no_grad():
        for batch in (3, 5):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x))
    clusters = [c for g in disc_torch.report().graphs for c in g.clusters]
    assert clusters and {c.engine for c in clusters} == {report.Engine.NATIVE}

    fallback._warned.clear()  # warn_once's memory: this test counts the warnings itself
    report.get_collector().clear()
    torch._dynamo.reset()
    interpreted = disc_torch.optimize(model, target="reference")
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for batch in (3, 5, 7):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(interpreted(x), model(x))
    graphs = disc_torch.report().graphs
    assert {c.engine for g in graphs for c in g.clusters} == {report.Engine.REFERENCE}
    summary = disc_torch.report().summary()
    assert summary.compiled == 0 and summary.interpreted == summary.ops > 0, summary
    said = [str(w.message) for w in caught if "reference interpreter" in str(w.message)]
    assert len(said) == 1, said
