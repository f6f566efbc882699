"""What DISC does to each program Paddle's dynamic-to-static machinery creates.

:func:`rewrite_program` is the rewriter :mod:`disc_paddle.capture` calls with every
forward, backward or inference program of a function DISC manages, right after Paddle's
own passes: verdicts and clustering (:mod:`disc_paddle.partition`), lowering and compiling
each cluster (the bridge kit's :func:`~disc_core.bridge.attempts.compile_clusters`), the
coverage report, and the replacement of each compiled cluster by one launch op
(:mod:`disc_paddle.rewrite`).

A function's :class:`FunctionState` (the capture's *owner*) carries what spans programs:
its options, the symbolic dims of the forward program's named values (the backward
program's inputs are those values, so both programs speak of the same sizes), and the
clusters that failed at run time, which stay in Paddle when the programs are rebuilt.

The accuracy guard (``accuracy_check``): a function keeps two sets of programs, plain
ones (clusters replaced by launches) and *guarded* ones (each cluster's Paddle ops kept
next to a checking launch: :mod:`disc_paddle.rewrite`), and the wrapper says before each
call which set it runs (:meth:`FunctionState.use_variant`). Both are built once, on
the first call that needs them, then swapped in by a few dict assignments: Paddle caches
each set's interpreter under its own program id. A mismatch fails the call like any
run-time failure (the wrapper drops that cluster and calls again), reported as
``accuracy_mismatch``.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from disc_core.bridge import fallback
from disc_core.bridge.accuracy import failure_reason
from disc_core.bridge.attempts import compile_clusters, record_attempts, split_clustering
from disc_core.bridge.compilers import CompilerRegistry
from disc_core.bridge.launch import flush_cluster_calls
from disc_core.report import ReasonCode, get_collector, graph_report
from disc_runtime.abi import MODULE_FILE
from disc_runtime.native import module_load_path

from .config import DiscConfig
from .custom_op import MAX_OUTPUTS
from .lowering import dtype_code
from .partition import Analysis, analyze, lower_cluster
from .rewrite import Launch, replace_clusters

__all__ = ["COMPILERS", "DiscFallbackWarning", "FunctionState", "NOTICE", "check_launches",
           "rewrite_program"]

#: this bridge's process-wide compilers (compile counts are Paddle's own)
COMPILERS = CompilerRegistry()


class DiscFallbackWarning(fallback.DiscFallbackWarning):
    """Part of a program runs in Paddle instead of DISC (results are unaffected)."""


NOTICE = fallback.FallbackNotice(DiscFallbackWarning, "in Paddle")

#: the cached properties of a PartialProgramLayer that hold its rewritten programs
_PROGRAM_ATTRS = ("train_program", "infer_program", "_train_program_id",
                  "_infer_program_id")
_function_ids = itertools.count()
#: a PartialProgramLayer's attributes (in its __dict__): which variant its cached programs
#: are (True: the accuracy guard's), and the other variant's programs put aside
_VARIANT, _STASH = "_disc_guarded", "_disc_other_programs"


@dataclass
class _Owner:
    """Where a launch's run-time failures and call counts are reported."""

    state: FunctionState
    recorder: Any
    cluster_id: int
    what: str
    role: str


#: cluster key -> where it is reported
_launch_owners: dict[str, _Owner] = {}
_owners_lock = threading.Lock()


@dataclass(eq=False)
class FunctionState:
    """One function DISC manages (see the module docstring)."""

    config: DiscConfig
    name: str
    #: cluster keys that failed at run time (or the accuracy guard), with the reason
    failed: dict[str, tuple[ReasonCode, str]] = field(default_factory=dict)
    #: after a forward cluster failed at run time, the backward program's clusters, whose
    #: dims were derived from the same (wrong) assumptions, stay in Paddle
    backward_off: bool = False
    forward_dims: dict[str, tuple[Any, ...]] | None = None
    forward_known: dict[str, Any] | None = None  # the forward's compile-time values by name
    rewrites: dict[str, int] = field(default_factory=dict)  # role -> programs rewritten
    uid: int = field(default_factory=lambda: next(_function_ids))
    #: which programs the calls run now and the programs built now are: the accuracy
    #: guard's (checking launches) or the plain ones (see the module docstring)
    guarded: bool = False
    _partials: list[Any] = field(default_factory=list)

    def adopt(self, partial: Any) -> None:
        """The capture traced ``partial`` (a PartialProgramLayer) for this function."""
        partial.__dict__[_VARIANT] = self.guarded  # its programs get built for this one
        self._partials.append(weakref.ref(partial))

    def use_variant(self, guarded: bool) -> None:
        """Run the guarded programs (``True``) or the plain ones from now on: each partial
        program's current set is put aside and the other one put back (or left to be
        built, for this variant, on its first call)."""
        if guarded == self.guarded:
            return
        self.guarded = guarded
        for ref in self._partials:
            partial = ref()
            if partial is None or partial.__dict__.get(_VARIANT) == guarded:
                continue
            stash = partial.__dict__.setdefault(_STASH, {})
            stash[not guarded] = {a: partial.__dict__.pop(a) for a in _PROGRAM_ATTRS
                                  if a in partial.__dict__}
            partial.__dict__.update(stash.pop(guarded, {}))
            partial.__dict__[_VARIANT] = guarded

    def drop_programs(self) -> None:
        """Forget every rewritten program of this function (both variants): Paddle creates
        them again when next called (from its un-rewritten originals), and DISC rewrites
        them again without the clusters that failed."""
        for ref in self._partials:
            partial = ref()
            if partial is None:
                continue
            for attr in _PROGRAM_ATTRS:
                partial.__dict__.pop(attr, None)
            partial.__dict__.pop(_STASH, None)
            partial.__dict__[_VARIANT] = self.guarded
            cache = getattr(partial, "_prog_attrs_map_cache", None)
            if cache is not None:
                cache.clear()
        self.forward_dims = self.forward_known = None


def _op_library() -> Any:
    from .custom_op import load_library

    return load_library()


def _seeds(state: FunctionState) -> dict[str, tuple[Any, ...]]:
    """The backward program's input dims by name: the forward's values, and the gradient
    of each forward output (``output_grad_<i>``) with the dims of ``output_<i>``."""
    dims = dict(state.forward_dims or {})
    for name, d in list(dims.items()):
        if name.startswith("output_") and name[7:].isdigit():
            dims.setdefault(f"output_grad_{name[7:]}", d)
    return dims


def _out_dims(v: Any) -> list[int]:
    return [d.value if d.is_const else -1 for d in v.shape]


def _members_with_plumbing(view: Any, members: list[Any]) -> list[Any]:
    """The ops a launch replaces: the members, the ``builtin.split`` ops of their vector
    results, and the ``builtin.combine`` ops only members read; in program order."""
    ops = {n.op.id(): n.op for n in members}
    for n in members:
        for s in n.splits:
            ops[s.id()] = s
    member_ids = set(ops)
    for n in members:
        for v in n.op.operands_source():
            if not v.initialized():
                continue
            d = v.get_defining_op()
            if d is None or d.name() != "builtin.combine" or d.id() in ops:
                continue
            users = [u for u in view.combine_users.get(d.id(), ())]
            if users and all(u in member_ids for u in users):
                ops[d.id()] = d
    position = {op.id(): i for i, op in enumerate(view.block.ops)}
    return sorted(ops.values(), key=lambda op: position[op.id()])


def rewrite_program(program: Any, role: str, owner: Any) -> None:
    """The capture's rewriter (see the module docstring). Any failure leaves the program
    as Paddle made it, with a warning and a report entry: DISC never breaks the call."""
    if not isinstance(owner, FunctionState):
        return
    try:
        _rewrite(program, role, owner)
    except Exception as exc:  # DISC must never break the user's program
        NOTICE.warn(f"DISC: the {role} program of {owner.name} runs in Paddle: "
                    f"{type(exc).__name__}: {exc}")


def _rewrite(program: Any, role: str, state: FunctionState) -> None:
    import paddle

    config = state.config
    state.rewrites[role] = state.rewrites.get(role, 0) + 1
    seeds = _seeds(state) if role == "backward" else None
    known = state.forward_known if role == "backward" else None
    analysis = analyze(program, min_cluster_size=config.min_cluster_size,
                       excluded_ops=config.excluded_ops, seeds=seeds, known_seeds=known)
    if role == "forward":
        state.forward_dims = analysis.dims_by_name()
        state.forward_known = analysis.known_by_name()
    guarded = state.guarded and config.accuracy_check is not None
    name = f"{state.name} ({role}{', guarded' if guarded else ''})"
    clustering = analysis.clustering
    attempts: list[Any] = []
    blocker: str | None = None
    if clustering.clusters:
        if config.target == "reference":
            blocker = ("target 'reference': Paddle runs clusters through its launch op, "
                       "which runs native modules only")
        elif role == "backward" and state.backward_off:
            blocker = ("a forward cluster of this function failed at run time; the "
                       "backward program, whose sizes come from the forward's, stays in "
                       "Paddle")
        else:
            try:
                _op_library()
            except Exception as exc:
                blocker = f"the disc_launch Paddle operators are unavailable: {exc}"
    if clustering.clusters and blocker is None:
        compiler = COMPILERS.get("native" if config.target == "auto" else config.target)
        attempts = compile_clusters(
            [list(c.nodes) for c in clustering.clusters],
            lambda members: lower_cluster(analysis, members, "disc_cluster"),
            compiler, need_native=True, min_size=config.min_cluster_size,
            thread_prefix="disc-paddle-build",
            # disc_launch_1..MAX_OUTPUTS: a cluster with more outputs is halved
            max_outputs=MAX_OUTPUTS)
        clustering = split_clustering(clustering, attempts)
    report = graph_report(name, analysis.nodes, clustering, op_type=lambda n: n.name,
                          support=analysis.verdicts,
                          node_name=lambda n: f"{n.name}#{n.index}")
    recorder = get_collector().add_graph(report, framework="paddle",
                                         framework_version=paddle.__version__)
    if not clustering.clusters:
        return
    if blocker is not None:
        for c in clustering.clusters:
            recorder.cluster_failed(c.id, ReasonCode.COMPILE_ERROR, blocker)
        NOTICE.warn(f"DISC: {name} runs in Paddle: {blocker}")
        return
    record_attempts(recorder, attempts, NOTICE)
    launches = _launches(analysis, attempts, state, role, recorder, guarded)
    if launches:
        try:
            replace_clusters(program, launches)
        except Exception as exc:  # the program stays Paddle's: so must the report say
            for launch in launches:
                recorder.cluster_failed(_launch_owners[launch.key].cluster_id,
                                        ReasonCode.COMPILE_ERROR,
                                        f"rewriting the program failed: {exc}")
            raise


def _launches(analysis: Analysis, attempts: list[Any], state: FunctionState, role: str,
              recorder: Any, guarded: bool = False) -> list[Launch]:
    """A launch per compiled attempt, except those that failed at run time before;
    ``guarded``: checking launches, with each module output's tolerances."""
    policy = state.config.accuracy_check
    launches = []
    for cid, a in enumerate(attempts):
        if not a.ok:
            continue
        low = a.lowered
        if not low.inputs:
            # a constant (the launch op needs an input: Paddle's custom-op binding refuses
            # an empty vector, and aborts the process doing so)
            recorder.cluster_failed(cid, ReasonCode.COMPILE_ERROR,
                                    "a cluster without inputs (a constant) stays in Paddle")
            continue
        key = f"{low.key}-f{state.uid}-{role}-{cid}"
        what = f"a cluster of {len(a.members)} ops of {state.name} ({role})"
        if key in state.failed:
            code, detail = state.failed[key]
            recorder.cluster_failed(cid, code, f"{detail} (in an earlier call; runs in "
                                               "Paddle)")
            continue
        graph = low.graph
        check = [policy.bounds(v.dtype.value) for v in graph.outputs] if guarded else None
        launches.append(Launch(
            members=_members_with_plumbing(analysis.view, a.members),
            inputs=low.inputs, outputs=low.outputs,
            out_dims=[_out_dims(v) for v in graph.outputs],
            # by file identity: a cache entry rebuilt in this process loads anew
            module_path=module_load_path(a.exe.artifact.path(MODULE_FILE)), key=key,
            output_slots=low.output_index, passthrough=low.passthrough,
            out_dtypes=[dtype_code(v.dtype) for v in graph.outputs],
            writebacks=low.writebacks, check=check))
        with _owners_lock:
            _launch_owners[key] = _Owner(state, recorder, cid, what, role)
    return launches


def check_launches() -> list[_Owner]:
    """Run-time failures the launch ops recorded since the last check: each one's cluster
    is marked failed (report entry, one warning) and its function's state learns the key,
    so the rebuilt programs leave it in Paddle. Returns the owners of the new failures."""
    from . import custom_op

    failed: list[_Owner] = []
    for lib in list(custom_op._loaded.values()):  # noqa: SLF001
        for key, message in lib.take_failures():
            owner = _launch_owners.get(key)
            if owner is None:
                continue
            code, detail = failure_reason(message)
            owner.state.failed[key] = (code, detail)
            if owner.role != "backward" and code is ReasonCode.RUNTIME_ERROR:
                # dims the backward's clusters share may be wrong; a value that differs
                # says nothing about them (the guard checks them on their own)
                owner.state.backward_off = True
            NOTICE.cluster_failed(owner.recorder, owner.cluster_id, owner.what, code,
                                  detail, stacklevel=3)
            failed.append(owner)
    return failed


def _flush_calls() -> None:
    """Bring every cluster's call count and time in DISC, as the launch ops counted them,
    into the report (run before a report is read, not per call)."""
    from . import custom_op

    libs = list(custom_op._loaded.values())  # noqa: SLF001
    if not libs:
        return
    with _owners_lock:
        flush_cluster_calls(libs, [(key, o.recorder, o.cluster_id)
                                   for key, o in list(_launch_owners.items())], _seen)


_seen: dict[str, tuple[int, float]] = {}
get_collector().add_flush_hook(_flush_calls)
