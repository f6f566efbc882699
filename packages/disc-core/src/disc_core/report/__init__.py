"""Fallback coverage reports: what ran compiled, what fell back to the framework, and why.

* :mod:`.model`: the versioned schema (:class:`Report`, :class:`ReasonCode`, ...), its JSON
  form and validation; documented in ``docs/report-schema.md``.
* :mod:`.build`: a :class:`GraphReport` from a clustering result, so bridges fill reports
  one way.
* :mod:`.collector`: the process-wide collector, ``DISC_REPORT=path`` and :func:`write`.
* :mod:`.summary` and ``render_*``: the numbers, and terminal, Markdown and HTML output.

Typical bridge use::

    graph = report.graph_report(name, nodes, clustering, op_type=op_of, support=verdicts)
    recorder = report.get_collector().add_graph(graph, framework="torch", framework_version=v)
    recorder.cluster_call(cluster_id, seconds)      # on every call, O(1)
    tally = recorder.cluster_tally(cluster_id)      # or a per-thread, lock-free count
    recorder.cluster_profile(cluster_id, steps)     # profiling on: from a flush hook
"""

from ._fields import ReportFormatError
from .build import graph_report
from .collector import (
    ENV_VAR,
    CallTally,
    Collector,
    GraphRecorder,
    ReportWriteWarning,
    configure,
    current,
    get_collector,
    write,
)
from .files import load, write_report
from .model import (
    KERNEL_KINDS,
    MIN_SCHEMA_VERSION,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    ClusterRecord,
    Engine,
    GraphReport,
    KernelTime,
    NodeRecord,
    ReasonCode,
    Report,
    RunInfo,
    SchemaVersionError,
    Status,
)
from .render_html import render_html
from .render_markdown import render_markdown
from .render_text import render_text, summary_line
from .summary import Summary, summarize

__all__ = [
    "ENV_VAR",
    "KERNEL_KINDS",
    "CallTally",
    "MIN_SCHEMA_VERSION",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "ClusterRecord",
    "Collector",
    "Engine",
    "GraphRecorder",
    "GraphReport",
    "KernelTime",
    "NodeRecord",
    "ReasonCode",
    "Report",
    "ReportFormatError",
    "ReportWriteWarning",
    "RunInfo",
    "SchemaVersionError",
    "Status",
    "Summary",
    "get_collector",
    "configure",
    "current",
    "graph_report",
    "load",
    "render_html",
    "render_markdown",
    "render_text",
    "summarize",
    "summary_line",
    "write",
    "write_report",
]
