"""pyipu.backend choices beyond the ONNX suite: float64 computed in float32 with a warning,
empty inputs compiled in as constants, function-body expansion, compile-time errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import pyipu.backend
from pyipu.backend import Float64Warning
from pyipu.compiler import Compiler, UnsupportedDTypeError, UnsupportedOpError, float64_to_float32


def _model(nodes, inputs, outputs, opset: int = 18, inits=()):  # noqa: ANN001, ANN202
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _f64_model():  # noqa: ANN202
    c = helper.make_tensor("c", TensorProto.DOUBLE, [3], [0.5, 1.5, -2.0])
    return _model(
        [
            helper.make_node("Mul", ["x", "c"], ["m"]),
            helper.make_node("Cast", ["m"], ["y"], to=TensorProto.DOUBLE),
        ],
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 3])],
        inits=[c],
    )


def test_float64_model_runs_in_float32_with_a_warning() -> None:
    x = np.array([[1.0, 2.0, 3.0], [1e-9, 1 / 3, 7.0]])
    with pytest.warns(Float64Warning, match="float32"):
        rep = pyipu.backend.prepare(_f64_model())
    (y,) = rep.run([x])
    assert y.dtype == np.float64
    want = (x.astype(np.float32) * np.float32([0.5, 1.5, -2.0])).astype(np.float64)
    np.testing.assert_array_equal(y, want)  # exactly the float32 computation, widened
    assert not np.array_equal(y, x * [0.5, 1.5, -2.0])  # 1/3 * 1.5 differs in float64


def test_compiler_rejects_float64_and_names_the_rewrite() -> None:
    with pytest.raises(UnsupportedDTypeError, match="float64_to_float32"):
        Compiler.compile(_f64_model())
    converted = float64_to_float32(_f64_model())
    assert Compiler.compile(converted).input_names == ["x"]  # compiles once converted


def test_empty_axes_input_is_compiled_in() -> None:
    model = _model(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("axes", TensorProto.INT64, [0]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        opset=13,
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = pyipu.backend.prepare(model).run([x, np.zeros((0,), np.int64)])
    np.testing.assert_allclose(y, 15.0)


def test_op_with_a_function_body_is_expanded() -> None:
    """Softsign has no lowering of its own: it runs as its ONNX function body."""
    model = _model(
        [helper.make_node("Softsign", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])],
        opset=22,
    )
    x = np.linspace(-3, 3, 5, dtype=np.float32)
    (y,) = pyipu.backend.prepare(model).run([x])
    np.testing.assert_allclose(y, x / (1 + np.abs(x)), rtol=1e-6)


def test_unsupported_op_fails_at_prepare_naming_node_op_and_opset() -> None:
    model = _model(
        [helper.make_node("Unique", ["x"], ["y"], name="nz")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        opset=13,
    )
    with pytest.raises(UnsupportedOpError, match=r"'nz'.*Unique.*opset 13"):
        pyipu.backend.prepare(model)
