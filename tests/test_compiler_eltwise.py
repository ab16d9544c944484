"""Element-wise ops (UNARY, BINARY, WHERE): every case compiled, run on the NumPy reference
and compared with onnxruntime, and run on the C kernels and compared with the reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from models import (
    BROADCASTS,
    F16,
    F32,
    I32,
    I64,
    arr,
    assert_matches_reference,
    check_op,
    compile_single_op,
    expected,
    run_c,
)
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler, UnsupportedDTypeError, UnsupportedOpError
from pyipu.enums import Op

UNARY_FLOAT = {
    "Sigmoid": (-8, 8),
    "Tanh": (-4, 4),
    "Exp": (-5, 5),
    "Log": (0.05, 20),
    "Sqrt": (0, 16),
    "Erf": (-3, 3),
    "Reciprocal": (0.25, 4),
    "Sin": (-7, 7),
    "Cos": (-7, 7),
    "Floor": (-5, 5),
    "Ceil": (-5, 5),
    "Round": (-5, 5),
    "Softplus": (-20, 20),
}


@pytest.mark.parametrize("op", list(UNARY_FLOAT))
@pytest.mark.parametrize("dt", [F32, F16])
def test_unary_float(op: str, dt: Any) -> None:
    lo, hi = UNARY_FLOAT[op]
    x = arr((3, 37), dt, 3, low=lo, high=hi)
    if op == "Reciprocal":
        x = np.where(np.arange(x.size).reshape(x.shape) % 2, -x, x).astype(dt)
    if op == "Round":
        x[0, :8] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.5]
    check_op(op, [x], opset=13)


@pytest.mark.parametrize("op", ["Neg", "Abs", "Sign"])
@pytest.mark.parametrize("dt", [F32, F16, I32, I64])
def test_unary_numeric(op: str, dt: Any) -> None:
    x = arr((4, 9), dt, 4, low=-9, high=9)
    x.flat[0] = 0
    check_op(op, [x], opset=13)


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("LeakyRelu", {}),
        ("LeakyRelu", {"alpha": 0.3}),
        ("Elu", {}),
        ("Elu", {"alpha": 0.5}),
        ("HardSigmoid", {}),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
        ("Not", {}),
    ],
    ids=str,
)
@pytest.mark.parametrize("dt", [F32, F16])
def test_unary_with_attributes(op: str, attrs: dict, dt: Any) -> None:
    check_op(op, [arr((5, 6), np.bool_ if op == "Not" else dt, 5, low=-4, high=4)], attrs)


CLIP_CASES = [  # (opset, attrs, const inputs {1: min, 2: max} as floats or None)
    (6, {"min": -1.0, "max": 1.5}, {}),
    (6, {"max": 0.5}, {}),
    (6, {}, {}),
    (11, {}, {1: -1.0, 2: 2.0}),
    (11, {}, {1: -0.5}),
    (13, {}, {1: None, 2: 1.0}),
    (13, {}, {}),
]


@pytest.mark.parametrize(
    "opset,attrs,bounds,dt",
    [(*c, dt) for c in CLIP_CASES for dt in (F32, F16, I32, I64) if c[0] >= 12 or dt in (F32, F16)],
    ids=str,
)
def test_clip(opset: int, attrs: dict, bounds: dict, dt: Any) -> None:  # ints from opset 12
    consts = {i: None if v is None else np.array(v, dtype=dt) for i, v in bounds.items()}
    check_op("Clip", [arr((4, 7), dt, 6, low=-4, high=4)], attrs, opset=opset, const_inputs=consts)


def test_unary_dtype_and_opset_checks() -> None:
    with pytest.raises(UnsupportedDTypeError, match="int32"):
        compile_single_op("Clip", [arr((3,), I32)], opset=11)
    with pytest.raises(UnsupportedDTypeError, match="int32"):
        compile_single_op("Exp", [arr((3,), I32)], opset=13)
    with pytest.raises(UnsupportedOpError):
        compile_single_op("Erf", [arr((3,), F32)], opset=8)


@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_pow(dt: Any, shapes: tuple) -> None:
    check_op("Pow", [arr(shapes[0], dt, 1, low=0.1, high=3), arr(shapes[1], dt, 2, low=-2, high=2)])


@pytest.mark.parametrize("edt", [F32, I32, I64])
def test_pow_exponent_of_another_type(edt: Any) -> None:
    ir = check_op("Pow", [arr((2, 5), F16, 1, low=0.5, high=2), arr((5,), edt, 2, low=-2, high=3)])
    assert [i.op for i in ir.program(1).instrs] == [Op.CAST, Op.BINARY]


@pytest.mark.parametrize("op", ["Min", "Max"])
@pytest.mark.parametrize("dt", [F32, F16, I32, I64])
@pytest.mark.parametrize("shapes", [((3, 4),), *BROADCASTS[:3], ((2, 1, 4), (3, 1), (4,))], ids=str)
def test_min_max(op: str, dt: Any, shapes: tuple) -> None:
    ir = check_op(op, [arr(s, dt, k) for k, s in enumerate(shapes)], opset=13)
    n_binary = sum(i.op == Op.BINARY for i in ir.program(1).instrs)
    assert n_binary == len(shapes) - 1


@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize("shapes", [((3, 4),), *BROADCASTS[:3], ((2, 1, 4), (3, 1), (4,))], ids=str)
def test_sum(dt: Any, shapes: tuple) -> None:
    ir = check_op("Sum", [arr(s, dt, k) for k, s in enumerate(shapes)], opset=13)
    assert sum(i.op == Op.ADD for i in ir.program(1).instrs) == len(shapes) - 1


def test_sum_rejects_ints() -> None:
    with pytest.raises(UnsupportedDTypeError):
        compile_single_op("Sum", [arr((2,), I32), arr((2,), I32)], opset=13)


CMP_OPS = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


@pytest.mark.parametrize("op", CMP_OPS)
@pytest.mark.parametrize("dt", [F32, F16, I32, I64])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_compare(op: str, dt: Any, shapes: tuple) -> None:
    a = arr(shapes[0], dt, 1, low=-2, high=2)
    b = arr(shapes[1], dt, 2, low=-2, high=2)
    if np.issubdtype(dt, np.floating):  # some equal pairs
        a, b = np.asarray(np.round(a)), np.asarray(np.round(b))
    check_op(op, [a, b], opset=13)


@pytest.mark.parametrize("op", ["And", "Or", "Xor", "Equal"])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_logical(op: str, shapes: tuple) -> None:
    check_op(op, [arr(shapes[0], np.bool_, 1), arr(shapes[1], np.bool_, 2)], opset=13)


WHERE_SHAPES = [
    ((3, 4), (3, 4), (3, 4)),
    ((3, 1), (4,), (3, 4)),
    ((2, 1, 4), (3, 1), ()),
    ((), (2, 3), (1, 3)),
    ((5,), (), ()),
]


@pytest.mark.parametrize("dt", [F32, F16, I32, I64, np.bool_, np.uint8])
@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=str)
def test_where(dt: Any, shapes: tuple) -> None:
    c, x, y = shapes
    check_op("Where", [arr(c, np.bool_, 1), arr(x, dt, 2), arr(y, dt, 3)], opset=16)


def test_elementwise_chain_in_one_graph() -> None:
    """Sigmoid → Greater → Where with a large tensor: several work items per instruction."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 40000])
    g = helper.make_graph(
        [
            helper.make_node("Sigmoid", ["x"], ["s"]),
            helper.make_node("Greater", ["s", "half"], ["m"]),
            helper.make_node("Where", ["m", "s", "x"], ["y"]),
        ],
        "chain",
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 40000])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    exe = Compiler.compile(m)
    feeds = {"x": arr((3, 40000), F32, 7, low=-4, high=4)}
    ref = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), ref)
    np.testing.assert_allclose(ref["y"], expected(m, feeds)["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Add", "Mul", "Sub"])
def test_legacy_axis_broadcast(op: str) -> None:
    """Opset < 7: B's dims line up with A's from `axis` on (ORT has no opset-6 kernels: the
    expected values are numpy's with B reshaped to [3, 4, 1])."""
    a, b = arr((2, 3, 4, 5), F32, 1), arr((3, 4), F32, 2)
    exe, feeds, _ = compile_single_op(op, [a, b], {"broadcast": 1, "axis": 1}, opset=6)
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    fn = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract}[op]
    np.testing.assert_allclose(next(iter(got.values())), fn(a, b.reshape(3, 4, 1)), rtol=1e-6)
