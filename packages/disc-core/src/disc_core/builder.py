"""Build graphs from Python: ``b.add(x, y)`` or ``b.op("reduce", x, kind="sum", axes=[1])``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .dtypes import DType, dtype_of
from .ir import Graph, SymbolInfo, TensorType, Value
from .opdef import VerifyError, get_op
from .symbolic import Expr, ExprLike, as_expr


class GraphBuilder:
    """Appends ops in program order, so the graph is topologically sorted by construction."""

    def __init__(self, name: str = "main"):
        self.graph = Graph(name)

    def symbol(self, name: str, *, min: int | None = None, max: int | None = None,
               multiple_of: int | None = None) -> Expr:
        """Declare a named dimension, optionally with a range and a divisor hint."""
        info = self.graph.symbols.get(name) or SymbolInfo(name)
        info.min = min if min is not None else info.min
        info.max = max if max is not None else info.max
        info.multiple_of = multiple_of if multiple_of is not None else info.multiple_of
        if info.has_hints:
            self.graph.symbols[name] = info
        return Expr.sym(name)

    def input(self, name: str, dtype: DType | str, shape: Iterable[ExprLike]) -> Value:
        if any(v.name == name for v in self.graph.inputs):
            raise VerifyError(f"graph @{self.graph.name}: duplicate input name {name!r}")
        v = Value(TensorType.of(dtype, shape), name=name)
        self.graph.inputs.append(v)
        return v

    def op(self, name: str, *operands: Value, **attrs: Any) -> Value | tuple[Value, ...]:
        op = get_op(name).build(list(operands), attrs)
        self.graph.ops.append(op)
        return op.results[0] if len(op.results) == 1 else tuple(op.results)

    def constant(self, value: Any, dtype: DType | str | None = None) -> Value:
        arr = np.asarray(value, dtype=dtype_of(dtype).np if dtype is not None else None)
        if dtype is None and arr.dtype == np.float64 and not isinstance(value, np.ndarray):
            arr = arr.astype(np.float32)  # Python floats default to f32, as in frameworks
        if dtype is None and arr.dtype == np.int64 and not isinstance(value, np.ndarray):
            arr = arr.astype(np.int64)
        return self.op("constant", value=arr)  # type: ignore[return-value]

    # -- framework conveniences: what every bridge needs on top of the closed op set --------
    def full(self, value: Any, dtype: DType | str, shape: Iterable[ExprLike]) -> Value:
        """``value`` everywhere in ``shape``: a rank-0 constant broadcast (fused, never
        materialized)."""
        return self.broadcast_to(self.constant(value, dtype), shape)

    def cast(self, v: Value, dtype: DType | str) -> Value:
        dt = dtype_of(dtype)
        return v if v.dtype == dt else self.op("convert", v, dtype=dt)  # type: ignore[return-value]

    def reshape_to(self, v: Value, shape: Iterable[ExprLike]) -> Value:
        """A reshape, or ``v`` itself when it already has ``shape``."""
        dims = tuple(as_expr(d) for d in shape)
        if tuple(v.shape) == dims:
            return v
        return self.op("reshape", v, shape=list(dims))  # type: ignore[return-value]

    def broadcast_to(self, v: Value, shape: Iterable[ExprLike]) -> Value:
        """numpy/torch/TF implicit broadcasting, the provable form: trailing dims aligned,
        size-1 dims stretch.

        A dim that is neither equal to the target nor statically 1 is an error: DISC
        compiles one graph for all shapes, so "this symbol is 1 at run time" is never
        assumed. Bridges use :func:`disc_core.bridge.broadcast.broadcast_to` instead, the
        same rule except that such a dim is left to ``broadcast_in_dim``'s run-time check
        (1 or equal), so framework graphs with unrelated symbolic dims still compile.
        """
        dims = tuple(as_expr(d) for d in shape)
        if tuple(v.shape) == dims:
            return v
        offset = len(dims) - v.rank
        if offset < 0:
            raise VerifyError(f"cannot broadcast rank {v.rank} to rank {len(dims)}")
        kept: list[int] = []
        kept_dims: list[Expr] = []
        for i, d in enumerate(v.shape):
            target = dims[offset + i]
            if d == target:
                kept.append(offset + i)
                kept_dims.append(d)
            elif not (d.is_const and d.value == 1):
                raise VerifyError(f"cannot broadcast dim {d} to {target}: not provably equal "
                                  "and not statically 1")
        v = self.reshape_to(v, kept_dims)
        return self.op("broadcast_in_dim", v, shape=list(dims),  # type: ignore[return-value]
                       broadcast_dimensions=kept)

    def dim_size(self, v: Value, axis: int, dtype: DType | str = "i64") -> Value:
        """``v.shape[axis]`` as a rank-0 value (a constant when static)."""
        d = v.shape[axis]
        if d.is_const:
            return self.constant(d.value, dtype)
        return self.cast(self.op("get_dimension_size", v, dimension=axis),  # type: ignore[arg-type]
                         dtype)

    def element_count(self, v: Value, axes: Iterable[int], dtype: DType | str) -> Value:
        """How many elements of ``v`` a reduction over ``axes`` combines (rank 0)."""
        count: Value | None = None
        static = 1
        for a in axes:
            if v.shape[a].is_const:
                static *= v.shape[a].value
                continue
            size = self.dim_size(v, a, dtype)
            count = size if count is None else self.op("mul", count, size)  # type: ignore
        if count is None:
            return self.constant(static, dtype)
        return count if static == 1 else self.op(  # type: ignore[return-value]
            "mul", count, self.constant(static, dtype))

    def size_value(self, e: ExprLike, dtype: DType | str = "i64",
                   unbound: Callable[[str], tuple[Value, int]] | None = None) -> Value:
        """A symbolic size as a rank-0 value, read at run time from the dims of the graph's
        inputs: ``2*N*S`` for a reshape target, ``1 / (N*H*W)`` for batch norm's mean.

        floordiv/ceildiv/mod/min/max atoms follow the symbolic algebra's (Python's) floor
        semantics; the ``div`` op truncates like C, so the quotient is corrected. A symbol
        no input dim carries is located by ``unbound(name)`` -> (value, axis); without it
        that is an error.
        """
        e = as_expr(e)
        if e.is_const:
            return self.constant(e.value, dtype)
        total: Value | None = None
        for mono, coeff in e.terms:
            term: Value = self.constant(coeff, "i64")
            for atom in mono:
                term = self.op("mul", term, self._size_atom(atom, unbound))  # type: ignore
            total = term if total is None else self.op("add", total, term)  # type: ignore
        assert total is not None
        return self.cast(total, dtype)

    def _size_atom(self, atom: Any, unbound: Callable[[str], tuple[Value, int]] | None
                   ) -> Value:
        fn = getattr(atom, "fn", None)
        if fn is None:
            name = atom.name
            site = next(((v, a) for v in self.graph.inputs for a, d in enumerate(v.shape)
                         if d.is_symbol and d.symbol_name == name), None)
            if site is None:
                if unbound is None:
                    raise VerifyError(f"size {name} is not a dim of any input of the graph")
                site = unbound(name)
            return self.dim_size(site[0], site[1])
        args = [self.size_value(a, "i64", unbound) for a in atom.args]
        if fn in ("min", "max"):
            out = args[0]
            for a in args[1:]:
                out = self.op(fn, out, a)  # type: ignore[assignment]
            return out
        a, b = args
        if fn == "ceildiv":  # ceil(a / b) = -floor(-a / b)
            return self.op("neg", self._floordiv(self.op("neg", a), b))  # type: ignore
        q = self._floordiv(a, b)
        return q if fn == "floordiv" else self.op(  # type: ignore[return-value]
            "sub", a, self.op("mul", q, b))

    def _floordiv(self, a: Value, b: Value) -> Value:
        """Python's floor division of i64 values (``div`` truncates toward zero)."""
        zero = self.constant(0, "i64")
        q = self.op("div", a, b)
        inexact = self.op("compare", self.op("rem", a, b), zero, direction="ne")
        signs_differ = self.op("xor", self.op("compare", a, zero, direction="lt"),
                               self.op("compare", b, zero, direction="lt"))
        return self.op("select", self.op("and", inexact, signs_differ),  # type: ignore
                       self.op("sub", q, self.constant(1, "i64")), q)

    # -- convolution gradients, HLO-style: every framework's conv backward is these two ----
    def conv_input_grad(self, dy: Value, w: Value, input_shape: Sequence[ExprLike], *,
                        window_strides: Sequence[int], padding: Sequence[Sequence[int]],
                        rhs_dilation: Sequence[int], feature_group_count: int = 1,
                        input_layout: str, kernel_layout: str, output_layout: str) -> Value:
        """The gradient of ``convolution(x, w)`` with respect to ``x`` (shape
        ``input_shape``), given the output gradient ``dy``; the keyword arguments are the
        forward convolution's (``lhs_dilation`` 1).

        It is itself a convolution, as in XLA: ``dy`` dilated by the stride
        (``lhs_dilation``), convolved at stride 1 with the kernel flipped in space and with
        its input and output features swapped (per group). Per spatial dim, the forward
        windows cover ``F = (out - 1) * stride + (k - 1) * dilation + 1`` positions of the
        padded input, so the full transposed convolution (padding ``(k - 1) * dilation``
        both sides) has size F; the input's gradient is that range shifted by the low
        padding and cut or zero-extended to the input size (positions no window reads get
        zero). When that end adjustment is a constant (stride 1, or static sizes) it folds
        into the convolution's padding; otherwise (the remainder of a strided window walk
        depends on the run-time size) a ``pad`` with a symbolic high edge applies it, since
        ``padding`` must be constant.
        """
        il, kl, ol = input_layout, kernel_layout, output_layout
        sp = [ch for ch in il if ch not in "NC"]
        g = feature_group_count
        ksizes = [w.shape[kl.index(ch)] for ch in sp]
        if not all(k.is_const for k in ksizes):
            raise VerifyError(f"conv_input_grad: kernel spatial sizes {ksizes} must be static")
        # kernel [O, I, sp...] -> [og, G*I, sp...] flipped: features swapped per group
        wc = self.op("transpose", w, permutation=[kl.index("O"), kl.index("I"),
                                                  *[kl.index(ch) for ch in sp]])
        o, i = wc.shape[0], wc.shape[1]
        if g > 1:
            if not o.is_const:
                raise VerifyError("conv_input_grad: grouped kernel with symbolic features")
            og = o.value // g
            wc = self.reshape_to(wc, [g, og, i, *ksizes])
            wc = self.op("transpose", wc, permutation=[1, 0, 2, *range(3, 3 + len(sp))])
            wc = self.reshape_to(wc, [og, g * i, *ksizes])
        wc = self.op("reverse", wc, dimensions=list(range(2, 2 + len(sp))))
        conv_pad, low, high = [], [], []
        for j, ch in enumerate(sp):
            k, d, s = ksizes[j].value, rhs_dilation[j], window_strides[j]
            p_lo = padding[j][0]
            out = dy.shape[ol.index(ch)]
            size = as_expr(input_shape[il.index(ch)])
            full = (out - 1) * s + (k - 1) * d + 1
            end = size + p_lo - full  # > 0: zero rows no window reads; < 0: crop
            if end.is_const:
                conv_pad.append(((k - 1) * d - p_lo, (k - 1) * d + end.value))
                low.append(0)
                high.append(as_expr(0))
            else:  # crop inside the conv only as far as it stays valid for every size
                c = min(p_lo, (k - 1) * d)
                conv_pad.append(((k - 1) * d - c, (k - 1) * d))
                low.append(c - p_lo)
                high.append(end)
        dx = self.op("convolution", dy, wc, window_strides=[1] * len(sp), padding=conv_pad,
                     lhs_dilation=list(window_strides), rhs_dilation=list(rhs_dilation),
                     feature_group_count=g, batch_group_count=1, input_layout=ol,
                     kernel_layout="IO" + "".join(sp), output_layout=il)
        if any(low) or any(not h.is_const or h.value for h in high):
            lo_full, hi_full = [0] * dx.rank, [as_expr(0)] * dx.rank
            for j, ch in enumerate(sp):
                lo_full[il.index(ch)], hi_full[il.index(ch)] = low[j], high[j]
            zero = self.constant(np.zeros((), dy.dtype.np))
            dx = self.op("pad", dx, zero, low=lo_full, high=hi_full, interior=[0] * dx.rank)
        return dx  # type: ignore[return-value]

    def conv_filter_grad(self, x: Value, dy: Value, kernel_shape: Sequence[ExprLike], *,
                         window_strides: Sequence[int], padding: Sequence[Sequence[int]],
                         rhs_dilation: Sequence[int], feature_group_count: int = 1,
                         input_layout: str, kernel_layout: str, output_layout: str) -> Value:
        """The gradient of ``convolution(x, w)`` with respect to ``w`` (shape
        ``kernel_shape``), given the output gradient ``dy``; the keyword arguments are the
        forward convolution's (``lhs_dilation`` 1).

        As in XLA, a convolution that contracts over the batch and the output positions:
        ``x`` with its batch and feature roles swapped is the input, ``dy`` (batch as input
        features) the kernel, dilated by the forward stride, and the window steps by the
        forward dilation; feature groups become batch groups. Its result spatial size is
        the kernel's while its "kernel" size is the symbolic output size; the native
        lowering's gathered patch matrix takes either extent symbolic. The input is cut
        to the extent the forward windows cover,
        ``(out - 1) * stride + (k - 1) * dilation + 1`` per spatial dim, so the result size
        is exactly ``k``; a cut that depends on the run-time size goes into an explicit
        ``pad`` (symbolic edges) instead of the constant ``padding``.
        """
        il, kl, ol = input_layout, kernel_layout, output_layout
        sp = [ch for ch in il if ch not in "NC"]
        conv_pad, highs = [], []
        for j, ch in enumerate(sp):
            k = as_expr(kernel_shape[kl.index(ch)])
            d, s = rhs_dilation[j], window_strides[j]
            p_lo = padding[j][0]
            out = dy.shape[ol.index(ch)]
            size = x.shape[il.index(ch)]
            hi = (out - 1) * s + (k - 1) * d + 1 - size - p_lo
            conv_pad.append((p_lo, hi.value if hi.is_const else 0))
            highs.append(as_expr(0) if hi.is_const else hi)
        if any(not h.is_const for h in highs):  # cut on the run-time size: pad's symbolic edge
            hi_full = [as_expr(0)] * x.rank
            for j, ch in enumerate(sp):
                hi_full[il.index(ch)] = highs[j]
            zero = self.constant(np.zeros((), x.dtype.np))
            x = self.op("pad", x, zero, low=[0] * x.rank, high=hi_full,  # type: ignore
                        interior=[0] * x.rank)
        swap = str.maketrans({"N": "C", "C": "N"})
        dw = self.op("convolution", x, dy, window_strides=list(rhs_dilation), padding=conv_pad,
                     lhs_dilation=[1] * len(sp), rhs_dilation=list(window_strides),
                     feature_group_count=1, batch_group_count=feature_group_count,
                     input_layout=il.translate(swap),
                     kernel_layout=ol.translate(str.maketrans({"N": "I", "C": "O"})),
                     output_layout=kl.translate(str.maketrans({"O": "C", "I": "N"})))
        return dw  # type: ignore[return-value]

    def build(self, *outputs: Value | Sequence[Value]) -> Graph:
        outs: list[Value] = []
        for o in outputs:
            outs.extend(o if isinstance(o, (list, tuple)) else [o])
        self.graph.outputs = outs
        self.graph.verify()
        return self.graph

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*operands: Value, **attrs: Any) -> Value | tuple[Value, ...]:
            return self.op(name, *operands, **attrs)

        return call
