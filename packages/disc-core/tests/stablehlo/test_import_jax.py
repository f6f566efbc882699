"""DISC compiles JAX programs: jax.export with symbolic shapes -> import_ -> DISC's native
engine, compared with jax's own results at shapes the export never saw (jax lowered once,
symbolically; DISC compiles once, symbolically)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jaxlib")
jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax import export as jexport  # noqa: E402

from disc_core.compiler import Compiler  # noqa: E402
from disc_core.stablehlo import UnsupportedStableHLOError, import_  # noqa: E402


@pytest.fixture(scope="module")
def compiler(tmp_path_factory: pytest.TempPathFactory) -> Compiler:
    from disc_runtime import CompileCache

    return Compiler(CompileCache(tmp_path_factory.mktemp("disc-cache")))


def _export(fn, specs: list[tuple[str, object]]) -> str:
    """jax.export of ``fn`` over (shape spec, dtype) pairs; one symbol scope for all."""
    names = sorted({t.strip() for s, _ in specs for t in s.split(",")
                    if t.strip() and not t.strip().isdigit()})
    scope = jexport.symbolic_shape(", ".join(names)) if names else ()
    env = dict(zip(names, scope))
    args = [jax.ShapeDtypeStruct(tuple(env.get(t.strip(), None) or int(t) for t in s.split(",")
                                       if t.strip()), dt) for s, dt in specs]
    return jexport.export(jax.jit(fn))(*args).mlir_module()


def _gpt_block(tokens, emb, wq, wk, wv, wo, g, b):
    x = emb[tokens]  # [B, S, D] (gather)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    h = (x - mu) / jnp.sqrt(var + 1e-5) * g + b
    q, k, v = h @ wq, h @ wk, h @ wv
    s = jnp.einsum("bsd,btd->bst", q, k) / np.sqrt(q.shape[-1]).astype(np.float32)
    causal = jnp.arange(s.shape[1])[:, None] >= jnp.arange(s.shape[2])[None, :]
    s = jnp.where(causal, s, -1e9)
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bst,btd->bsd", p, v) @ wo
    return x + jax.nn.gelu(o, approximate=False)


def _cnn(x, w1, w2):
    y = jax.lax.conv_general_dilated(x, w1, (1, 1), "SAME",
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    y = jax.nn.relu(y)
    y = jax.lax.conv_general_dilated(y, w2, (2, 2), ((1, 1), (1, 1)),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return jnp.tanh(y).mean(axis=(2, 3))


CASES = {
    "gpt_block": (_gpt_block, [("B, S", np.int32), ("50, 16", np.float32),
                               ("16, 16", np.float32), ("16, 16", np.float32),
                               ("16, 16", np.float32), ("16, 16", np.float32),
                               ("16", np.float32), ("16", np.float32)],
                  [dict(B=1, S=1), dict(B=2, S=5), dict(B=3, S=8), dict(B=1, S=13)]),
    "cnn": (_cnn, [("B, 3, H, W", np.float32), ("4, 3, 3, 3", np.float32),
                   ("5, 4, 3, 3", np.float32)],
            [dict(B=1, H=4, W=4), dict(B=2, H=7, W=5), dict(B=3, H=9, W=12)]),
    "elementwise_reduce": (lambda x, y: (jnp.exp(x) * y - jnp.log1p(jnp.abs(y))).sum(0),
                           [("B, N", np.float32), ("B, N", np.float32)],
                           [dict(B=1, N=1), dict(B=4, N=3), dict(B=9, N=2)]),
    "reshape_iota_argmax": (lambda x: (x.reshape(-1, 2).argmax(-1),
                                       jnp.arange(x.shape[0]) * 2, jnp.sort(x, axis=1)),
                            [("B, 6", np.float32)], [dict(B=1), dict(B=2), dict(B=7)]),
    "slice_pad_concat": (lambda x: jnp.concatenate(
        [jax.lax.slice(x, (1, 1), (x.shape[0], 4)),
         jax.lax.slice(jnp.pad(x, ((0, 1), (2, 0))), (0, 0), (x.shape[0] - 1, 3))], axis=0),
        [("B, 6", np.float32)], [dict(B=2), dict(B=3), dict(B=10)]),
}


def _draw(specs: list[tuple[str, object]], binding: dict[str, int], rng) -> list[np.ndarray]:
    out = []
    for s, dt in specs:
        shape = tuple(binding.get(t.strip(), None) or int(t) for t in s.split(",") if t.strip())
        if np.dtype(dt).kind == "i":
            out.append(rng.integers(0, 50, size=shape).astype(dt))
        else:
            out.append((rng.standard_normal(shape) * 0.5).astype(dt))
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_jax_program_on_disc(name: str, compiler: Compiler) -> None:
    fn, specs, bindings = CASES[name]
    graph = import_(_export(fn, specs))
    # jax's dimension variables become DISC symbols by name, shared across inputs
    symbols = {t.strip() for s, _ in specs for t in s.split(",") if t.strip().isalpha()}
    assert graph.free_symbols() >= symbols
    exe = compiler.compile(graph)
    rng = np.random.default_rng(0)
    for binding in bindings:
        inputs = _draw(specs, binding, rng)
        want = jax.jit(fn)(*inputs)
        want = list(want) if isinstance(want, tuple) else [want]
        got = exe.run(inputs)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            w = np.asarray(w)
            assert np.asarray(g).shape == w.shape, (name, binding)
            if w.dtype.kind == "f":
                np.testing.assert_allclose(np.asarray(g), w, rtol=2e-4, atol=2e-5,
                                           err_msg=f"{name} {binding}")
            else:
                np.testing.assert_array_equal(np.asarray(g).astype(w.dtype), w)


def test_jit_lower_module_imports() -> None:
    """``jax.jit(f).lower(*args).compiler_ir("stablehlo")`` (an ir.Module of jax's own
    context) imports directly."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    module = jax.jit(lambda a: jnp.maximum(a, 3.0).T @ a).lower(x).compiler_ir("stablehlo")
    graph = import_(module)
    from disc_core.interpreter import interpret

    np.testing.assert_allclose(interpret(graph, [x])[0], np.maximum(x, 3.0).T @ x)


def test_unsupported_ops_are_named() -> None:
    def loop(x):
        return jax.lax.fori_loop(0, 3, lambda i, a: a * 2.0, x) + jnp.cbrt(x)

    text = _export(loop, [("B", np.float32)])
    with pytest.raises(UnsupportedStableHLOError) as info:
        import_(text)
    assert "stablehlo.while" in info.value.ops
    assert "stablehlo.cbrt" in info.value.ops
    assert "stablehlo.while" in str(info.value)
