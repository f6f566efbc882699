"""Synthetic reports shared by the report tests (no framework needed to make them)."""

from __future__ import annotations

from disc_core.report import (
    ClusterRecord,
    Engine,
    GraphReport,
    KernelTime,
    NodeRecord,
    ReasonCode,
    Report,
    RunInfo,
    Status,
)

HOSTILE_OP = '<script>alert("x")</script> & a|b `c` *d* </table>'


def run(framework: str | None, run_id: str, version: str | None = None) -> RunInfo:
    return RunInfo(
        id=run_id,
        framework=framework,
        framework_version=version,
        disc_versions={"disc-core": "0.1.0", "disc-runtime": "0.1.0"},
        device="cpu",
        started_at="2025-01-02T03:04:05Z",
        python="3.11.7",
        host="ci",
        pid=42,
    )


def graph(
    name: str,
    run_id: str,
    clusters: list[list[tuple[str, int]]],
    fallbacks: list[tuple[str, ReasonCode, int]],
    *,
    kernels: int | None = None,
) -> GraphReport:
    """``clusters``: per cluster, (op, count) pairs; ``fallbacks``: (op, reason, count)."""
    nodes: list[NodeRecord] = []
    records: list[ClusterRecord] = []
    for cid, ops in enumerate(clusters):
        names = []
        for op, count in ops:
            for _ in range(count):
                names.append(f"n{len(nodes)}")
                nodes.append(NodeRecord(names[-1], op, Status.COMPILED, cluster=cid, flops=10.0))
        records.append(ClusterRecord(
            id=cid, nodes=names, fusions=kernels, kernels=kernels, compile_seconds=0.25,
            cache_misses=1, cache_hits=2, calls=10, seconds=0.5, engine=Engine.NATIVE,
        ))
    for op, reason, count in fallbacks:
        for _ in range(count):
            nodes.append(NodeRecord(
                f"n{len(nodes)}", op, Status.FALLBACK, reason=reason, detail=f"{op}: why",
                flops=1.0,
            ))
    return GraphReport(name=name, run=run_id, nodes=nodes, clusters=records, calls=10,
                       fallback_seconds=0.125)


def issue_example() -> Report:
    """142 ops, 138 compiled, 3 clusters, 9 kernels, 4 fallbacks (nonzero x2 first)."""
    g = graph(
        "forward", "r-torch",
        [[("aten.add", 40), ("aten.mul", 20)], [("aten.mm", 38)], [("aten.relu", 40)]],
        [("aten.nonzero", ReasonCode.DATA_DEPENDENT_SHAPE, 2),
         ("aten.item", ReasonCode.DATA_DEPENDENT_SHAPE, 1),
         ("aten.fft_fft", ReasonCode.NO_CONVERTER, 1)],
        kernels=3,
    )
    return Report(runs=[run("torch", "r-torch", "2.13.0")], graphs=[g])


def torch_report() -> Report:
    g = graph("forward", "r-torch", [[("aten.add", 3), ("aten.exp", 2)]],
              [("aten.nonzero", ReasonCode.DATA_DEPENDENT_SHAPE, 1)], kernels=1)
    return Report(runs=[run("torch", "r-torch", "2.13.0")], graphs=[g])


def tf_report() -> Report:
    g = graph("serving_default", "r-tf", [[("AddV2", 4), ("Exp", 1)], [("MatMul", 2)]],
              [("Where", ReasonCode.DATA_DEPENDENT_SHAPE, 1),
               ("StringSplit", ReasonCode.UNSUPPORTED_DTYPE, 2)])
    return Report(runs=[run("tensorflow", "r-tf", "2.21.0")], graphs=[g])


def all_fallback() -> Report:
    g = graph("eager_only", "r-p", [], [("pd_op.where", ReasonCode.NO_CONVERTER, 3),
                                        ("pd_op.foo", ReasonCode.EXCLUDED_BY_USER, 1)])
    return Report(runs=[run("paddle", "r-p", "3.3.1")], graphs=[g])


def empty_graph() -> Report:
    return Report(runs=[run("torch", "r-e")], graphs=[GraphReport(name="nothing", run="r-e")])


def hostile() -> Report:
    g = graph("<graph & co>", "r-h", [[(HOSTILE_OP, 2)]],
              [(HOSTILE_OP, ReasonCode.NO_CONVERTER, 1)])
    g.nodes[-1].detail = "</td><img src=x onerror=alert(1)>"
    return Report(runs=[run("torch", "r-h")], graphs=[g])


def profiled() -> Report:
    """``torch_report`` with cluster 0 profiled: 12 steps (2 folded into "+2 more"), the
    GEMM hottest though listed last, a host step, a long op list and a hostile shape."""
    report = torch_report()
    steps = [KernelTime(f"kernel{i}", "kernel", ["add", "exp"], 10, 0.001 * (i + 1),
                        f"[s0, {i}]") for i in range(10)]
    steps.append(KernelTime("host", "host", [], 10, 0.0005))
    steps.append(KernelTime("gemm0", "library", ["dot_general"], 10, 0.05, "[s0, 64] x [64, 32]"))
    steps[3].ops = [f"op_{i}" for i in range(9)]
    steps[4].shape = "<s0> & |s1|"
    report.graphs[0].clusters[0].profile = steps
    return report
