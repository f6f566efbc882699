"""Convolutions through oneDNN's convolution primitive (``csrc/onednn_conv.c``), with the
bias and ReLU that follow them fused as post-ops.

Eager PyTorch runs its convolutions in oneDNN; DISC lowering them to im2col + BLAS GEMM
(``lower.lower_convolutions``) compares a different convolution algorithm, and lost to it
(conv + bias + ReLU at 0.69x eager). With oneDNN installed (``disc-runtime[onednn]``, the
GNU-OpenMP build :func:`disc_runtime.native.onednn_library` finds), the ``lower`` stage's
first pass, :class:`UseOneDNNConvolutions`, turns every convolution the primitive covers
into ``fused_convolution`` (``ops/fused_conv.py``) and folds a following bias add and ReLU
into it: forward convolutions run oneDNN's forward primitive, input gradients
(``GraphBuilder.conv_input_grad``: a flipped kernel, the stride as input dilation) its
backward-data primitive, filter gradients (XLA's form, ``GraphBuilder.conv_filter_grad``)
its backward-weights primitive. The others (f64: oneDNN's CPU engine has no f64
convolution; other input dilations, split into phases by ``SplitInputDilation`` after this
pass; negative padding) keep the im2col lowering.
Without oneDNN, or with ``DISC_ONEDNN_CONV=0``, nothing changes.

At run time the module opens the library by the path seen at compile time (part of the
compile cache key, see :func:`cache_identity`) and makes one primitive per concrete
problem, kept in an LRU cache inside the module (a problem oneDNN rejects is remembered
too), so one compilation still serves every shape. Forward convolutions over plain
channel-first buffers with channel counts that are multiples of the block run on
channel-blocked activations (nChw16c with AVX-512, nChw8c on AVX2-only CPUs: the layout
eager's oneDNN picks on each) rather than oneDNN 3.2's own choice, channels-last, whose
transposes cost more (see ``disc_dnnl_blocked_fits``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from ..dtypes import DType
from ..ir import Graph, Op, Value
from ..opdef import LibraryCode, Rewriter
from ..options import CORE_OPTIONS
from ..passes.base import Pass
from ..passes.rewrite import rewrite_ops
from .ccommon import Symbols, c_source, strides

__all__ = ["UseOneDNNConvolutions", "cache_identity", "emit_fused_convolution",
           "onednn_conv_library", "use_onednn_convolutions"]

#: oneDNN eltwise algorithm of each activation (dnnl_alg_kind_t values of the v3 C API)
_ELTWISE = {"none": 0, "relu": 32}


@functools.lru_cache(maxsize=1)
def _installed_library() -> str | None:
    try:
        from disc_runtime.native import onednn_library
    except ImportError:  # pragma: no cover - the runtime is a dependency
        return None
    return onednn_library()


def onednn_conv_library() -> str | None:
    """Path of the oneDNN library convolutions compile to, or None (not installed, or
    ``DISC_ONEDNN_CONV=0``)."""
    if not CORE_OPTIONS.value("onednn_conv"):
        return None
    return _installed_library()


def cache_identity() -> dict[str, object]:
    """What the compile cache key adds for a graph with convolutions: the library they
    run in (a module built for oneDNN must not be reused where it is absent)."""
    path = onednn_conv_library()
    return {"onednn_conv": None if path is None else _file_identity(path)}


@functools.lru_cache(maxsize=4)
def _file_identity(path: str) -> list[object] | None:
    """(path, size, mtime) of the library, once per process (keys are made per call)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_size, int(st.st_mtime)]


def qualifies(op: Op) -> bool:
    """Whether a oneDNN convolution primitive computes convolution ``op``: f32, 1 to 3
    spatial dims, padding >= 0, no input dilation unless :func:`flipped_kernel` finds an
    input gradient (any layouts: buffers are described by their strides). The forward
    primitive runs it, or the backward-weights one when it is a filter gradient in XLA's
    form (batch groups, or a "kernel" larger than the result: chosen at run time, see
    ``disc_dnnl_convolution`` in ``csrc/onednn_conv.c``)."""
    a = op.attrs
    lhs, rhs = op.operands
    if lhs.dtype is not DType.F32 or rhs.dtype is not DType.F32:
        return False
    sp = [ch for ch in a["input_layout"] if ch not in "NC"]
    if not 1 <= len(sp) <= 3:
        return False
    if any(v < 0 for pair in a["padding"] for v in pair):
        return False
    return all(d == 1 for d in a["lhs_dilation"]) or flipped_kernel(op) is not None


def flipped_kernel(op: Op) -> Value | None:
    """The unreversed kernel of an input-gradient convolution (``conv_input_grad``: the
    output gradient dilated by the stride, convolved at stride 1 with the forward's kernel
    reversed in space), for oneDNN's backward-data primitive; None for another form (no
    groups, and each low padding at most the dilated kernel's extent - 1)."""
    a = op.attrs
    rhs = op.operands[1]
    p = rhs.producer
    kl = a["kernel_layout"]
    spatial = sorted(kl.index(ch) for ch in kl if ch not in "OI")
    if (p is None or p.name != "reverse" or sorted(p.attrs["dimensions"]) != spatial
            or a["feature_group_count"] != 1 or a["batch_group_count"] != 1
            or any(s != 1 for s in a["window_strides"])):
        return None
    sp = [ch for ch in a["input_layout"] if ch not in "NC"]
    for j, ch in enumerate(sp):
        k = rhs.shape[kl.index(ch)]
        if not k.is_const or a["padding"][j][0] > (k.value - 1) * a["rhs_dilation"][j]:
            return None
    return p.operands[0]


class UseOneDNNConvolutions(Pass):
    """convolution -> fused_convolution (oneDNN) with its bias add and ReLU folded in."""

    name = "use-onednn-convolutions"

    def run(self, graph: Graph) -> bool:
        return use_onednn_convolutions(graph)


def use_onednn_convolutions(graph: Graph) -> bool:
    """Rewrite the convolutions oneDNN covers (:func:`qualifies`) into
    ``fused_convolution``, then fold into each an ``add`` of a bias broadcast along the
    output features and a ``max`` with zero that only it feeds. Nothing when oneDNN is
    not available (:func:`onednn_conv_library`)."""
    if onednn_conv_library() is None:
        return False

    def to_fused(op: Op, rw: Rewriter) -> Value | None:
        if op.name != "convolution" or not qualifies(op):
            return None
        if any(d != 1 for d in op.attrs["lhs_dilation"]):  # an input gradient
            kernel = flipped_kernel(op)
            return rw.op("fused_convolution", op.operands[0], kernel, **op.attrs,
                         activation="none", flip_kernel=True)
        return rw.op("fused_convolution", *op.operands, **op.attrs, activation="none")

    changed = rewrite_ops(graph, to_fused)
    if not changed:
        return False
    returned = {id(v) for v in graph.outputs}
    users: dict[Value, list[Op]] = {}

    def fold(op: Op, rw: Rewriter) -> Value | None:
        if op.name not in ("add", "max") or len(op.operands) != 2:
            return None
        for i in (0, 1):
            conv, other = op.operands[i], op.operands[1 - i]
            p = conv.producer
            if (p is None or p.name != "fused_convolution" or p.attrs["activation"] != "none"
                    or p.attrs["batch_group_count"] != 1 or p.attrs["flip_kernel"]
                    or len(users.get(conv, [])) != 1 or id(conv) in returned
                    or conv.type != op.results[0].type):
                continue
            if op.name == "add" and len(p.operands) == 2:
                bias = _feature_bias(other, p.attrs["output_layout"].index("C"))
                if bias is not None:
                    return rw.op("fused_convolution", *p.operands, bias, **p.attrs)
            if op.name == "max" and _is_zero(other):
                return rw.op("fused_convolution", *p.operands,
                             **{**p.attrs, "activation": "relu"})
        return None

    while True:  # a fold's result is a new op: its users are known on the next round
        users = graph.users()
        if not rewrite_ops(graph, fold):
            break
        _drop_dead(graph)
    fold_edge_pads(graph)
    return True


def fold_edge_pads(graph: Graph) -> bool:
    """Fold into ``fused_convolution`` the zero ``pad`` at the high spatial edges (a
    run-time size's remainder: positive zero-extends, negative cuts) that strided
    convolutions' gradients put around them (``GraphBuilder.conv_input_grad`` and
    ``conv_filter_grad``): one on the input of a convolution that is not an input gradient
    (``lhs_high``), one on the result of an input gradient (``out_high``), as long as
    nothing else reads that result. An input gradient's result rows that no window reads
    are zeroed by the call itself; a forward result cannot grow that way (its bias and
    activation would apply to the new rows), so only input gradients take ``out_high``."""
    returned = {id(v) for v in graph.outputs}
    changed = False
    while True:
        users = graph.users()

        def fold(op: Op, rw: Rewriter, users: dict = users) -> Value | None:
            if op.name == "fused_convolution" and not op.attrs["flip_kernel"]:
                lhs = op.operands[0]
                high = _edge_pad(lhs.producer, op.attrs["input_layout"])
                if high is None:
                    return None
                lhs_high = [a + b for a, b in zip(op.attrs["lhs_high"], high)]
                return rw.op("fused_convolution", lhs.producer.operands[0], *op.operands[1:],
                             **{**op.attrs, "lhs_high": lhs_high})
            if op.name == "pad":
                conv = op.operands[0]
                p = conv.producer
                if (p is None or p.name != "fused_convolution" or not p.attrs["flip_kernel"]
                        or len(users.get(conv, [])) != 1 or id(conv) in returned):
                    return None
                high = _edge_pad(op, p.attrs["output_layout"])
                if high is None:
                    return None
                out_high = [a + b for a, b in zip(p.attrs["out_high"], high)]
                return rw.op("fused_convolution", *p.operands,
                             **{**p.attrs, "out_high": out_high})
            return None

        if not rewrite_ops(graph, fold):
            return changed
        changed = True
        _drop_dead(graph)


def _edge_pad(p: Op | None, layout: str) -> list | None:
    """The high edges (spatial order of ``layout``) of ``p`` when it is a zero ``pad`` at
    the high spatial edges only (no low or interior padding, none on N or C)."""
    if p is None or p.name != "pad" or not _is_zero(p.operands[1]):
        return None
    a = p.attrs
    if any(v != 0 for v in a["low"]) or any(v != 0 for v in a["interior"]):
        return None
    if any(a["high"][layout.index(ch)] != 0 for ch in "NC"):
        return None
    return [a["high"][layout.index(ch)] for ch in layout if ch not in "NC"]


def _feature_bias(v: Value, axis: int) -> Value | None:
    """The rank-1 source of ``v`` when ``v`` broadcasts it along dim ``axis`` only."""
    p = v.producer
    if p is None or p.name != "broadcast_in_dim" or list(p.attrs["broadcast_dimensions"]) != [axis]:
        return None
    src = p.operands[0]
    if src.rank != 1 or src.dtype is not v.dtype or src.shape[0] != v.shape[axis]:
        return None
    return src


def _is_zero(v: Value) -> bool:
    """Whether ``v`` is the constant 0 or a broadcast of it."""
    import numpy as np

    p = v.producer
    while p is not None and p.name == "broadcast_in_dim" and p.operands[0].rank == 0:
        v = p.operands[0]
        p = v.producer
    if p is None:
        return False
    if p.name != "constant":
        return False
    val = p.attrs["value"]
    val = np.asarray(getattr(val, "array", val))
    return val.size > 0 and bool(np.all(val == 0))


def _drop_dead(graph: Graph) -> None:
    from ..passes.dce import DCE

    DCE().run(graph)


def emit_fused_convolution(op: Op, ptr: Callable[[Value], str], syms: Symbols
                           ) -> LibraryCode:
    """The host lines of one ``fused_convolution`` step: the problem's dims and strides
    (run-time values), then one call of ``disc_dnnl_convolution`` (``csrc/onednn_conv.c``),
    which picks the primitive."""
    from .fusion import NativeUnsupported

    lib = onednn_conv_library()
    if lib is None:
        raise NativeUnsupported("fused_convolution needs oneDNN (pip install "
                                "disc-runtime[onednn])")
    a = op.attrs
    if not a["flip_kernel"] and any(h != 0 for h in a["out_high"]):
        raise NativeUnsupported("fused_convolution: out_high on a convolution that is not "
                                "an input gradient")
    lhs, rhs = op.operands[:2]
    bias = op.operands[2] if len(op.operands) > 2 else None
    res = op.results[0]
    il, kl, ol = a["input_layout"], a["kernel_layout"], a["output_layout"]
    sp = [ch for ch in il if ch not in "NC"]
    c = syms.c

    def dims(v: Value, layout: str, order: str) -> tuple[list[str], list[str]]:
        st = strides(v.shape)
        idx = [layout.index(ch) for ch in order]
        return [c(v.shape[i]) for i in idx], [c(st[i]) for i in idx]

    sd, ss = dims(lhs, il, "NC" + "".join(sp))
    wd, ws = dims(rhs, kl, "OI" + "".join(sp))
    dd, ds = dims(res, ol, "NC" + "".join(sp))
    lines = ["  {", "    disc_conv cd;", "    memset(&cd, 0, sizeof cd);",
             f"    cd.nsp = {len(sp)}; cd.fgc = {a['feature_group_count']}; "
             f"cd.bgc = {a['batch_group_count']}; cd.act = {_ELTWISE[a['activation']]}; "
             f"cd.flip = {int(bool(a['flip_kernel']))};"]
    for name, vals in (("lhs", sd), ("lhs_st", ss), ("rhs", wd), ("rhs_st", ws), ("out", dd),
                       ("out_st", ds)):
        lines.append("    " + " ".join(f"cd.{name}[{i}] = {e};" for i, e in enumerate(vals)))
    for j in range(len(sp)):
        lo = a["padding"][j][0]  # the right padding follows from the sizes (C side)
        lines.append(f"    cd.stride[{j}] = {a['window_strides'][j]}; "
                     f"cd.rdil[{j}] = {a['rhs_dilation'][j]}; "
                     f"cd.ldil[{j}] = {a['lhs_dilation'][j]}; cd.pad_lo[{j}] = {lo};")
    bptr = f"(void *){ptr(bias)}" if bias is not None else "NULL"
    lines += [f"    if (disc_dnnl_convolution({_c_string(lib)}, &cd, (void *){ptr(lhs)}, "
              f"(void *){ptr(rhs)}, {bptr}, (void *){ptr(res)}, err, errlen)) goto fail;",
              "  }"]
    return LibraryCode(lines, {"onednn_conv": c_source("onednn_conv.c")}, linked=True)


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
