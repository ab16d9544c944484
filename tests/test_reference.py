"""The NumPy reference interpreter against the numeric rules of docs/bytecode.md.

Programs here are built by hand (no ONNX) so each opcode's definition is tested directly: fp16
stored / fp32 computed, integer wrap, integer division, saturating casts, reduce and softmax
views, batching and the Load program.
"""

from __future__ import annotations

import numpy as np
import pytest

from pyipu.compiler.ir import (
    NO_INDEX,
    Anchor,
    Direction,
    Instr,
    Location,
    ModelIR,
    Program,
    TensorSpec,
    align,
    dtype_of,
    f64_bits,
)
from pyipu.enums import BinaryFn, DType, Op, UnaryFn
from pyipu.errors import BadProgramError
from pyipu.reference import run
from pyipu.reference.numpy_interp import int_div, saturating_cast


def make_ir(
    ins_specs: list[tuple[str, np.dtype, tuple[int, ...]]],
    out_specs: list[tuple[str, np.dtype, tuple[int, ...]]],
    instrs: list[Instr],
    weights: dict[str, np.ndarray] | None = None,
) -> ModelIR:
    """Tensors: inputs 0.., then outputs, then weights; each in its own arena slot."""
    tensors: list[TensorSpec] = []
    anchors: list[Anchor] = []
    offset = 0
    for direction, specs in ((Direction.INPUT, ins_specs), (Direction.OUTPUT, out_specs)):
        for name, dt, shape in specs:
            t = TensorSpec(name, dtype_of(np.dtype(dt)), shape, Location.ARENA, offset)
            offset = align(offset + t.nbytes)
            anchors.append(Anchor(name, direction, len(tensors)))
            tensors.append(t)
    binds = []
    data_off = 0
    for name, arr in (weights or {}).items():
        t = TensorSpec(
            name, dtype_of(arr.dtype), arr.shape, Location.TENSOR_DATA, data_off, arr.tobytes()
        )
        data_off = align(data_off + t.nbytes)
        anchors.append(Anchor(name, Direction.INPUT, len(tensors), has_tensor_data=True))
        binds.append(Instr(Op.BIND, (), (len(tensors),)))
        tensors.append(t)
    return ModelIR(
        tensors=tuple(tensors),
        anchors=tuple(anchors),
        programs=(Program(0, tuple(binds)), Program(1, tuple(instrs))),
        load_program=0,
        main_programs=(1,),
        arena_size=align(offset),
    )


def run_op(
    op: Op,
    xs: list[np.ndarray],
    out_dtype: np.dtype,
    out_shape: tuple[int, ...],
    attrs: tuple[int, ...] = (),
) -> np.ndarray:
    ins = [(f"x{i}", x.dtype, x.shape) for i, x in enumerate(xs)]
    n = len(xs)
    ir = make_ir(
        ins, [("y", np.dtype(out_dtype), out_shape)], [Instr(op, tuple(range(n)), (n,), attrs)]
    )
    return run(ir, {f"x{i}": x for i, x in enumerate(xs)})["y"]


# ---------------------------------------------------------------- element-wise


@pytest.mark.parametrize("op,fn", [(Op.ADD, np.add), (Op.SUB, np.subtract), (Op.MUL, np.multiply)])
def test_float16_is_computed_in_float32_and_rounded_once(op: Op, fn: np.ufunc) -> None:
    rng = np.random.default_rng(1)
    a = rng.uniform(-4, 4, (5, 7)).astype(np.float16)
    b = rng.uniform(-4, 4, (7,)).astype(np.float16)
    y = run_op(op, [a, b], np.float16, (5, 7))
    want = fn(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(y, want)


def test_integer_arithmetic_wraps() -> None:
    a = np.array([2**31 - 1, -(2**31), 7], dtype=np.int32)
    b = np.array([1, -1, 3], dtype=np.int32)
    np.testing.assert_array_equal(run_op(Op.ADD, [a, b], np.int32, (3,)), [-(2**31), 2**31 - 1, 10])
    np.testing.assert_array_equal(run_op(Op.MUL, [a, b], np.int32, (3,)), [2**31 - 1, -(2**31), 21])


def test_integer_division_truncates_and_div_by_zero_is_zero() -> None:
    a = np.array([7, -7, 7, -7, 5, -(2**31)], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 0, -1], dtype=np.int32)
    y = run_op(Op.DIV, [a, b], np.int32, (6,))
    np.testing.assert_array_equal(y, [3, -3, -3, 3, 0, -(2**31)])
    np.testing.assert_array_equal(int_div(np.int64([-1]), np.int64([0])), [0])


def test_float_division_by_zero_is_ieee() -> None:
    y = run_op(Op.DIV, [np.float32([1, -1, 0]), np.float32([0, 0, 0])], np.float32, (3,))
    assert y[0] == np.inf and y[1] == -np.inf and np.isnan(y[2])


def test_broadcast_scalar_and_rank_difference() -> None:
    a = np.float32(2.5).reshape(())
    b = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    np.testing.assert_array_equal(run_op(Op.MUL, [a, b], np.float32, (2, 1, 3)), a * b)


@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int32, np.int64])
def test_relu(dt: type) -> None:
    x = np.array([-3, -0.0, 0, 2, 5], dtype=dt)
    np.testing.assert_array_equal(run_op(Op.RELU, [x], dt, (5,)), np.maximum(x, 0))


def test_unary_semantics() -> None:
    u, eq = Op.UNARY, np.testing.assert_array_equal
    x = np.float32([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, np.nan])
    eq(run_op(u, [x], np.float32, (7,), (UnaryFn.ROUND, 0, 0)), [-2, -2, -0, 0, 2, 2, np.nan])
    clip = (UnaryFn.CLIP, f64_bits(-1.0), f64_bits(1.0))
    eq(run_op(u, [x], np.float32, (7,), clip), [-1, -1, -0.5, 0.5, 1, 1, np.nan])
    i = np.int32([np.iinfo(np.int32).min, -7, 0, 9])
    eq(run_op(u, [i], np.int32, (4,), (UnaryFn.NEG, 0, 0)), [i[0], 7, 0, -9])  # wraps
    eq(run_op(u, [i], np.int32, (4,), (UnaryFn.ABS, 0, 0)), [i[0], 7, 0, 9])
    eq(run_op(u, [i], np.int32, (4,), (UnaryFn.CLIP, -5, 2**40)), [-5, -5, 0, 9])
    eq(run_op(u, [np.array([True, False])], np.bool_, (2,), (UnaryFn.NOT, 0, 0)), [False, True])


def test_binary_compare_and_where_broadcast() -> None:
    a = np.float16([[1, 2, np.nan]])
    b = np.float16([[2], [1]])
    lt = run_op(Op.BINARY, [a, b], np.bool_, (2, 3), (BinaryFn.LESS,))
    np.testing.assert_array_equal(lt, [[True, False, False], [False, False, False]])
    mx = run_op(Op.BINARY, [a, b], np.float16, (2, 3), (BinaryFn.MAX,))
    np.testing.assert_array_equal(mx, [[2, 2, np.nan], [1, 2, np.nan]])
    y = run_op(Op.WHERE, [lt, np.int64(7).reshape(()), np.int64([1, 2, 3])], np.int64, (2, 3))
    np.testing.assert_array_equal(y, [[7, 2, 3], [1, 2, 3]])


# ---------------------------------------------------------------- casts


def test_float_to_int_casts_truncate_and_saturate() -> None:
    x = np.array([1.9, -1.9, 1e10, -1e10, np.nan, np.inf, -np.inf, 300.0, -5.0], dtype=np.float32)
    np.testing.assert_array_equal(
        run_op(Op.CAST, [x], np.int32, (9,)),
        [1, -1, 2**31 - 1, -(2**31), 0, 2**31 - 1, -(2**31), 300, -5],
    )
    np.testing.assert_array_equal(
        run_op(Op.CAST, [x], np.uint8, (9,)), [1, 0, 255, 0, 0, 255, 0, 255, 0]
    )
    np.testing.assert_array_equal(
        saturating_cast(np.float32([1e30, -1e30]), np.dtype(np.int64)), [2**63 - 1, -(2**63)]
    )
    np.testing.assert_array_equal(
        saturating_cast(np.float32([1e30, -3.5]), np.dtype(np.uint32)), [2**32 - 1, 0]
    )


def test_cast_to_bool_is_nonzero_and_float16_rounds_to_nearest_even() -> None:
    x = np.array([0.0, -0.0, 0.1, np.nan, 2.0], dtype=np.float32)
    np.testing.assert_array_equal(run_op(Op.CAST, [x], np.bool_, (5,)), [0, 0, 1, 1, 1])
    # 1 + 2**-11 lies halfway between two float16 values: ties go to the even one (1.0).
    halfway = np.array([1 + 2**-11, 1 + 3 * 2**-11], dtype=np.float32)
    y = run_op(Op.CAST, [halfway], np.float16, (2,))
    np.testing.assert_array_equal(y, np.array([1.0, 1 + 2**-9], dtype=np.float16))


def test_int_to_int_cast_wraps() -> None:
    x = np.array([300, -1, 2**31 - 1], dtype=np.int64)
    np.testing.assert_array_equal(run_op(Op.CAST, [x], np.uint8, (3,)), [44, 255, 255])
    np.testing.assert_array_equal(run_op(Op.CAST, [x], np.int32, (3,)), [300, -1, 2**31 - 1])


# ---------------------------------------------------------------- matrix products


def test_matmul_batch_broadcast_and_float16() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 1, 3, 4)).astype(np.float16)
    b = rng.standard_normal((5, 4, 2)).astype(np.float16)
    y = run_op(Op.MATMUL, [a, b], np.float16, (2, 5, 3, 2))
    np.testing.assert_array_equal(
        y, (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    )


def test_gemm_alpha_beta_bits() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    c = rng.standard_normal((5,)).astype(np.float32)
    attrs = (1, 1, f64_bits(0.5), f64_bits(-2.0))
    y = run_op(Op.GEMM, [a, b, c], np.float32, (3, 5), attrs)
    np.testing.assert_allclose(y, 0.5 * a.T @ b.T - 2.0 * c, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- data movement


def test_copy_reinterprets_shape_bytewise() -> None:
    x = np.arange(6, dtype=np.int8).reshape(2, 3)
    np.testing.assert_array_equal(run_op(Op.COPY, [x], np.int8, (3, 2)), x.reshape(3, 2))


def test_expand_concat_transpose() -> None:
    x = np.array([[1], [2]], dtype=np.uint8)
    np.testing.assert_array_equal(
        run_op(Op.EXPAND, [x], np.uint8, (3, 2, 4)), np.broadcast_to(x, (3, 2, 4))
    )
    a, b = np.zeros((2, 1), dtype=bool), np.ones((2, 3), dtype=bool)
    np.testing.assert_array_equal(
        run_op(Op.CONCAT, [a, b], np.bool_, (2, 4), (1,)), np.concatenate([a, b], 1)
    )
    t = np.arange(24, dtype=np.uint32).reshape(2, 3, 4)
    np.testing.assert_array_equal(
        run_op(Op.TRANSPOSE, [t], np.uint32, (4, 2, 3), (2, 0, 1)), t.transpose(2, 0, 1)
    )


# ---------------------------------------------------------------- reductions, softmax


def test_reduce_views_and_integer_mean_truncates() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(
        run_op(Op.REDUCE_SUM, [x], np.float32, (2, 1, 4), (2, 3, 4)), x.sum(1, keepdims=True)
    )
    xi = np.array([[-7, 0], [1, 1], [-1, -1]], dtype=np.int32)  # [outer=1, reduce=3, inner=2]
    y = run_op(Op.REDUCE_MEAN, [xi], np.int32, (2,), (1, 3, 2))
    np.testing.assert_array_equal(y, [-2, 0])  # -7/3 truncates to -2


def test_reduce_float16_accumulates_in_float32() -> None:
    x = np.full((4096,), 1.0, dtype=np.float16)  # fp16 accumulation would stall at 2048
    y = run_op(Op.REDUCE_SUM, [x], np.float16, (1,), (1, 4096, 1))
    assert y[0] == 4096


def test_softmax_middle_axis() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32) * 50
    y = run_op(Op.SOFTMAX, [x], np.float32, (2, 3, 4), (2, 3, 4))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-6)


# ---------------------------------------------------------------- the machine


def test_batches_are_stacked_along_dim0_and_weights_are_bound() -> None:
    w = np.array([[1.0, 2.0]], dtype=np.float32)
    ir = make_ir(
        [("x", np.float32, (1, 2))],
        [("y", np.float32, (1, 2))],
        [Instr(Op.ADD, (0, 2), (1,))],
        weights={"w": w},
    )
    x = np.arange(6, dtype=np.float32).reshape(3, 2)  # 3 batches of [1, 2]
    np.testing.assert_array_equal(run(ir, {"x": x})["y"], x + w)
    with pytest.raises(ValueError, match="weight|non-feedable"):
        run(ir, {"x": x, "w": w})
    with pytest.raises(ValueError, match="missing"):
        run(ir, {})
    with pytest.raises(TypeError, match="dtype"):
        run(ir, {"x": x.astype(np.float64)})


def test_unbound_tensor_data_is_an_error() -> None:
    w = np.ones((2,), dtype=np.float32)
    ir = make_ir(
        [("x", np.float32, (2,))],
        [("y", np.float32, (2,))],
        [Instr(Op.ADD, (0, 2), (1,))],
        weights={"w": w},
    )
    unbound = ModelIR(**{**ir.__dict__, "programs": (Program(0, ()), ir.programs[1])})
    with pytest.raises(BadProgramError, match="which the Load program does not BIND"):
        run(unbound, {"x": w})  # the verifier refuses it before anything runs


def test_scalar_outputs_stack_to_n() -> None:
    ir = make_ir([("x", np.int64, ())], [("y", np.int64, ())], [Instr(Op.ADD, (0, 0), (1,))])
    assert run(ir, {"x": np.int64(3)})["y"].shape == ()
    np.testing.assert_array_equal(run(ir, {"x": np.int64([1, 2])})["y"], [2, 4])
    assert NO_INDEX == 0xFFFFFFFF and DType.FLOAT32 == 1
