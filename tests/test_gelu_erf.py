"""GELU written out with Erf becomes one UNARY GELU (pyipu/compiler/rewrites/gelu.py), and the
vectorised Erf/Exp/GELU/Softmax kernels (runtime_c/src/interp/kernels/vmath.c) agree with
math.erf / ORT over the float range, NaN and the infinities included."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from models import assert_matches_reference, compile_single_op, expected, run_c
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler
from pyipu.enums import Op, UnaryFn

F32 = TensorProto.FLOAT


def _gelu_model(
    variant: str, shape: tuple[int, ...] = (4, 300), dtype: int = F32
) -> onnx.ModelProto:
    """GELU as exporters write it. variant: "half_first" (x·½)·(1+erf(x·1/√2)), "half_last"
    (x·(1+erf(x/√2)))·½, "shared" (the Erf result is also a graph output: must not fuse)."""
    npdt = helper.tensor_dtype_to_np_dtype(dtype)

    def c(name: str, v: float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(v, npdt), name)

    n = helper.make_node
    inits = [c("one", 1.0), c("half", 0.5)]
    if variant == "half_last":
        inits.append(c("sqrt2", math.sqrt(2.0)))
        nodes = [
            n("Div", ["x", "sqrt2"], ["u"]),
            n("Erf", ["u"], ["e"]),
            n("Add", ["one", "e"], ["p"]),
            n("Mul", ["x", "p"], ["xp"]),
            n("Mul", ["xp", "half"], ["y"]),
        ]
    else:
        inits.append(c("rsqrt2", 1 / math.sqrt(2.0)))
        nodes = [
            n("Mul", ["x", "rsqrt2"], ["u"]),
            n("Erf", ["u"], ["e"]),
            n("Add", ["e", "one"], ["p"]),
            n("Mul", ["half", "x"], ["xh"]),
            n("Mul", ["xh", "p"], ["y"]),
        ]
    outputs = [helper.make_tensor_value_info("y", dtype, shape)]
    if variant == "shared":
        outputs.append(helper.make_tensor_value_info("e", dtype, shape))
    g = helper.make_graph(
        nodes, "gelu", [helper.make_tensor_value_info("x", dtype, shape)], outputs, inits
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _main_ops(exe) -> list[Op]:
    p = exe.program
    return [Op(i.op) for i in p.program(p.main_programs[0]).instrs]


@pytest.mark.parametrize(
    "variant,dtype",
    [("half_first", F32), ("half_last", F32), ("half_first", TensorProto.FLOAT16)],
)
def test_gelu_chain_becomes_one_instruction(variant: str, dtype: int) -> None:
    model = _gelu_model(variant, dtype=dtype)
    exe = Compiler.compile(model)
    ops = _main_ops(exe)
    assert ops == [Op.UNARY], ops
    (ins,) = exe.program.program(exe.program.main_programs[0]).instrs
    assert ins.attrs[0] == UnaryFn.GELU
    x = np.linspace(-12, 12, 1200).reshape(4, 300)
    x = x.astype(helper.tensor_dtype_to_np_dtype(dtype))
    feeds = {"x": x}
    got, ref = run_c(exe, feeds), exe.run_reference(feeds)
    assert_matches_reference(got, ref)
    want = expected(model, feeds)["y"].astype(np.float32)
    tol = 1e-2 if dtype != F32 else 1e-5
    np.testing.assert_allclose(got["y"].astype(np.float32), want, rtol=tol, atol=tol)


def test_gelu_chain_with_a_shared_intermediate_is_left_alone() -> None:
    exe = Compiler.compile(_gelu_model("shared"))
    assert len(_main_ops(exe)) == 5
    x = np.linspace(-5, 5, 1200, dtype=np.float32).reshape(4, 300)
    got, ref = run_c(exe, {"x": x}), exe.run_reference({"x": x})
    assert_matches_reference(got, ref)


def _f32_bits(stride: int) -> np.ndarray:
    """Every stride-th float32 bit pattern (both signs, subnormals, inf, NaN) plus specials."""
    bits = np.arange(0, 2**32, stride, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    specials = [
        np.nan,
        np.inf,
        -np.inf,
        0.0,
        -0.0,
        1e-45,
        -1e-45,
        1.0,
        -1.0,
        3.92,
        4.0,
        -88.8,
        89.0,
    ]
    return np.concatenate([x, np.array(specials, np.float32)])


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in representable float32 values (NaN against NaN: 0)."""

    def key(v: np.ndarray) -> np.ndarray:
        i = v.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF) - 1, i)

    d = np.abs(key(a) - key(b))
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, np.where(np.isnan(a) != np.isnan(b), 2**40, d))


@pytest.mark.parametrize("op,ref", [("Erf", math.erf), ("Exp", math.exp)])
def test_erf_and_exp_over_the_float_range(op: str, ref) -> None:
    x = _f32_bits(8191)
    exe, feeds, _ = compile_single_op(op, [x], opset=13)
    got = run_c(exe, feeds)
    (y,) = got.values()

    def exact(v: float) -> float:
        try:
            return ref(v)
        except OverflowError:
            return math.inf

    with np.errstate(over="ignore"):  # exp beyond 88.72: inf, as float32
        want = np.array([exact(float(v)) for v in x], np.float64).astype(np.float32)
    err = _ulps(y, want)
    worst = int(np.argmax(err))
    assert err[worst] <= 3, f"{op}({x[worst]!r}) = {y[worst]!r}, want {want[worst]!r}"
    assert np.isnan(y[np.isnan(x)]).all()


def test_softmax_rows_with_infinities_and_nan() -> None:
    x = np.random.default_rng(0).standard_normal((3, 5, 37)).astype(np.float32) * 20
    x[0, 0, :] = -np.inf
    x[0, 0, 3] = 2.0
    x[1, 2, 7] = np.nan
    x[2, 1, 0] = np.inf
    exe, feeds, _ = compile_single_op("Softmax", [x], {"axis": -1}, opset=13)
    got = run_c(exe, feeds)
    assert_matches_reference(got, exe.run_reference(feeds))
    (y,) = got.values()
    assert y[0, 0, 3] == 1.0 and (np.delete(y[0, 0], 3) == 0).all()
    assert np.isnan(y[1, 2]).all() and np.isnan(y[2, 1]).all()
    np.testing.assert_allclose(y[2, 0].sum(), 1.0, rtol=1e-6)
