"""The host C of the fused attention ops (``attention``, ``attention_grad``; see
``ops/attention.py``): one call of the blocked kernels in ``csrc/attention.c``.

The kernels see every head tensor as [batch*heads, rows, cols]: a contiguous row-major
buffer, or a sequence-major one (the op's ``seq_major``: [b..., rows, heads, cols], read
and written through a row stride of heads*cols, see ``csrc/attention.c``); the mask keeps
its own shape, so the host turns it into strides, 0
along every dim where it broadcasts. A mask dim may be a symbol that is 1 on one call and
the full size on another: the host checks it is one of the two and picks the stride per
call."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..dtypes import DType
from ..ir import Op, Value
from ..opdef import LibraryCode
from ..symbolic import Expr, product
from .ccommon import Symbols, c_source, strides
from .cexpr import ctype
from .fusion import NativeUnsupported

__all__ = ["attention_helper", "emit_attention"]

_PARAMS = {
    DType.F32: {"DISC_ATTN_T": "float", "DISC_ATTN_SFX": "float", "DISC_ATTN_EXP": "disc_expf",
                "DISC_ATTN_LOG": "logf", "DISC_ATTN_BLAS": "sgemm",
                "DISC_ATTN_BLAS_FN": "disc_sgemm_fn", "DISC_ATTN_ROWMAJOR": "1"},
    DType.F64: {"DISC_ATTN_T": "double", "DISC_ATTN_SFX": "double", "DISC_ATTN_EXP": "exp",
                "DISC_ATTN_LOG": "log", "DISC_ATTN_BLAS": "dgemm",
                "DISC_ATTN_BLAS_FN": "disc_dgemm_fn", "DISC_ATTN_ROWMAJOR": "0"},
}


def attention_helper(dt: DType) -> str:
    """``csrc/attention.c`` instantiated for ``dt`` (forward and backward kernels)."""
    params = _PARAMS[dt]
    return ("".join(f"#define {k} {v}\n" for k, v in params.items()) + c_source("attention.c")
            + "".join(f"#undef {k}\n" for k in params))


def emit_attention(op: Op, shapes: Sequence[tuple[Expr, ...]], ptr: Callable[[Value], str],
                   syms: Symbols) -> LibraryCode:
    """The host lines running ``op`` (``attention`` or ``attention_grad``, told apart by
    their operand count's fixed part: 3 or 6 tensors before the optional mask); ``shapes``:
    its operands' shapes in the logical layout (``ops.attention.logical_operand_shapes``,
    passed in by the op so this module does not import it back)."""
    q, k, v = op.operands[:3]
    qs, ks, vs = shapes[:3]
    dt = q.dtype
    if dt not in _PARAMS:
        raise NativeUnsupported(f"{op.name} on {dt.short} (the kernels cover f32 and f64)")
    grad = len(op.results) == 3
    fixed = 6 if grad else 3
    mask = op.operands[fixed] if len(op.operands) > fixed else None
    t = ctype(dt)
    nb = q.rank - 2
    batch = qs[:nb]
    c = syms.c
    sfx = _PARAMS[dt]["DISC_ATTN_SFX"]
    # bit i: head tensor i (FWD_TENSORS / GRAD_TENSORS order) is sequence-major
    seq_major = sum(1 << i for i in op.attrs["seq_major"])
    heads = c(batch[-1]) if seq_major else "1"
    L = ["  {",
         f"    const int64_t BH = {c(product(batch))}, Sq = {c(qs[-2])}, "
         f"Sk = {c(ks[-2])}, D = {c(qs[-1])}, Dv = {c(vs[-1])}, H = {heads};",
         f"    int64_t bdims[{max(nb, 1)}] = {{{', '.join(c(d) for d in batch) or '1'}}};",
         f"    int64_t mbs[{max(nb, 1)}] = {{0}}; int64_t mrs = 0, mcs = 0;",
         "    (void)bdims; (void)mbs;"]
    if mask is not None:
        target = (*batch, qs[-2], ks[-2])
        mstr = strides(mask.shape)
        names = [f"mbs[{d}]" for d in range(nb)] + ["mrs", "mcs"]
        for d, (have, want) in enumerate(zip(mask.shape, target, strict=True)):
            if have.is_const and have.value == 1:
                continue  # stride stays 0
            hc, wc = c(have), c(want)
            L.append(f"    if (({hc}) != 1 && ({hc}) != ({wc})) DISC_FAIL(\"{op.name}: mask "
                     f"dim {d} is %lld, expected 1 or %lld\", (long long)({hc}), "
                     f"(long long)({wc}));")
            L.append(f"    {names[d]} = ({hc}) == 1 && ({wc}) != 1 ? 0 : {c(mstr[d])};")
        mptr = f"(const {t} *){ptr(mask)}"
    else:
        mptr = "NULL"
    scale = repr(float(op.attrs["scale"]))
    if op.attrs["rsqrt_head_dim"]:
        scale = f"{scale} / (D > 0 ? sqrt((double)D) : 1.0)"
    causal = int(bool(op.attrs["causal"]))
    args = [f"(const {t} *){ptr(x)}" for x in op.operands[:fixed]]
    outs = [f"({t} *){ptr(r)}" for r in op.results]
    name = f"disc_attn_{'bwd' if grad else 'fwd'}_{sfx}"
    flags = [str(causal)] + ([] if grad else [str(int(op.attrs["empty_rows"] == "nan"))])
    call = ", ".join(["env", "BH", "Sq", "Sk", "D", "Dv", *args, mptr, str(nb), "bdims", "mbs",
                      "mrs", "mcs", "H", str(seq_major), f"({t})({scale})", *flags, *outs])
    blas = "sgemm" if dt is DType.F32 else "dgemm"
    L += [f"    const int rc = {name}({call});",
          f"    if (rc == 1) DISC_FAIL(\"no BLAS {blas} was provided to this module\");",
          f"    if (rc) DISC_FAIL(\"out of memory for {op.name}'s block buffers\");",
          "  }"]
    return LibraryCode(L, {f"attention_{dt.short}": attention_helper(dt)}, linked=True)
