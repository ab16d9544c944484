"""The element-wise family over every integer dtype, the new UNARY/BINARY functions, CastLike,
Mean: each case compiled, run on the NumPy reference and compared with onnxruntime (or
onnx.reference where onnxruntime lacks the kernel or the opset), and run on the C kernels and
compared with the reference."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from models import (
    F16,
    F32,
    I32,
    I64,
    arr,
    assert_matches_reference,
    check_op,
    compile_single_op,
    run_c,
)
from onnx.reference import ReferenceEvaluator

from pyipu.compiler import (
    Executable,
    ShapeError,
    UnsupportedAttributeError,
    UnsupportedDTypeError,
)
from pyipu.enums import DType, Op

I8, U8, I16, U16, U32, U64 = np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64
SIGNED = [I8, I16, I32, I64]
UNSIGNED = [U8, U16, U32, U64]
INTS = SIGNED + UNSIGNED
NUMERIC = [F32, F16, *INTS]
ALL = [*NUMERIC, np.bool_]
DTYPE_OF = {np.dtype(d.name.lower()): int(d) for d in DType if d.name != "FLOAT64"}


def ints(shape: tuple[int, ...], dt: Any, seed: int = 0, lo: int = -50, hi: int = 50) -> np.ndarray:
    """Random integers in [lo, hi] (clipped to dt's range when dt is an integer type)."""
    if np.dtype(dt).kind in "iu":
        lo, hi = max(lo, int(np.iinfo(dt).min)), min(hi, int(np.iinfo(dt).max))
    return np.random.default_rng(seed).integers(lo, hi + 1, shape).astype(dt)


def check_ref(
    op: str,
    inputs: list[np.ndarray],
    attrs: dict | None = None,
    *,
    opset: int,
    consts: dict[int, np.ndarray] | None = None,
) -> None:
    """check_op against onnx.reference (for opsets onnxruntime does not load yet)."""
    exe, feeds, model = compile_single_op(op, inputs, attrs, opset=opset, const_inputs=consts)
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    want = ReferenceEvaluator(model).run(None, feeds)
    for w, (name, g) in zip(want, got.items(), strict=True):
        assert g.dtype == w.dtype, name
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=2e-3)
        else:
            np.testing.assert_array_equal(g, w)


def run_both(op: str, inputs: list[np.ndarray], attrs: dict | None = None, **kw: Any) -> np.ndarray:
    """The C kernels against the reference only (cases onnxruntime leaves undefined)."""
    exe, feeds, _ = compile_single_op(op, inputs, attrs, **kw)
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    return got["out0"]


# ---------------------------------------------------------------- arithmetic


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dt", NUMERIC)
def test_arith_all_dtypes(op: str, dt: Any) -> None:
    if dt in (F32, F16):
        a, b = arr((3, 4), dt, 1), arr((4,), dt, 2, low=0.5, high=3)
    else:
        a, b = ints((3, 4), dt, 1), ints((4,), dt, 2, lo=1, hi=9)  # no x/0: UB in onnxruntime
    check_op(op, [a, b], opset=14)


@pytest.mark.parametrize("dt", INTS)
def test_arith_wraps_and_div_truncates(dt: Any) -> None:
    info = np.iinfo(dt)
    a = np.array([info.max, info.min, -7 if info.min else 7, 5, 0], dt)
    b = np.array([1, 1, 2, 0, 3], dt)
    assert run_both("Add", [a, b], opset=14)[0] == info.min  # wraps
    q = run_both("Div", [a, b], opset=14)
    assert q[2] == (-3 if info.min else 3) and q[3] == 0  # truncates; x / 0 == 0
    m = run_both("Mul", [a, a], opset=14)
    assert m[0] == np.array(info.max, dt) * np.array(info.max, dt)


@pytest.mark.parametrize("dt", [*SIGNED, F32])
def test_relu_signed(dt: Any) -> None:
    check_op("Relu", [ints((5, 7), dt) if dt != F32 else arr((5, 7), dt)], opset=14)


@pytest.mark.parametrize("op", ["Abs", "Sign", "Neg"])
@pytest.mark.parametrize("dt", INTS)
def test_unary_ints(op: str, dt: Any) -> None:
    if op == "Neg" and dt in UNSIGNED:
        with pytest.raises(UnsupportedDTypeError, match="not supported"):
            check_op(op, [ints((4, 5), dt)], opset=13)
        return
    x = ints((4, 5), dt)
    x.flat[0] = np.iinfo(dt).min
    x.flat[1] = 0
    check_op(op, [x], opset=13)


@pytest.mark.parametrize("dt", INTS)
def test_clip_ints(dt: Any) -> None:
    info = np.iinfo(dt)
    x = ints((4, 6), dt)
    x.flat[:2] = [info.min, info.max]
    lo, hi = np.array(max(info.min, -20), dt), np.array(30, dt)
    check_op("Clip", [x], opset=13, const_inputs={1: lo, 2: hi})
    check_op("Clip", [x], opset=13, const_inputs={1: None, 2: hi})
    check_op("Clip", [x], opset=13, const_inputs={1: lo})


def test_clip_uint64_large_bounds() -> None:
    x = np.array([0, 5, 2**63, 2**64 - 1, 2**63 + 7], U64)
    lo, hi = np.array(3, U64), np.array(2**63 + 5, U64)
    check_op("Clip", [x], opset=13, const_inputs={1: lo, 2: hi})


# ---------------------------------------------------------------- comparisons, min/max, where


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dt", NUMERIC)
def test_compare_all_dtypes(op: str, dt: Any) -> None:
    a = ints((3, 5), dt, 1, lo=-3, hi=3).astype(dt)
    b = ints((5,), dt, 2, lo=-3, hi=3).astype(dt)
    check_op(op, [a, b], opset=13)


@pytest.mark.parametrize("op", ["Min", "Max"])
@pytest.mark.parametrize("dt", INTS)
def test_min_max_ints(op: str, dt: Any) -> None:
    check_op(op, [ints((2, 3), dt, 1), ints((3,), dt, 2), ints((2, 1), dt, 3)], opset=13)


@pytest.mark.parametrize("dt", ALL)
def test_where_all_dtypes(dt: Any) -> None:
    c = arr((3, 4), np.bool_, 1)
    x, z = (
        arr((3, 4), dt, s) if dt in (F32, F16, np.bool_) else ints((3, 4), dt, s) for s in (2, 3)
    )
    check_op("Where", [c, x, z[:1]], opset=16)


@pytest.mark.parametrize("dt", [I16, U16, U64, I8, U32])
def test_data_movement_integer_dtypes(dt: Any) -> None:
    x, z = ints((2, 1, 3), dt, 1), ints((2, 4, 3), dt, 2)
    check_op("Expand", [x], opset=13, const_inputs={1: np.array([2, 4, 3], np.int64)})
    check_op("Concat", [x, z], {"axis": 1}, opset=13)
    check_op("Transpose", [z], {"perm": [2, 0, 1]}, opset=13)


@pytest.mark.parametrize(
    "base,exp",
    [(I32, I32), (I64, I64), (I32, I64), (I64, U8), (I32, F32), (I64, F16), (F32, I8), (F16, U16)],
)
def test_pow_types(base: Any, exp: Any) -> None:
    lo = 0 if exp in (F32, F16) else -5  # a negative base to a fractional power is NaN
    a = (
        ints((3, 4), base, 1, lo=lo, hi=5)
        if base not in (F32, F16)
        else arr((3, 4), base, 1, low=0.5)
    )
    b = (
        ints((4,), exp, 2, lo=0, hi=4)
        if exp not in (F32, F16)
        else arr((4,), exp, 2, low=0, high=3)
    )
    check_op("Pow", [a, b], opset=15)


def test_pow_int_negative_exponent() -> None:
    a = np.array([2, 1, -1, -1, 0, 3], I32)
    b = np.array([-1, -5, -3, -2, 2, 4], I32)
    np.testing.assert_array_equal(run_both("Pow", [a, b], opset=15), [0, 1, -1, 1, 0, 81])


# ---------------------------------------------------------------- Cast, CastLike


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_cast_all_pairs(src: Any, dst: Any) -> None:
    # values every dtype holds; float -> int truncates
    x = np.array([[0, 1, 7, 100], [3.75, 2.5, 0.25, 64]], np.float32)
    x = x.astype(np.int64).astype(src) if np.dtype(src).kind in "iub" else x.astype(src)
    check_op("Cast", [x], {"to": DTYPE_OF[np.dtype(dst)]}, opset=13)


def test_cast_saturates_and_wraps() -> None:
    x = np.array([1e30, -1e30, np.nan, -3.7, 300.5, 2.0**70], np.float32)
    for dt in INTS:
        got = run_both("Cast", [x], {"to": DTYPE_OF[np.dtype(dt)]}, opset=13)
        info = np.iinfo(dt)
        assert got[0] == info.max and got[1] == info.min and got[2] == 0
    big = np.array([2**64 - 1, 2**63, 5], U64)
    f = run_both("Cast", [big], {"to": DTYPE_OF[np.dtype(F32)]}, opset=13)
    np.testing.assert_allclose(f, [2.0**64, 2.0**63, 5])
    np.testing.assert_array_equal(
        run_both("Cast", [big], {"to": DTYPE_OF[np.dtype(I8)]}, opset=13), [-1, 0, 5]
    )


@pytest.mark.parametrize(
    "src,dst", [(F32, I16), (U8, F16), (I64, U64), (np.bool_, F32), (F16, F16)]
)
def test_castlike(src: Any, dst: Any) -> None:
    x = np.array([[0, 1, 2], [5, 6, 0]]).astype(src)
    check_op("CastLike", [x, np.zeros((1,), dst)], opset=15)


# ------------------------------------------------ UNARY functions over their domains

UNARY_DOMAINS = {
    "Tan": (-1.2, 1.2),
    "Asin": (-0.99, 0.99),
    "Acos": (-0.99, 0.99),
    "Atan": (-5, 5),
    "Sinh": (-4, 4),
    "Cosh": (-4, 4),
    "Asinh": (-5, 5),
    "Acosh": (1, 6),
    "Atanh": (-0.95, 0.95),
    "Softsign": (-5, 5),
    "HardSwish": (-5, 5),
    "Mish": (-6, 6),
}


@pytest.mark.parametrize("op", list(UNARY_DOMAINS))
@pytest.mark.parametrize("dt", [F32, F16])
def test_unary_float_functions(op: str, dt: Any) -> None:
    lo, hi = UNARY_DOMAINS[op]
    check_op(op, [arr((3, 41), dt, 3, low=lo, high=hi)], opset=18, tol=3e-2 if dt == F16 else None)


@pytest.mark.parametrize(
    "op,attrs,opset",
    [
        ("Selu", {}, 13),
        ("Selu", {"alpha": 2.0, "gamma": 3.0}, 13),
        ("ThresholdedRelu", {}, 13),
        ("ThresholdedRelu", {"alpha": 0.5}, 13),
        ("Shrink", {}, 13),
        ("Shrink", {"bias": 1.5, "lambd": 1.0}, 13),
        ("Gelu", {}, 20),
        ("Gelu", {"approximate": "tanh"}, 20),
    ],
    ids=str,
)
@pytest.mark.parametrize("dt", [F32, F16])
def test_unary_functions_with_attributes(op: str, attrs: dict, opset: int, dt: Any) -> None:
    check_op(
        op,
        [arr((4, 9), dt, 5, low=-4, high=4)],
        attrs,
        opset=opset,
        tol=3e-2 if dt == F16 else None,
    )


@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.5}])
def test_celu_float32_only(attrs: dict) -> None:
    check_op("Celu", [arr((4, 9), F32, 5, low=-4, high=4)], attrs, opset=13)
    with pytest.raises(UnsupportedDTypeError, match="float16"):
        compile_single_op("Celu", [arr((4, 9), F16, 5)], attrs, opset=13)


@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.5}])
def test_swish(attrs: dict) -> None:
    check_ref("Swish", [arr((4, 9), F32, 5, low=-6, high=6)], attrs, opset=24)


@pytest.mark.parametrize("dt", INTS)
def test_shrink_ints(dt: Any) -> None:
    check_op("Shrink", [ints((3, 8), dt, lo=-9, hi=9)], {"bias": 2.0, "lambd": 1.5}, opset=13)


@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize("attrs", [{}, {"detect_positive": 0}, {"detect_negative": 0}], ids=str)
def test_isnan_isinf(dt: Any, attrs: dict) -> None:
    x = np.array([[1.0, np.nan, np.inf, -np.inf], [0.0, -2.0, np.nan, 3.0]], dt)
    check_op("IsInf", [x], attrs, opset=20)  # float16 from opset 20
    if not attrs:
        check_op("IsNaN", [x], opset=13)
    if dt == F16:
        with pytest.raises(UnsupportedDTypeError, match="float16"):
            compile_single_op("IsInf", [x], attrs, opset=13)


@pytest.mark.parametrize("dt", INTS)
def test_bitwise_not(dt: Any) -> None:
    check_op("BitwiseNot", [ints((3, 7), dt)], opset=18)


# ---------------------------------------------------------------- new BINARY functions


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dt", INTS)
def test_bitwise_binary(op: str, dt: Any) -> None:
    check_op(op, [ints((3, 5), dt, 1), ints((5,), dt, 2)], opset=18)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dt", INTS)
def test_mod_ints(fmod: int, dt: Any) -> None:
    a, b = ints((3, 8), dt, 1), ints((8,), dt, 2, lo=-7, hi=7)
    b[b == 0] = 3
    check_op("Mod", [a, b], {"fmod": fmod}, opset=13)


@pytest.mark.parametrize("dt", SIGNED)
def test_mod_by_zero_and_minus_one(dt: Any) -> None:
    info = np.iinfo(dt)
    a = np.array([7, -7, info.min, 5], dt)
    b = np.array([0, 0, -1, -3], dt)
    np.testing.assert_array_equal(run_both("Mod", [a, b], opset=13), [0, 0, 0, -1])
    np.testing.assert_array_equal(run_both("Mod", [a, b], {"fmod": 1}, opset=13), [0, 0, 0, 2])


@pytest.mark.parametrize("dt", [F32, F16])
def test_mod_floats(dt: Any) -> None:
    a = np.array([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, 3.0], dt)
    b = np.array([2.0, 2.0, -2.0, -2.0, -3.0, 3.0, np.inf], dt)
    check_op("Mod", [a, b], {"fmod": 1}, opset=13)
    check_ref("Mod", [a, b], {"fmod": 0}, opset=28)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dt", UNSIGNED)
def test_bitshift_unsigned(direction: str, dt: Any) -> None:
    bits = np.dtype(dt).itemsize * 8
    x = ints((2, 6), dt, 1, lo=0, hi=255)
    s = np.array([0, 1, 3, bits - 1, bits, bits + 3], dt)
    check_ref("BitShift", [x, s], {"direction": direction}, opset=11)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dt", SIGNED)
def test_bitshift_signed(direction: str, dt: Any) -> None:
    bits = np.dtype(dt).itemsize * 8
    x = np.array([[-8, 8, -1, 100, np.iinfo(dt).min, 3]], dt)
    s = np.array([[1, 2, -1, bits, 1, bits - 1]], dt)
    check_ref("BitShift", [x, s], {"direction": direction}, opset=28)
    with pytest.raises(UnsupportedDTypeError, match="int"):
        compile_single_op("BitShift", [x, s], {"direction": direction}, opset=18)


@pytest.mark.parametrize("dt", [F32, F16, I32, I64, U32, U64])
@pytest.mark.parametrize("slope_shape", [(1,), (5,), (3, 1)])
def test_prelu(dt: Any, slope_shape: tuple[int, ...]) -> None:
    x = arr((3, 5), dt, 1) if dt in (F32, F16) else ints((3, 5), dt, 1)
    slope = arr(slope_shape, dt, 2) if dt in (F32, F16) else ints(slope_shape, dt, 2, lo=-3, hi=3)
    check_op("PRelu", [x, slope], opset=16)


def test_prelu_legacy_channel_slope() -> None:
    x, slope = arr((2, 3, 4), F32, 1), arr((3,), F32, 2)
    got = run_both("PRelu", [x, slope], opset=6)
    np.testing.assert_allclose(got, np.where(x < 0, slope[:, None] * x, x), rtol=1e-6)


# ---------------------------------------------------------------- Mean


@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_mean(dt: Any, n: int) -> None:
    xs = [arr(s, dt, i) for i, s in enumerate([(2, 3), (3,), (2, 1)][:n])]
    check_op("Mean", xs, opset=13)


# ---------------------------------------------------------------- errors and the verifier


def test_dtype_and_attribute_errors() -> None:
    with pytest.raises(UnsupportedDTypeError, match="int8"):
        compile_single_op("Add", [ints((2,), I8), ints((2,), I8)], opset=13)  # int8 from 14
    with pytest.raises(UnsupportedDTypeError, match="int8"):
        compile_single_op("Relu", [ints((2,), I8)], opset=13)
    with pytest.raises(UnsupportedDTypeError, match="float32"):
        compile_single_op("BitwiseAnd", [arr((2,), F32), arr((2,), F32)], opset=18)
    with pytest.raises(UnsupportedDTypeError, match="int32"):
        compile_single_op("Mean", [ints((2,), I32), ints((2,), I32)], opset=13)
    with pytest.raises(UnsupportedAttributeError, match="fmod=0"):
        compile_single_op("Mod", [arr((2,), F32), arr((2,), F32)], opset=13)
    with pytest.raises(UnsupportedAttributeError, match="approximate"):
        compile_single_op("Gelu", [arr((2,), F32)], {"approximate": "fast"}, opset=20)
    with pytest.raises(ShapeError, match="does not broadcast"):
        compile_single_op("PRelu", [arr((3,), F32), arr((2, 3), F32)], opset=16)


def _retype(exe: Executable, dtype: DType) -> Executable:
    """The program with every tensor retyped (same byte sizes required by the caller)."""
    p = exe.program
    tensors = tuple(dataclasses.replace(t, dtype=dtype) for t in p.tensors)
    return Executable.from_program(dataclasses.replace(p, tensors=tensors))


def test_verifier_rejects_bitwise_on_floats() -> None:
    exe, feeds, _ = compile_single_op("BitwiseAnd", [ints((4,), I32), ints((4,), I32)], opset=18)
    assert any(i.op == Op.BINARY for i in exe.program.programs[-1].instrs)
    bad = _retype(exe, DType.FLOAT32)
    with pytest.raises(Exception, match="binary function 15 does not take dtype float32"):
        run_c(bad, {k: v.astype(np.float32) for k, v in feeds.items()})


def test_verifier_rejects_neg_on_unsigned() -> None:
    exe, feeds, _ = compile_single_op("Neg", [ints((4,), I32)], opset=13)
    bad = _retype(exe, DType.UINT32)
    with pytest.raises(Exception, match="unary function 0 does not take dtype uint32"):
        run_c(bad, {k: v.astype(np.uint32) for k, v in feeds.items()})


# ---------------------------------------------------------------- QuantizeLinear, DequantizeLinear


@pytest.mark.parametrize(
    "xdt,qdt,opset,per_axis",
    [
        (F32, U8, 10, False),
        (F32, I8, 13, False),
        (F32, I8, 13, True),
        (F32, U8, 13, True),
        (F16, U8, 19, False),
        (I32, I8, 23, False),  # an int32 x takes a float scale from opset 23
        (F32, I16, 21, True),
        (F32, U16, 21, False),
    ],
    ids=str,
)
def test_quantize_linear(xdt: Any, qdt: Any, opset: int, per_axis: bool) -> None:
    x = arr((2, 3, 4), F32, 1, low=-300, high=300)
    x[0, 0, :4] = [0.5, 1.5, 2.5, -0.5]  # halves round to even (scale 1 on channel 0)
    x = x.astype(xdt)
    sdt = F16 if xdt == F16 else F32
    scale = np.array([1.0, 0.5, 2.0], sdt) if per_axis else np.array(1.0, sdt)
    zp = np.array([0, 3, 7], qdt) if per_axis else np.array(5 if qdt in UNSIGNED else -4, qdt)
    if opset >= 23:
        check_ref("QuantizeLinear", [x], opset=opset, consts={1: scale, 2: zp})
        return
    check_op("QuantizeLinear", [x], opset=opset, const_inputs={1: scale, 2: zp})
    if not per_axis and qdt == U8:  # no zero point: uint8, zero 0
        check_op("QuantizeLinear", [x], opset=opset, const_inputs={1: scale})


@pytest.mark.parametrize(
    "xdt,sdt,opset,per_axis",
    [
        (U8, F32, 10, False),
        (I8, F32, 13, True),
        (I32, F32, 13, False),
        (U8, F16, 19, True),
        (I16, F32, 21, False),
        (U16, F32, 21, True),
    ],
    ids=str,
)
def test_dequantize_linear(xdt: Any, sdt: Any, opset: int, per_axis: bool) -> None:
    x = ints((2, 3, 4), xdt, 1, lo=-100, hi=200)
    scale = np.array([1.0, 0.5, 2.0], sdt) if per_axis else np.array(0.25, sdt)
    zp = np.array([0, 3, 7], xdt) if per_axis else np.array(5, xdt)
    if xdt != I32:
        check_op("DequantizeLinear", [x], opset=opset, const_inputs={1: scale, 2: zp})
    check_op("DequantizeLinear", [x], opset=opset, const_inputs={1: scale})


def test_quantize_blocked() -> None:
    x = arr((2, 4, 3), F32, 1, low=-50, high=50)
    scale = np.array([[[0.5, 1, 2], [1, 2, 4]], [[1, 1, 1], [3, 3, 3]]], F32)  # [2, 4/2, 3]
    zp = np.zeros((2, 2, 3), I8)
    attrs = {"axis": 1, "block_size": 2}
    check_ref("QuantizeLinear", [x], attrs, opset=21, consts={1: scale, 2: zp})
    q = ints((2, 4, 3), I8, 2)
    check_ref("DequantizeLinear", [q], attrs, opset=21, consts={1: scale, 2: zp})
    with pytest.raises(UnsupportedAttributeError, match="block_size 3"):
        compile_single_op(
            "QuantizeLinear", [x], {"axis": 1, "block_size": 3}, opset=21, const_inputs={1: scale}
        )


def test_quantize_errors() -> None:
    x = arr((2, 3), F32, 1)
    with pytest.raises(UnsupportedAttributeError, match="int16"):  # int16 from opset 21
        compile_single_op(
            "QuantizeLinear", [x], opset=19, const_inputs={1: np.array(1, F32), 2: np.array(0, I16)}
        )
    with pytest.raises(ShapeError, match="2 values"):
        compile_single_op("QuantizeLinear", [x], opset=13, const_inputs={1: np.ones(2, F32)})
