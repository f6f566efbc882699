"""The coverage report: what ran compiled, what fell back to the framework, and why.

One model for every bridge, so a TensorFlow report and a PyTorch report read, render and
merge the same way. It is plain data (dataclasses of str/int/float/enum) with a JSON form
that is versioned by :data:`SCHEMA_VERSION` and documented field by field in
``docs/report-schema.md``; change both together.

Invariants (checked by :meth:`Report.validate`, and therefore on every load):

* node names are unique within a graph; cluster ids are unique within a graph;
* a compiled node has no reason and belongs to a cluster; a fallback node has a reason;
* ``node.cluster`` and ``cluster.nodes`` agree, and all nodes of a cluster share one status;
  a fallback node inside a cluster fell back because that cluster failed
  (``compile_error``, ``runtime_error`` or ``accuracy_mismatch``) or because the user
  left that cluster out (``excluded_by_user``: ``DISC_BISECT_CLUSTERS``);
* a cluster's ``engine`` agrees with its nodes: ``framework`` exactly when they fell back
  (absent: not compiled yet, or a file from before engines were recorded);
* every graph names a run of the same report, and run ids are unique.
"""

from __future__ import annotations

import copy
import enum
import json
import os
import platform
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ._fields import Fields, ReportFormatError
from .codes import (
    CLUSTER_FAILURES,
    CLUSTER_FALLBACKS,
    CODE_SCHEMA_VERSION,
    Engine,
    ReasonCode,
    Status,
)

if TYPE_CHECKING:
    from .summary import Summary

__all__ = [
    "KERNEL_KINDS",
    "SCHEMA_NAME",
    "MIN_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "ClusterRecord",
    "Engine",
    "GraphReport",
    "KernelTime",
    "NodeRecord",
    "ReasonCode",
    "Report",
    "ReportFormatError",
    "RunInfo",
    "SchemaVersionError",
    "Status",
]

#: Value of the top-level ``"schema"`` field: tells a DISC report from any other JSON file.
SCHEMA_NAME = "disc-report"
#: Bumped only for changes an older reader would misread (see docs/report-schema.md).
#: Version 2 added the reason codes ``accuracy_mismatch`` and ``framework_op`` and the
#: cluster ``engine``.
SCHEMA_VERSION = 2
#: The oldest version this disc-core reads (every version since only added reason codes and
#: optional fields; a version-1 file's clusters have no engine: "not built").
MIN_SCHEMA_VERSION = 1


class SchemaVersionError(ReportFormatError):
    """The file is a DISC report of a schema version this disc-core cannot read."""


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    """Writers omit absent optional fields: smaller files, and readers treat both alike."""
    if value is not None:
        out[key] = value.value if isinstance(value, enum.Enum) else value


def _texts(f: Fields, key: str) -> list[str]:
    """An array of strings (node names, op names), each item checked so a bad one is named."""
    items = f.array(key)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise ReportFormatError(f"{f.where(key)}[{i}]: expected a string")
    return list(items)


@dataclass
class NodeRecord:
    """One framework node of a captured graph."""

    name: str
    op: str
    status: Status
    reason: ReasonCode | None = None
    detail: str | None = None
    cluster: int | None = None
    flops: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "op": self.op, "status": self.status.value}
        for key in ("reason", "detail", "cluster", "flops"):
            _put(out, key, getattr(self, key))
        return out

    @classmethod
    def from_dict(cls, data: object, path: str = "node") -> NodeRecord:
        f = Fields(data, path)
        return cls(
            name=f.text("name"),
            op=f.text("op"),
            status=f.choice("status", Status),
            reason=f.choice("reason", ReasonCode, optional=True),
            detail=f.text("detail", optional=True),
            cluster=f.count("cluster", optional=True),
            flops=f.number("flops", optional=True),
        )


#: Kinds of profiled step the native engine reports: a generated kernel, a library call (a
#: GEMM), a scatter or scan loop, and the module's host work around them. Readers accept
#: other kinds too (shown as they are), so a new kind of step needs no schema version.
KERNEL_KINDS = ("kernel", "library", "scatter", "scan", "host")


@dataclass
class KernelTime:
    """How long one step of a compiled cluster took over the profiled calls.

    A step is what the native module runs one after the other: a generated kernel
    (``kernel3``), a library call (``gemm0``), or ``host``: the module's own work around
    them (argument checks, output allocation, arena setup, final copies). Wall time is
    measured inside the module around each step, so the steps of a cluster add up to
    (nearly) its time in native code, and their shares say where it goes.
    """

    name: str
    kind: str
    #: core ops the step runs (``["add", "exp"]``); empty for ``host``
    ops: list[str]
    #: profiled calls of the cluster that ran this step
    calls: int
    #: total wall seconds of the step over those calls
    seconds: float
    #: iteration space or GEMM shape in symbols, as text (``"[s0*s1, 256]"``), when known
    shape: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "ops": list(self.ops),
                               "calls": self.calls, "seconds": self.seconds}
        _put(out, "shape", self.shape)
        return out

    @classmethod
    def from_dict(cls, data: object, path: str = "step") -> KernelTime:
        f = Fields(data, path)
        return cls(
            name=f.text("name"),
            kind=f.text("kind"),
            ops=_texts(f, "ops"),
            calls=f.count("calls"),
            seconds=f.number("seconds"),
            shape=f.text("shape", optional=True),
        )


@dataclass
class ClusterRecord:
    """A group of nodes compiled into one call, and what compiling and running it cost.

    Counts and times are None when the bridge or engine did not measure them (the reference
    engine has no kernels to count, for instance), which renderers show as unknown rather
    than zero.
    """

    id: int
    nodes: list[str]
    fusions: int | None = None
    kernels: int | None = None
    #: GEMMs and other library routines per call: not in ``kernels``, which counts the
    #: code DISC generated, yet each is a launch as costly as a kernel's
    library_calls: int | None = None
    compile_seconds: float | None = None
    cache_hits: int = 0
    cache_misses: int = 0
    calls: int = 0
    seconds: float | None = None
    #: Time per kernel, library call and host work when the cluster ran with profiling on;
    #: None when it did not (profiling slows every call, so it is off by default)
    profile: list[KernelTime] | None = None
    #: What runs the cluster's calls: native code (the only engine that counts as
    #: compiled), the reference interpreter, or the framework after the cluster failed;
    #: None until it is built
    engine: Engine | None = None
    #: The compile-cache key of the cluster's lowered core graph (the artifact's key):
    #: the same cluster of a program has the same key in every run of it, so
    #: ``DISC_BISECT_CLUSTERS`` and ``disc bisect`` name clusters by it; None until built
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "nodes": list(self.nodes)}
        for key in ("key", "engine", "fusions", "kernels", "library_calls", "compile_seconds"):
            _put(out, key, getattr(self, key))
        out.update(cache_hits=self.cache_hits, cache_misses=self.cache_misses, calls=self.calls)
        _put(out, "seconds", self.seconds)
        if self.profile is not None:
            out["profile"] = [step.to_dict() for step in self.profile]
        return out

    @classmethod
    def from_dict(cls, data: object, path: str = "cluster") -> ClusterRecord:
        f = Fields(data, path)
        return cls(
            id=f.count("id"),
            nodes=_texts(f, "nodes"),
            fusions=f.count("fusions", optional=True),
            kernels=f.count("kernels", optional=True),
            library_calls=f.count("library_calls", optional=True),
            compile_seconds=f.number("compile_seconds", optional=True),
            cache_hits=f.count("cache_hits", default=0),
            cache_misses=f.count("cache_misses", default=0),
            calls=f.count("calls", default=0),
            seconds=f.number("seconds", optional=True),
            profile=_profile(f),
            engine=f.choice("engine", Engine, optional=True),
            key=f.text("key", optional=True),
        )


def _profile(f: Fields) -> list[KernelTime] | None:
    """``profile`` of a cluster: absent (not profiled) stays None, unlike an empty array."""
    if f.data.get("profile") is None:
        return None
    where = f.where("profile")
    return [KernelTime.from_dict(step, f"{where}[{i}]")
            for i, step in enumerate(f.array("profile"))]


@dataclass
class GraphReport:
    """One captured graph: every node, its clusters, and how often it ran.

    ``fallback_seconds`` is the time spent in framework ops between clusters when the bridge
    measured it; cluster time is on each :class:`ClusterRecord`.
    """

    name: str
    run: str
    nodes: list[NodeRecord] = field(default_factory=list)
    clusters: list[ClusterRecord] = field(default_factory=list)
    calls: int = 0
    fallback_seconds: float | None = None

    def cluster(self, cluster_id: int) -> ClusterRecord:
        for c in self.clusters:
            if c.id == cluster_id:
                return c
        raise KeyError(f"graph {self.name!r} has no cluster {cluster_id}")

    def mark_cluster_failed(self, cluster_id: int, reason: ReasonCode, detail: str) -> None:
        """The cluster could not be compiled or run, computed other values than the
        framework, or the user left it out: its nodes now fall back, with why, and the
        framework runs it."""
        if reason not in CLUSTER_FALLBACKS:
            raise ValueError("a cluster falls back with " + ", ".join(sorted(
                c.value for c in CLUSTER_FALLBACKS)) + f", not {reason}")
        cluster = self.cluster(cluster_id)
        cluster.engine = Engine.FRAMEWORK
        members = set(cluster.nodes)
        for node in self.nodes:
            if node.name in members:
                node.status, node.reason, node.detail = Status.FALLBACK, reason, detail

    def summary(self) -> Summary:
        from .summary import summarize

        return summarize([self])

    def validate(self, path: str = "graph") -> None:
        """Raise ReportFormatError (naming the field) unless the invariants hold."""
        by_name: dict[str, NodeRecord] = {}
        for i, node in enumerate(self.nodes):
            where = f"{path}.nodes[{i}]"
            if node.name in by_name:
                raise ReportFormatError(f"{where}.name: duplicate node name {node.name!r}")
            by_name[node.name] = node
            if node.status is Status.COMPILED:
                if node.reason is not None:
                    raise ReportFormatError(f"{where}.reason: a compiled node has no reason")
                if node.cluster is None:
                    raise ReportFormatError(f"{where}.cluster: a compiled node needs its cluster")
            elif node.reason is None:
                raise ReportFormatError(f"{where}.reason: a fallback node needs a reason code")
            elif node.cluster is not None and node.reason not in CLUSTER_FALLBACKS:
                raise ReportFormatError(
                    f"{where}.reason: a clustered node falls back only with compile_error, "
                    f"runtime_error, accuracy_mismatch or excluded_by_user, got "
                    f"{node.reason.value!r}"
                )
        members: dict[int, set[str]] = {}
        for i, cluster in enumerate(self.clusters):
            where = f"{path}.clusters[{i}]"
            if cluster.id in members:
                raise ReportFormatError(f"{where}.id: duplicate cluster id {cluster.id}")
            members[cluster.id] = set()
            statuses = set()
            for name in cluster.nodes:
                node = by_name.get(name)
                if node is None:
                    raise ReportFormatError(f"{where}.nodes: unknown node {name!r}")
                if node.cluster != cluster.id or name in members[cluster.id]:
                    raise ReportFormatError(
                        f"{where}.nodes: node {name!r} says cluster {node.cluster}"
                    )
                members[cluster.id].add(name)
                statuses.add(node.status)
            if len(statuses) > 1:
                raise ReportFormatError(f"{where}.nodes: mixes compiled and fallback nodes")
            if statuses and cluster.engine is not None and (
                    (cluster.engine is Engine.FRAMEWORK) != (Status.FALLBACK in statuses)):
                raise ReportFormatError(
                    f"{where}.engine: {cluster.engine.value!r} but its nodes "
                    f"{'fell back' if Status.FALLBACK in statuses else 'are compiled'}")
        for i, node in enumerate(self.nodes):
            if node.cluster is not None and node.name not in members.get(node.cluster, ()):
                raise ReportFormatError(
                    f"{path}.nodes[{i}].cluster: cluster {node.cluster} does not list "
                    f"node {node.name!r}"
                )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "run": self.run,
            "calls": self.calls,
            "nodes": [n.to_dict() for n in self.nodes],
            "clusters": [c.to_dict() for c in self.clusters],
        }
        _put(out, "fallback_seconds", self.fallback_seconds)
        return out

    @classmethod
    def from_dict(cls, data: object, path: str = "graph") -> GraphReport:
        f = Fields(data, path)
        graph = cls(
            name=f.text("name"),
            run=f.text("run"),
            nodes=[
                NodeRecord.from_dict(n, f"{f.where('nodes')}[{i}]")
                for i, n in enumerate(f.array("nodes"))
            ],
            clusters=[
                ClusterRecord.from_dict(c, f"{f.where('clusters')}[{i}]")
                for i, c in enumerate(f.array("clusters"))
            ],
            calls=f.count("calls", default=0),
            fallback_seconds=f.number("fallback_seconds", optional=True),
        )
        graph.validate(path)
        return graph


def utc_now() -> str:
    """ISO 8601 UTC with a ``Z``, to the second: sortable and unambiguous across hosts."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    return now.isoformat().replace("+00:00", "Z")


@dataclass
class RunInfo:
    """One process (or worker) running one framework: where the graphs of a report came from."""

    id: str
    framework: str | None
    framework_version: str | None = None
    disc_versions: dict[str, str] = field(default_factory=dict)
    device: str = "cpu"
    started_at: str = ""
    python: str | None = None
    host: str | None = None
    pid: int | None = None
    #: the process's rank in its distributed job and the job's size, as its launcher's
    #: environment says (:mod:`.ranks`); None outside a job (and in older files)
    rank: int | None = None
    world_size: int | None = None

    @classmethod
    def capture(
        cls, framework: str | None, framework_version: str | None = None, device: str = "cpu"
    ) -> RunInfo:
        """Describe this process now (DISC versions from package metadata, never imports)."""
        from .ranks import process_rank
        from .versions import disc_versions

        place = process_rank()
        return cls(
            id=uuid.uuid4().hex[:12],
            framework=framework,
            framework_version=framework_version,
            disc_versions=disc_versions(),
            device=device,
            started_at=utc_now(),
            python=platform.python_version(),
            host=socket.gethostname(),
            pid=os.getpid(),
            rank=None if place is None else place.rank,
            world_size=None if place is None else place.world_size,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        _put(out, "framework", self.framework)
        _put(out, "framework_version", self.framework_version)
        out.update(
            disc_versions=dict(self.disc_versions), device=self.device, started_at=self.started_at
        )
        for key in ("python", "host", "pid", "rank", "world_size"):
            _put(out, key, getattr(self, key))
        return out

    @classmethod
    def from_dict(cls, data: object, path: str = "run") -> RunInfo:
        f = Fields(data, path)
        return cls(
            id=f.text("id"),
            framework=f.text("framework", optional=True),
            framework_version=f.text("framework_version", optional=True),
            disc_versions=f.text_map("disc_versions", optional=True),
            device=f.text("device"),
            started_at=f.text("started_at"),
            python=f.text("python", optional=True),
            host=f.text("host", optional=True),
            pid=f.count("pid", optional=True),
            rank=f.count("rank", optional=True),
            world_size=f.count("world_size", optional=True),
        )


@dataclass
class Report:
    """Runs and the graphs they captured; one file, possibly merged from several runs."""

    runs: list[RunInfo] = field(default_factory=list)
    graphs: list[GraphReport] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def summary(self) -> Summary:
        """Totals over all graphs: ops, compiled share, clusters, kernels, top fallbacks."""
        from .summary import summarize

        return summarize(self.graphs, runs=len(self.runs))

    def run(self, run_id: str) -> RunInfo:
        for run in self.runs:
            if run.id == run_id:
                return run
        raise KeyError(f"report has no run {run_id!r}")

    def validate(self) -> None:
        """Raise ReportFormatError (naming the field) unless every invariant holds."""
        self._check_runs()
        for i, graph in enumerate(self.graphs):
            graph.validate(f"graphs[{i}]")

    def _check_runs(self) -> None:
        ids: set[str] = set()
        for i, run in enumerate(self.runs):
            if run.id in ids:
                raise ReportFormatError(f"runs[{i}].id: duplicate run id {run.id!r}")
            ids.add(run.id)
        for i, graph in enumerate(self.graphs):
            if graph.run not in ids:
                raise ReportFormatError(f"graphs[{i}].run: no run has id {graph.run!r}")

    def written_version(self) -> int:
        """The schema version a file of this report declares: the lowest one that has
        every reason code it uses and reads it right (a cluster on the reference
        interpreter needs version 2), so an older reader still reads a report that
        needs nothing newer."""
        version = MIN_SCHEMA_VERSION
        for graph in self.graphs:
            if any(c.engine is Engine.REFERENCE for c in graph.clusters):
                # a version-1 reader ignores engines and would count an interpreted
                # cluster as compiled
                version = max(version, 2)
            for node in graph.nodes:
                if node.reason is not None:
                    version = max(version, CODE_SCHEMA_VERSION.get(node.reason, 1))
                    if node.cluster is not None and node.reason not in CLUSTER_FAILURES:
                        # a cluster left out (disc bisect): version 1 refuses such a node
                        version = max(version, 2)
        return version

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_NAME,
            "schema_version": self.written_version(),
            "runs": [r.to_dict() for r in self.runs],
            "graphs": [g.to_dict() for g in self.graphs],
        }

    def to_json(self, *, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_dict(cls, data: object) -> Report:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA_NAME:
            raise ReportFormatError(f'not a DISC report (no "schema": "{SCHEMA_NAME}" field)')
        version = data.get("schema_version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise ReportFormatError("schema_version: expected an integer")
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"schema_version {version} is newer than this disc-core reads "
                f"({SCHEMA_VERSION}); upgrade disc-core"
            )
        if version < MIN_SCHEMA_VERSION:
            raise SchemaVersionError(
                f"schema_version {version} is not supported (this disc-core reads "
                f"{MIN_SCHEMA_VERSION} to {SCHEMA_VERSION})"
            )
        f = Fields(data, "")
        report = cls(
            runs=[RunInfo.from_dict(r, f"runs[{i}]") for i, r in enumerate(f.array("runs"))],
            graphs=[
                GraphReport.from_dict(g, f"graphs[{i}]") for i, g in enumerate(f.array("graphs"))
            ],
        )
        # read into the current schema: writing it back writes the current version
        report._check_runs()  # each graph validated itself in GraphReport.from_dict
        return report

    @classmethod
    def from_json(cls, text: str | bytes) -> Report:
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ReportFormatError(f"not valid JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def merge(cls, reports: Iterable[Report]) -> Report:
        """All runs and graphs of several reports (workers, frameworks) in one report.

        Merging the same run twice would double-count it, so a repeated run id is an error.
        """
        merged = cls()
        seen: set[str] = set()
        for report in reports:
            for run in report.runs:
                if run.id in seen:
                    raise ValueError(
                        f"run {run.id!r} appears in more than one report (the same file twice?)"
                    )
                seen.add(run.id)
            merged.runs.extend(copy.deepcopy(report.runs))
            merged.graphs.extend(copy.deepcopy(report.graphs))
        return merged
