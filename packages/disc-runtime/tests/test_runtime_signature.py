from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from disc_runtime import InputError, Signature, TensorSpec
from disc_runtime.signature import dim_kind, format_dims

SIG = Signature(
    inputs=(
        TensorSpec("x", "float32", ("B", "S", 768)),
        TensorSpec("mask", "float32", ("B", "S")),
        TensorSpec("w", "float32", (768, "H")),
    ),
    outputs=(TensorSpec("out", "float32", ("B", "S", "H")),),
)


def f32(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


def test_valid_inputs_return_bindings() -> None:
    assert SIG.validate([f32(4, 5, 768), f32(4, 5), f32(768, 3)]) == {"B": 4, "S": 5, "H": 3}


def test_count_message() -> None:
    sig = Signature(
        inputs=(
            TensorSpec("x", "float32", ()),
            TensorSpec("y", "float32", ()),
            TensorSpec("w", "float32", ()),
        ),
        outputs=(),
    )
    with pytest.raises(InputError) as e:
        sig.validate([f32(), f32()])
    assert str(e.value) == "expected 3 inputs (x, y, w), got 2"


def test_dtype_message() -> None:
    with pytest.raises(InputError) as e:
        SIG.validate([f32(4, 5, 768), np.zeros((4, 5), np.int64), f32(768, 3)])
    assert str(e.value) == "input #1 'mask': expected dtype float32, got int64"


def test_rank_message() -> None:
    with pytest.raises(InputError) as e:
        SIG.validate([f32(4, 5), f32(4, 5), f32(768, 3)])
    assert str(e.value) == "input #0 'x': expected rank 3 [B, S, 768], got shape (4, 5)"


def test_static_dim_message() -> None:
    sig = Signature(
        inputs=(
            TensorSpec("x", "float32", ("B",)),
            TensorSpec("y", "float32", ("B",)),
            TensorSpec("w", "float32", (768,)),
        ),
        outputs=(),
    )
    with pytest.raises(InputError) as e:
        sig.validate([f32(4), f32(4), f32(512)])
    assert str(e.value) == "input #2 'w': dim 0 must be 768, got 512"


def test_symbol_message() -> None:
    sig = Signature(
        inputs=(TensorSpec("x", "float32", ("B", "S")), TensorSpec("y", "float32", ("B",))),
        outputs=(),
    )
    with pytest.raises(InputError) as e:
        sig.validate([f32(4, 7), f32(5)])
    assert str(e.value) == "input #1 'y': dim 0 is 5 but symbol B = 4 from input #0 'x' dim 0"


def test_symbol_repeated_within_one_input() -> None:
    sig = Signature(inputs=(TensorSpec("m", "float64", ("N", "N")),), outputs=())
    assert sig.validate([np.zeros((3, 3))]) == {"N": 3}
    with pytest.raises(InputError, match=r"dim 1 is 4 but symbol N = 3 from input #0 'm' dim 0"):
        sig.validate([np.zeros((3, 4))])


def test_derived_expressions_are_not_checked() -> None:
    sig = Signature(
        inputs=(
            TensorSpec("x", "float32", ("B", "S")),
            TensorSpec("flat", "float32", ("B*S", "floordiv(S, 2)")),
        ),
        outputs=(),
    )
    assert sig.validate([f32(2, 3), f32(99, 1)]) == {"B": 2, "S": 3}


def test_input_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        SIG.validate([])


def test_bfloat16_compared_by_name() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    sig = Signature(inputs=(TensorSpec("x", "bfloat16", (2,)),), outputs=())
    assert sig.validate([np.zeros(2, ml_dtypes.bfloat16)]) == {}
    with pytest.raises(InputError, match="expected dtype bfloat16, got float16"):
        sig.validate([np.zeros(2, np.float16)])


def test_json_round_trip() -> None:
    again = Signature.from_json(SIG.to_json())
    assert again == SIG
    assert again.inputs[0].dims == ("B", "S", 768)
    assert Signature.from_dict(SIG.to_dict()) == SIG


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match="unsupported dtype 'complex64'"):
        TensorSpec("x", "complex64", (1,))
    with pytest.raises(ValueError, match=">= 0"):
        TensorSpec("x", "float32", (-1,))
    with pytest.raises(TypeError):
        TensorSpec("x", "float32", (1.5,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lacks field 'outputs'"):
        Signature.from_dict({"inputs": []})


def test_numpy_int_dims_normalised() -> None:
    spec = TensorSpec("x", "int8", (np.int64(3), "B"))
    assert spec.dims == (3, "B") and type(spec.dims[0]) is int
    with pytest.raises(TypeError):
        TensorSpec("x", "int8", (True,))


def test_dim_kind_and_format() -> None:
    assert [dim_kind(d) for d in (3, "B", "B*S", "floordiv(S, 2)", "seq_len")] == [
        "static",
        "symbol",
        "expr",
        "expr",
        "symbol",
    ]
    assert format_dims(("B", "S", 768)) == "[B, S, 768]"


@given(
    st.lists(st.sampled_from(["A", "B", "C", 3]), min_size=1, max_size=3),
    st.dictionaries(st.sampled_from(["A", "B", "C"]), st.integers(0, 5)),
    st.integers(1, 3),
)
def test_consistent_shapes_validate(dims: list, sizes: dict, n_inputs: int) -> None:
    """Any concrete shape that instantiates the symbols consistently is accepted."""
    sizes = {s: sizes.get(s, 1) for s in "ABC"}
    sig = Signature(
        inputs=tuple(TensorSpec(f"t{i}", "int32", tuple(dims)) for i in range(n_inputs)),
        outputs=(),
    )
    shape = tuple(d if isinstance(d, int) else sizes[d] for d in dims)
    arrays = [np.zeros(shape, np.int32) for _ in range(n_inputs)]
    bindings = sig.validate(arrays)
    assert bindings == {d: sizes[d] for d in dims if isinstance(d, str)}
