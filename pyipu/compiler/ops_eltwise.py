"""ONNX op lowerings: the element-wise functions beyond ops.py's basic set (trigonometric and
activation UNARY functions, IsNaN/IsInf, bitwise ops, Mod, BitShift, PRelu), CastLike, Mean and
QuantizeLinear/DequantizeLinear, all composed from existing instructions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pyipu.compiler.ir import (
    ALL_DTYPES,
    FLOAT_DTYPES,
    INT_DTYPES,
    NUMERIC_DTYPES,
    UNSIGNED_DTYPES,
    f64_bits,
    np_dtype,
)
from pyipu.compiler.lower import Node
from pyipu.compiler.ops import _binary_fn, _broadcast, _since, register, unary
from pyipu.enums import BinaryFn, DType, Op, UnaryFn

for _name, _fn, _since_v in (
    ("Tan", UnaryFn.TAN, 7),
    ("Asin", UnaryFn.ASIN, 7),
    ("Acos", UnaryFn.ACOS, 7),
    ("Atan", UnaryFn.ATAN, 7),
    ("Sinh", UnaryFn.SINH, 9),
    ("Cosh", UnaryFn.COSH, 9),
    ("Asinh", UnaryFn.ASINH, 9),
    ("Acosh", UnaryFn.ACOSH, 9),
    ("Atanh", UnaryFn.ATANH, 9),
    ("Softsign", UnaryFn.SOFTSIGN, 1),
    ("HardSwish", UnaryFn.HARD_SWISH, 14),
    ("Mish", UnaryFn.MISH, 18),
):
    register(_name, _since_v)(unary(_fn))

register("Selu", 1)(
    unary(
        UnaryFn.SELU, (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875))
    )
)
register("Celu", 12)(unary(UnaryFn.CELU, (("alpha", 1.0),), lambda _: frozenset({DType.FLOAT32})))
register("ThresholdedRelu", 10)(unary(UnaryFn.THRESHOLDED_RELU, (("alpha", 1.0),)))
register("Swish", 24)(unary(UnaryFn.SWISH, (("alpha", 1.0),)))
register("Shrink", 9)(
    unary(UnaryFn.SHRINK, (("bias", 0.0), ("lambd", 0.5)), lambda _: NUMERIC_DTYPES)
)
register("IsNaN", 9)(unary(UnaryFn.ISNAN, out=DType.BOOL))
register("IsInf", 10, 20)(
    unary(
        UnaryFn.ISINF,
        (("detect_positive", 1), ("detect_negative", 1)),
        lambda opset: FLOAT_DTYPES if opset >= 20 else frozenset({DType.FLOAT32}),
        DType.BOOL,
    )
)
register("BitwiseNot", 18)(unary(UnaryFn.BITWISE_NOT, dtypes=lambda _: INT_DTYPES))


@register("Gelu", 20)
def Gelu(n: Node) -> None:  # noqa: N802 - registry functions are named after ONNX ops
    dt = n.check_dtype(FLOAT_DTYPES, 0)
    approx = n.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        n.fail(f"approximate={approx!r} is not supported (none, tanh)")
    p0 = f64_bits(1.0 if approx == "tanh" else 0.0)
    n.emit(Op.UNARY, [n.input(0)], n.shape(0), dt, [int(UnaryFn.GELU), p0, 0])


# ---------------------------------------------------------------- binary


def _ints(_opset: int) -> frozenset[int]:
    return INT_DTYPES


for _name, _bfn in (
    ("BitwiseAnd", BinaryFn.BITWISE_AND),
    ("BitwiseOr", BinaryFn.BITWISE_OR),
    ("BitwiseXor", BinaryFn.BITWISE_XOR),
):
    register(_name, 18)(_binary_fn(_bfn, _ints))

_mod = _binary_fn(BinaryFn.MOD, lambda _: NUMERIC_DTYPES)
_fmod = _binary_fn(BinaryFn.FMOD, lambda _: NUMERIC_DTYPES)


@register("Mod", 10, 13, 28)
def Mod(n: Node) -> None:  # noqa: N802
    fmod = int(n.attr("fmod", 0))
    if fmod not in (0, 1):
        n.fail(f"fmod={fmod} must be 0 or 1")
    if not fmod and n.dtype(0) in FLOAT_DTYPES and n.opset < 28:
        n.fail("fmod=0 on floating-point inputs is invalid before opset 28 (use fmod=1)")
    (_fmod if fmod else _mod)(n)


# Signed integers from opset 28 (arithmetic right shift).
_shift_dtypes = _since(28, INT_DTYPES, UNSIGNED_DTYPES)
_shl = _binary_fn(BinaryFn.BITSHIFT_LEFT, _shift_dtypes)
_shr = _binary_fn(BinaryFn.BITSHIFT_RIGHT, _shift_dtypes)


@register("BitShift", 11, 28)
def BitShift(n: Node) -> None:  # noqa: N802
    direction = n.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        n.fail(f"direction {direction!r} must be LEFT or RIGHT")
    (_shl if direction == "LEFT" else _shr)(n)


_PRELU_INTS = frozenset({DType.INT32, DType.INT64, DType.UINT32, DType.UINT64})
_prelu = _binary_fn(
    BinaryFn.PRELU, lambda opset: FLOAT_DTYPES | _PRELU_INTS if opset >= 9 else FLOAT_DTYPES
)


@register("PRelu", 1, 7, 9, 16)
def PRelu(n: Node) -> None:  # noqa: N802
    xs, ss = n.shape(0), n.shape(1)
    if n.opset < 7 and len(ss) == 1 and len(xs) > 2 and ss[0] == xs[1] != 1:
        # before opset 7 a slope of C values is per channel (axis 1): a [C, 1, ...] view
        n.check_dtype(FLOAT_DTYPES, 0, 1)
        slope = n.low.b.view(n.input(1), (ss[0], *[1] * (len(xs) - 2)), n.inputs[1] + ":chan")
        n.emit(Op.BINARY, [n.input(0), slope], xs, n.dtype(0), [int(BinaryFn.PRELU)])
        return
    # slope broadcasts to X (unidirectional): the output has X's shape.
    if _broadcast(n, xs, ss) != xs:
        n.shape_error(f"slope {list(ss)} does not broadcast to X {list(xs)}")
    _prelu(n)


# ---------------------------------------------------------------- CastLike, Mean


@register("CastLike", 15)
def CastLike(n: Node) -> None:  # noqa: N802
    src = n.check_dtype(ALL_DTYPES, 0)
    dst = n.check_dtype(ALL_DTYPES, 1)
    if dst == src:
        n.set_view(n.input(0), n.shape(0))
    else:
        n.emit(Op.CAST, [n.input(0)], n.shape(0), dst)


@register("Mean", 1, 6, 8, 13)
def Mean(n: Node) -> None:  # noqa: N802 - a chain of ADD, then one DIV by the input count
    count = len(n.inputs)
    if not all(n.has_input(i) for i in range(count)):
        n.fail("every input is required")
    dt = n.check_dtype(FLOAT_DTYPES, *range(count))
    shape = _broadcast(n, *(n.shape(i) for i in range(count)))
    if count == 1:
        n.set_view(n.input(0), shape)
        return
    acc, acc_shape = n.input(0), n.shape(0)
    for i in range(1, count):
        acc_shape = _broadcast(n, acc_shape, n.shape(i))
        acc = n.emit_temp(Op.ADD, [acc, n.input(i)], acc_shape, dt, suffix=f":sum{i}")
    name = f"{n.outputs[0]}:mean_count"
    k = n.low.b.weight(name, np.array(count, dtype=np_dtype(dt)), n.low.subgraph)
    n.emit(Op.DIV, [acc, k], shape, dt)


# ---------------------------------------------------------------- QuantizeLinear, DequantizeLinear

_QUANT_DTYPES = frozenset({DType.INT8, DType.UINT8, DType.INT16, DType.UINT16})


def _as(n: Node, i: int, dt: DType, suffix: str) -> int:
    """Input i in dtype dt (a CAST unless it already has it)."""
    t = n.input(i)
    return t if n.dtype(i) == dt else n.emit_temp(Op.CAST, [t], n.shape(i), dt, suffix=suffix)


def _block(n: Node) -> tuple[int, int]:
    """(axis, block_size); block_size 0 (per tensor or per axis): (0, 0)."""
    block = int(n.attr("block_size", 0) or 0)
    if not block:
        return 0, 0
    axis = n.axis(int(n.attr("axis", 1)), len(n.shape(0)))
    if block < 0 or (block and n.shape(0)[axis] % block):
        n.fail(f"block_size {block} must divide x's dim {n.shape(0)[axis]} on axis {axis}")
    return axis, block


def _work_shape(n: Node) -> tuple[int, ...]:
    """x's shape, with the axis split into [blocks, block_size] for blocked quantization."""
    xs = n.shape(0)
    axis, block = _block(n)
    return (*xs[:axis], xs[axis] // block, block, *xs[axis + 1 :]) if block else xs


def _qparam(n: Node, i: int, t: int, what: str) -> int:
    """Scale or zero point `t` (input i) shaped to broadcast against the work shape: per tensor
    (one value), per axis (1-D, x.shape[axis] values: a [C, 1, ...] view) or blocked (x's rank,
    x.shape[axis] / block_size values on the axis: a [..., blocks, 1, ...] view)."""
    xs, ps = n.shape(0), n.shape(i)
    axis, block = _block(n)
    if block:
        want = (*xs[:axis], xs[axis] // block, *xs[axis + 1 :])
        if ps != want:
            n.shape_error(f"{what} shape {list(ps)} must be {list(want)} (blocked)")
        return n.low.b.view(t, (*want[: axis + 1], 1, *want[axis + 1 :]), n.inputs[i] + ":block")
    if math.prod(ps) == 1:
        return n.low.b.view(t, (), n.inputs[i] + ":scalar") if ps else t
    if len(ps) != 1 or n.opset < 13:
        n.shape_error(f"{what} shape {list(ps)} must be a scalar or 1-D (per axis, opset >= 13)")
    axis = n.axis(int(n.attr("axis", 1)), len(xs))
    if ps[0] != xs[axis]:
        n.shape_error(f"{what} has {ps[0]} values, x has {xs[axis]} on axis {axis}")
    return n.low.b.view(t, (ps[0], *[1] * (len(xs) - 1 - axis)), n.inputs[i] + ":per_axis")


def _x_as(n: Node, dt: DType, suffix: str) -> int:
    """x in dtype dt, viewed in the work shape."""
    t = _as(n, 0, dt, suffix)
    shape = _work_shape(n)
    return t if shape == n.shape(0) else n.low.b.view(t, shape, n.inputs[0] + suffix + ":work")


def _emit_out(n: Node, op: Op, inputs: list[int], dtype: DType, attrs: Sequence[int] = ()) -> None:
    """The last instruction, in the work shape; the output is x's shape."""
    shape = _work_shape(n)
    if shape == n.shape(0):
        n.emit(op, inputs, shape, dtype, attrs)
    else:
        n.set_view(n.emit_temp(op, inputs, shape, dtype, attrs, ":work"), n.shape(0))


def _out_dtype(n: Node, default: DType) -> DType:
    od = int(n.attr("output_dtype", 0) or 0)
    try:
        return DType(od) if od else default
    except ValueError:
        n.fail(f"output_dtype {od} is not supported")


@register("QuantizeLinear", 10, 13, 19, 21, 23)
def QuantizeLinear(n: Node) -> None:  # noqa: N802 - saturate(round_half_even(x / scale) + zp)
    n.check_dtype(FLOAT_DTYPES | {DType.INT32}, 0)
    n.check_dtype(FLOAT_DTYPES | {DType.INT32}, 1)
    if int(n.attr("precision", 0) or 0) not in (0, int(DType.FLOAT32)):
        n.fail("a division precision other than float32 is not supported")
    has_zp = n.has_input(2)
    out = n.dtype(2) if has_zp else _out_dtype(n, DType.UINT8)
    if has_zp and int(n.attr("output_dtype", 0) or 0) not in (0, int(out)):
        n.fail("output_dtype differs from the zero point's dtype")
    if out not in _QUANT_DTYPES or (out not in (DType.INT8, DType.UINT8) and n.opset < 21):
        n.fail(f"quantizing to {out.name.lower()} is not supported")
    f32, shape = DType.FLOAT32, _work_shape(n)
    x = _x_as(n, f32, ":x_f32")
    scale = _qparam(n, 1, _as(n, 1, f32, ":scale_f32"), "y_scale")
    q = n.emit_temp(Op.DIV, [x, scale], shape, f32, suffix=":div")
    q = n.emit_temp(Op.UNARY, [q], shape, f32, [int(UnaryFn.ROUND), 0, 0], ":round")
    if has_zp:
        zp = _qparam(n, 2, _as(n, 2, f32, ":zp_f32"), "y_zero_point")
        q = n.emit_temp(Op.ADD, [q, zp], shape, f32, suffix=":add_zp")
    info = np.iinfo(np_dtype(out))
    clip = [int(UnaryFn.CLIP), f64_bits(float(info.min)), f64_bits(float(info.max))]
    q = n.emit_temp(Op.UNARY, [q], shape, f32, clip, ":saturate")
    _emit_out(n, Op.CAST, [q], out)


@register("DequantizeLinear", 10, 13, 19, 21, 23)
def DequantizeLinear(n: Node) -> None:  # noqa: N802 - (x - zp) * scale
    src = n.check_dtype(_QUANT_DTYPES | {DType.INT32}, 0)
    if src not in (DType.INT8, DType.UINT8, DType.INT32) and n.opset < 21:
        n.fail(f"dequantizing {src.name.lower()} needs opset 21")
    sdt = n.check_dtype(FLOAT_DTYPES, 1)
    out = _out_dtype(n, sdt)
    if out not in FLOAT_DTYPES:
        n.fail(f"output_dtype {out.name.lower()} is not supported")
    i32, f32, shape = DType.INT32, DType.FLOAT32, _work_shape(n)
    x = _x_as(n, src, "")
    if n.has_input(2):  # the difference in int32 (exact), as onnxruntime computes it
        n.check_dtype(frozenset({src}), 2)
        x = _x_as(n, i32, ":x_i32")
        zp = _qparam(n, 2, _as(n, 2, i32, ":zp_i32"), "x_zero_point")
        x = n.emit_temp(Op.SUB, [x, zp], shape, i32, suffix=":sub_zp")
    x = n.emit_temp(Op.CAST, [x], shape, f32, suffix=":f32")
    scale = _qparam(n, 1, _as(n, 1, f32, ":scale_f32"), "x_scale")
    if out == f32:
        _emit_out(n, Op.MUL, [x, scale], f32)
    else:
        y = n.emit_temp(Op.MUL, [x, scale], shape, f32, suffix=":mul")
        _emit_out(n, Op.CAST, [y], out)
