"""Ahead-of-time compilation for serving: ``torch.export`` once, DISC-compile the exported
program once, and call it without dynamo.

Why a second way in: through ``torch.compile`` every call of a compiled function passes
dynamo's frame evaluation and guards and aot_autograd's runtime wrappers before any
backend runs. On a tiny graph that costs about 23 us (dynamo) + 4 us (aot_autograd) on a
2-core Xeon, for Inductor as for DISC, several times the eager call it replaces; a
small-batch server pays it on every request. ``torch.export`` captures the model once with
symbolic sizes (every dim of every input dynamic unless the model fixes it), so one
program, and one DISC compile, serves every shape of the same ranks; what runs per call
here is the input check below and DISC's partitioned graph.

The contract is inference (AOTInductor's): outputs carry no autograd history, so an input
that requires grad while grad mode is on is refused rather than given silently missing
gradients. Parameters and buffers are the model's own tensors, read in place: in-place
updates (``load_state_dict``, an optimizer step elsewhere) are seen, and buffers the
program mutates are written back. Tensors replaced rather than updated
(``param.data = other``, ``load_state_dict(..., assign=True)``) are not: the compiled
model keeps the ones it was compiled with (compile again, or ``aot_load(path, model)``).
A failure inside DISC never breaks the caller: a program DISC cannot partition runs
eagerly (warned once, in the report), and a cluster failing at run time falls back as
under ``torch.compile``. Bad input (another count, dtype, rank, device, or a size the
program fixed) raises :class:`AotInputError` naming what the program expects.

With ``freeze_weights=True`` the caller promises what AOTInductor's constants and
Inductor's ``freezing`` assume: the weights change only through ops torch versions
(in-place ops, ``load_state_dict``), or :meth:`AotCompiled.refresh_weights` is called after
a write that bypasses the version counter (``p.data.copy_(...)``). The native modules may
then keep GEMM weights in the BLAS's packed format between calls
(:mod:`disc_torch.frozen_weights`), which makes the GEMMs of a short prompt 1.5-2.7x
faster with MKL.

A compiled model saves to one file (:meth:`AotCompiled.save`); :func:`aot_load` runs it in
a server process without exporting, tracing or lowering anything again.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import torch
import torch.utils._pytree as pytree
from torch.export import Dim
from torch.export.graph_signature import InputKind, OutputKind

from . import frozen_weights
from ._version_check import BRIDGE_VERSION
from .cluster import Clock
from .compilers import get_compiler
from .config import DiscConfig
from .decompositions import decomposition_table
from .fallback import warn_once
from .frozen import FreezeError, freeze_graph, thaw_graph

if TYPE_CHECKING:
    from .partition import PartitionedGraph

__all__ = ["AotCompiled", "AotInputError", "AotLoadError", "aot_compile", "aot_load"]


class AotInputError(ValueError):
    """A call's inputs do not match what the compiled program takes."""


#: what a saved compiled model says it is (the first key :func:`aot_load` reads)
_FORMAT = "disc-aot-2"


class AotLoadError(ValueError):
    """A file that :func:`aot_load` cannot run: not a saved compiled model, another format
    version, or saved with another torch or disc-torch version."""


@dataclass(frozen=True)
class _InputSpec:
    """What one user input must be: its name in the program, dtype, and per dim either the
    size the program fixed or the symbol it binds (inputs sharing a symbol must agree), with
    that symbol's range."""

    name: str
    dtype: torch.dtype
    #: per dim: an int (fixed), or (symbol, lowest, highest) with highest None if unbounded
    dims: tuple[int | tuple[str, int, int | None], ...]

    @property
    def rank(self) -> int:
        return len(self.dims)

    def describe(self) -> str:
        dims = [str(d) if isinstance(d, int) else d[0] for d in self.dims]
        return f"a {self.dtype} CPU tensor of shape [{', '.join(dims)}]"


def _all_dims_auto(model: torch.nn.Module, args: tuple[Any, ...],
                   kwargs: Mapping[str, Any]) -> Any:
    """``dynamic_shapes`` that let every dim of every tensor input vary (``Dim.AUTO``:
    export keeps a dim symbolic unless the model ties it to a constant), in the form export
    matches against the forward's bound arguments."""

    def spec(value: Any) -> Any:
        return pytree.tree_map(
            lambda t: {d: Dim.AUTO for d in range(t.dim())} if isinstance(t, torch.Tensor)
            else None, value)

    forward = model.forward if isinstance(model, torch.nn.Module) else model
    bound = inspect.signature(forward).bind(*args, **kwargs)
    return {name: spec(value) for name, value in bound.arguments.items()}


def _input_spec(name: str, node: torch.fx.Node, ranges: Mapping[Any, Any]) -> _InputSpec:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise TypeError(f"input {name!r} is a {type(val).__name__}: aot_compile takes "
                        "tensor inputs only (a Python number is part of the program: "
                        "bind it before compiling)")
    import sympy  # compile time only: a server's aot_load does without it

    dims: list[int | tuple[str, int, int | None]] = []
    for size in val.shape:
        expr = size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)
        if expr.is_number:
            dims.append(int(expr))
        elif isinstance(expr, sympy.Symbol):
            vr = ranges.get(expr)
            # bounds are sympy Integers, or torch's int_oo (is_Integer False) if unbounded
            lower = int(vr.lower) if vr is not None and vr.lower.is_Integer else 0
            upper = int(vr.upper) if vr is not None and vr.upper.is_Integer else None
            dims.append((str(expr), lower, upper))
        else:  # a size derived from others (2 * s0): the compiled module checks it
            dims.append((str(expr), 0, None))
    return _InputSpec(name, val.dtype, tuple(dims))


_LIFTED_KINDS = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer",
                 InputKind.CONSTANT_TENSOR: "constant"}


@dataclass(frozen=True)
class _Signature:
    """How calls of a compiled program are made, as plain data (what :meth:`AotCompiled.save`
    keeps): the user inputs, the program's leading inputs (``(kind, target)`` of each
    parameter, buffer and constant, in order), per program output None (the user's) or
    where it is written back (``("buffer", target)``, ``("input", index)``), and the
    pytree structures of the call's inputs and outputs (``treespec_dumps``)."""

    inputs: tuple[_InputSpec, ...]
    lifted: tuple[tuple[str, str], ...]
    writes: tuple[tuple[str, Any] | None, ...]
    in_spec: str
    out_spec: str


def _signature_of(program: torch.export.ExportedProgram) -> _Signature:
    signature = program.graph_signature
    # the graph's inputs are the signature's, in order (partitioning kept them)
    placeholders = [n for n in program.graph_module.graph.nodes if n.op == "placeholder"]
    inputs, lifted = [], []
    for spec, node in zip(signature.input_specs, placeholders, strict=True):
        if spec.kind == InputKind.USER_INPUT:
            inputs.append(_input_spec(spec.arg.name, node, program.range_constraints))
        elif spec.kind in _LIFTED_KINDS:
            lifted.append((_LIFTED_KINDS[spec.kind], spec.target))
        else:
            raise TypeError(f"the exported program takes a {spec.kind.name} input "
                            f"({spec.arg.name}), which aot_compile does not run")
    user_index = {s.name: i for i, s in enumerate(inputs)}
    writes: list[tuple[str, Any] | None] = []
    for spec in signature.output_specs:
        if spec.kind == OutputKind.USER_OUTPUT:
            writes.append(None)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            writes.append(("buffer", spec.target))
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            writes.append(("input", user_index[spec.target]))
        else:
            raise TypeError(f"the exported program has a {spec.kind.name} output, "
                            "which aot_compile does not run (inference only)")
    return _Signature(tuple(inputs), tuple(lifted), tuple(writes),
                      pytree.treespec_dumps(program.call_spec.in_spec),
                      pytree.treespec_dumps(program.call_spec.out_spec))


def _model_tensors(model: torch.nn.Module, lifted: Sequence[tuple[str, str]],
                   constants: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensor of every lifted input: the model's own parameters and buffers (detached
    views of them: in-place updates are seen, no autograd is recorded), the constants."""
    out = {}
    for kind, target in lifted:
        if kind == "parameter":
            out[target] = model.get_parameter(target).detach()
        elif kind == "buffer":
            out[target] = model.get_buffer(target).detach()
        else:
            out[target] = constants[target]
    return out


class AotCompiled:
    """A model compiled ahead of time by :func:`aot_compile` (or read back by
    :func:`aot_load`); call it as the model."""

    def __init__(self, graph: PartitionedGraph, signature: _Signature,
                 tensors: dict[str, torch.Tensor], target: str,
                 freeze_weights: bool = False) -> None:
        for cluster in graph.clusters:  # ahead of time: built (or loaded) before any call
            cluster.compiled  # noqa: B018  (waits for its build; a failure is reported)
        self._graph = graph
        self._signature = signature
        self._tensors = tensors
        self._target = target
        self._inputs = list(signature.inputs)
        #: the program's leading inputs: parameters, buffers and constants, in order
        self._lifted = [tensors[target] for _kind, target in signature.lifted]
        #: whether GEMM weights may stay packed between calls (see the module docstring)
        self.freeze_weights = freeze_weights
        if freeze_weights:
            frozen_weights.freeze(self._lifted)
        #: per program output: None (a user output), (0, buffer) or (1, input index)
        self._writes: list[tuple[int, Any] | None] = [
            None if w is None else (0, tensors[w[1]]) if w[0] == "buffer" else (1, w[1])
            for w in signature.writes]
        self._mutates = any(w is not None for w in self._writes)
        self._in_spec = pytree.treespec_loads(signature.in_spec)
        self._out_spec = pytree.treespec_loads(signature.out_spec)
        n = len(self._inputs)
        #: the program takes its inputs positionally, as a flat tuple of tensors
        self._positional = self._in_spec == pytree.tree_flatten((tuple(range(n)), {}))[1]
        self._single_out = self._out_spec == pytree.tree_flatten(0)[1]
        self._specs = [(s.dtype, s.rank, tuple((d, v) for d, v in enumerate(s.dims)
                                               if isinstance(v, int)))
                       for s in self._inputs]
        #: (input, dim, symbol, lowest, highest) of every symbolic input dim
        self._symbols = [(i, d, *v) for i, s in enumerate(self._inputs)
                         for d, v in enumerate(s.dims) if not isinstance(v, int)]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write this compiled model to the file ``path``: the partitioned graph as data
        (its generated code and each cluster's core graph, :mod:`disc_torch.frozen`), the
        call signature and the parameters', buffers' and constants' values.
        :func:`aot_load` runs it in another process without torch.export, tracing or
        lowering; the native modules come from DISC's compile cache, or are built again
        from the graphs kept (a cache key names the CPU: another machine builds its own)."""
        try:
            frozen = freeze_graph(self._graph)
        except FreezeError as exc:
            raise ValueError(f"this compiled model cannot be saved: {exc}") from exc
        torch.save({"format": _FORMAT, "torch": torch.__version__,
                    "disc_torch": BRIDGE_VERSION, "target": self._target,
                    "signature": self._signature, "graph": frozen,
                    "freeze_weights": self.freeze_weights,
                    "tensors": {k: t.detach() for k, t in self._tensors.items()}}, path)

    def refresh_weights(self) -> None:
        """With ``freeze_weights``: pack the weights again at the next call, after writes
        that torch's version counter does not see (``p.data.copy_(...)``)."""
        frozen_weights.refresh(self._lifted)

    def _flatten(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Sequence[Any]:
        if not kwargs and self._positional:
            if len(args) != len(self._inputs):
                raise AotInputError(f"{len(args)} inputs given, the compiled program takes "
                                    f"{len(self._inputs)}: "
                                    f"{', '.join(s.name for s in self._inputs)}")
            return args
        leaves, spec = pytree.tree_flatten((args, kwargs))
        if spec != self._in_spec:
            raise AotInputError(f"the inputs are structured as {spec}, the compiled program "
                                f"takes {self._in_spec}")
        return leaves

    def _check(self, leaves: Sequence[Any]) -> None:
        grad = torch.is_grad_enabled()
        for i, (t, (dtype, rank, fixed)) in enumerate(zip(leaves, self._specs)):
            if (not isinstance(t, torch.Tensor) or t.dtype is not dtype or t.dim() != rank
                    or not t.is_cpu or (grad and t.requires_grad)):
                self._refuse(i, t, grad)
            for d, size in fixed:
                if t.shape[d] != size:
                    self._refuse(i, t, grad)
        bound: dict[str, tuple[int, int]] = {}
        for i, d, symbol, lower, upper in self._symbols:
            size = leaves[i].shape[d]
            first = bound.setdefault(symbol, (size, i))
            if first[0] != size:
                raise AotInputError(
                    f"input {i} ({self._inputs[i].name!r}) has size {size} in dim {d} where "
                    f"input {first[1]} ({self._inputs[first[1]].name!r}) has {first[0]}: the "
                    f"compiled program ties both to {symbol}")
            if size < lower or (upper is not None and size > upper):
                raise AotInputError(
                    f"input {i} ({self._inputs[i].name!r}) has size {size} in dim {d}, "
                    f"outside the range of {symbol} the program was exported for: "
                    f"[{lower}, {'inf' if upper is None else upper}]")

    def _refuse(self, i: int, t: Any, grad: bool) -> NoReturn:
        spec = self._inputs[i]
        if isinstance(t, torch.Tensor):
            got = f"a {t.dtype} {t.device.type.upper()} tensor of shape {list(t.shape)}"
            if grad and t.requires_grad and t.is_cpu and t.dtype is spec.dtype:
                raise AotInputError(
                    f"input {i} ({spec.name!r}) requires grad: an aot_compile'd model runs "
                    "inference only (its outputs carry no autograd history); call it under "
                    "torch.no_grad() or pass a detached tensor")
        else:
            got = f"a {type(t).__name__}"
        raise AotInputError(f"input {i} ({spec.name!r}) must be {spec.describe()}, got {got}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves = self._flatten(args, kwargs)
        self._check(leaves)
        outs = self._graph([*self._lifted, *leaves])
        if self._mutates:
            user = []
            for out, write in zip(outs, self._writes):
                if write is None:
                    user.append(out)
                elif write[0] == 0:
                    write[1].copy_(out)
                else:
                    leaves[write[1]].copy_(out)
            outs = user
        if self._single_out:
            return outs[0]
        return pytree.tree_unflatten(list(outs), self._out_spec)


def aot_compile(model: torch.nn.Module, args: tuple[Any, ...],
                kwargs: Mapping[str, Any] | None = None, *, dynamic_shapes: Any = None,
                freeze_weights: bool = False, **options: Any) -> AotCompiled:
    """Export ``model`` with ``args`` (and ``kwargs``) as example inputs and compile the
    program with DISC, for inference calls without dynamo.

    ``dynamic_shapes``: ``torch.export``'s argument; by default every dim of every tensor
    input is dynamic unless the model fixes it, so one compile serves all shapes of these
    ranks (sizes 0 and 1 included) that the model's own branches allow. Give examples of
    size 2 or more in the dims that vary: torch bounds a dim traced at size 0 or 1 more
    tightly (warned). ``freeze_weights``: the weights' values change only as the module
    docstring says, so GEMM weights may stay packed between calls. Other keyword
    arguments are :class:`DiscConfig` fields. Raises what ``torch.export`` raises when
    the model cannot be exported (data-dependent control flow, say): there is no program
    to run then."""
    # imported here, not with the module: aot_load in a server process needs neither
    # dynamo (which tracing_config configures, about 1 s to import) nor the partitioner
    from .partition import PartitionedGraph, partition_and_compile, record_failed_graph
    from .trace_scope import tracing_config

    config = DiscConfig.resolve(options)
    kwargs = dict(kwargs or {})
    if dynamic_shapes is None:
        dynamic_shapes = _all_dims_auto(model, args, kwargs)
    with tracing_config(config.specialize_floats):
        program = torch.export.export(model, tuple(args), kwargs,
                                      dynamic_shapes=dynamic_shapes)
        program = program.run_decompositions(decomposition_table(config.eager_random))
    gm = program.graph_module
    try:
        graph = partition_and_compile(gm, config, get_compiler(config.target), "aot")
    except Exception as exc:  # DISC must never break the user's program: run it eagerly
        detail = f"partitioning the graph failed ({type(exc).__name__}: {exc})"
        warn_once(f"DISC: an aot_compile'd program runs eagerly: {detail}")
        graph = PartitionedGraph(gm, [], record_failed_graph(gm, "aot", detail), Clock())
    signature = _signature_of(program)
    compiled = AotCompiled(graph, signature,
                           _model_tensors(model, signature.lifted, program.constants),
                           config.target, freeze_weights)
    _warn_narrow_ranges(compiled._inputs, pytree.tree_leaves((tuple(args), kwargs)))
    return compiled


def _warn_narrow_ranges(inputs: list[_InputSpec], examples: list[Any]) -> None:
    """Say so when an example's size 0 or 1 left a dim a bounded range: torch reasons
    about such sizes apart (transformers' GPT-2 traced at batch 1 serves batches 1-2
    only), and the cure is an example of size 2 or more in that dim."""
    for spec, example in zip(inputs, examples):
        for d, dim in enumerate(spec.dims):
            if (not isinstance(dim, int) and dim[2] is not None
                    and isinstance(example, torch.Tensor) and example.shape[d] <= 1):
                warnings.warn(
                    f"aot_compile: input {spec.name!r} was exported with size "
                    f"{example.shape[d]} in dim {d}, and the program serves sizes "
                    f"[{dim[1]}, {dim[2]}] there only; export with an example of size 2 or "
                    "more in that dim to serve every size", UserWarning, stacklevel=3)


def aot_load(path: str | os.PathLike[str], model: torch.nn.Module | None = None, *,
             freeze_weights: bool | None = None) -> AotCompiled:
    """A compiled model :meth:`AotCompiled.save` wrote, ready to call.

    ``model``: the parameters and buffers to run with, read in place as
    :func:`aot_compile` reads them (each must have the saved one's shape and dtype);
    without it, the saved values. ``freeze_weights``: as :func:`aot_compile`'s; None
    keeps what the saved model was compiled with. The file is a pickle (``torch.load`` with
    ``weights_only=False``): load only files you trust."""
    try:
        data = torch.load(path, weights_only=False)
    except Exception as exc:
        raise AotLoadError(f"{path}: not a saved DISC compiled model "
                           f"({type(exc).__name__}: {exc})") from exc
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise AotLoadError(f"{path}: not a saved DISC compiled model of format {_FORMAT} "
                           f"(found {found!r})")
    for name, have in (("torch", torch.__version__), ("disc_torch", BRIDGE_VERSION)):
        if data[name] != have:
            raise AotLoadError(f"{path} was saved with {name} {data[name]}, this process has "
                               f"{have}: compile the model again with aot_compile")
    signature: _Signature = data["signature"]
    tensors = data["tensors"]
    if model is not None:
        own = _model_tensors(model, [x for x in signature.lifted if x[0] != "constant"], {})
        for target, t in own.items():
            want = tensors[target]
            if t.shape != want.shape or t.dtype != want.dtype:
                raise AotLoadError(
                    f"the model's {target} is a {t.dtype} tensor of shape {list(t.shape)}, "
                    f"the saved program takes {want.dtype} of shape {list(want.shape)}")
        tensors = {**tensors, **own}
    graph = thaw_graph(data["graph"], get_compiler(data["target"]))
    if freeze_weights is None:
        freeze_weights = bool(data.get("freeze_weights", False))
    return AotCompiled(graph, signature, tensors, data["target"], freeze_weights)
