"""SiLU written as x · Sigmoid(x) becomes one UNARY SWISH (pyipu/compiler/rewrites/swish.py),
matching ONNX Runtime on the two-node form; broadcasting gates and shared sigmoids are left."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from models import assert_matches_reference, run_c
from onnx import TensorProto, helper

from pyipu.compiler import Compiler
from pyipu.enums import Op, UnaryFn

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def _model(
    nodes: list[onnx.NodeProto],
    outputs: dict[str, tuple[int, ...]],
    dtype: int = F32,
    shape: tuple[int, ...] = (2, 8, 5, 7),
) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "silu",
        [helper.make_tensor_value_info("x", dtype, shape)],
        [helper.make_tensor_value_info(k, dtype, s) for k, s in outputs.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ops(exe) -> list[tuple[Op, int]]:  # type: ignore[no-untyped-def]
    p = exe.program
    return [
        (Op(i.op), i.attrs[0] if i.op == Op.UNARY else -1)
        for i in p.program(p.main_programs[0]).instrs
    ]


def _x(dtype: int, shape: tuple[int, ...] = (2, 8, 5, 7)) -> np.ndarray:
    x = np.linspace(-30, 30, int(np.prod(shape))).reshape(shape)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    return x.astype(helper.tensor_dtype_to_np_dtype(dtype))


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("order", [("x", "s"), ("s", "x")])
def test_silu_becomes_one_swish_and_matches_ort(dtype: int, order: tuple[str, str]) -> None:
    n = helper.make_node
    model = _model(
        [n("Sigmoid", ["x"], ["s"]), n("Mul", list(order), ["y"])], {"y": (2, 8, 5, 7)}, dtype
    )
    exe = Compiler.compile(model)
    assert _ops(exe) == [(Op.UNARY, int(UnaryFn.SWISH))]
    x = _x(dtype)
    got = run_c(exe, {"x": x})
    assert_matches_reference(got, exe.run_reference({"x": x}))
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    # ORT's sigmoid flushes tiny values (x < -16 gives -0.0 where x / (1 + e^-x) ~ -1e-6):
    # compare against the output's scale
    scale = float(np.max(np.abs(want[np.isfinite(want)])))
    tol = 1e-6 if dtype == F32 else 1e-3
    np.testing.assert_allclose(got["y"], want, rtol=tol, atol=tol * scale)


def test_a_broadcast_gate_and_a_shared_sigmoid_are_left_alone() -> None:
    n = helper.make_node
    gate = _model(  # squeeze-excite: the sigmoid of a pooled tensor scales every position
        [
            n("ReduceMean", ["x"], ["p"], axes=[2, 3], keepdims=1),
            n("Sigmoid", ["p"], ["s"]),
            n("Mul", ["x", "s"], ["y"]),
        ],
        {"y": (2, 8, 5, 7)},
    )
    assert (Op.UNARY, int(UnaryFn.SIGMOID)) in _ops(Compiler.compile(gate))
    shared = _model(
        [n("Sigmoid", ["x"], ["s"]), n("Mul", ["x", "s"], ["y"])],
        {"y": (2, 8, 5, 7), "s": (2, 8, 5, 7)},
    )
    exe = Compiler.compile(shared)
    assert [op for op, _ in _ops(exe)] == [Op.UNARY, Op.MUL]
    other = _model(  # y = z · Sigmoid(x) with z ≠ x
        [n("Neg", ["x"], ["z"]), n("Sigmoid", ["x"], ["s"]), n("Mul", ["z", "s"], ["y"])],
        {"y": (2, 8, 5, 7)},
    )
    assert (Op.UNARY, int(UnaryFn.SWISH)) not in _ops(Compiler.compile(other))
