"""`Runner.run(output_names, feeds)`, ONNX Runtime's calling convention, and the messages for a
wrong name: only the names a caller can give, the closest one first."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyipu
from pyipu import errors
from pyipu.compiler import Compiler
from pyipu.compiler.sharding import manual_sharding
from pyipu.runtime import Runner, RuntimeConfig

W = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)


def _model(batch: int | str = 2) -> onnx.ModelProto:
    """input [batch, 4] -> t = input @ W (a weight) -> relu(t), -t."""
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["input", "W"], ["t"], name="mm"),
            helper.make_node("Relu", ["t"], ["relu_out"], name="relu"),
            helper.make_node("Neg", ["t"], ["neg_out"], name="neg"),
        ],
        "g",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 4])],
        [
            helper.make_tensor_value_info("relu_out", TensorProto.FLOAT, [batch, 4]),
            helper.make_tensor_value_info("neg_out", TensorProto.FLOAT, [batch, 4]),
        ],
        [numpy_helper.from_array(W, "W")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def runner():
    with Runner(Compiler.compile(_model())) as r:
        yield r


def test_run_returns_every_output_in_model_order(runner):
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    relu, neg = runner.run(None, {"input": x})
    np.testing.assert_allclose(relu, np.maximum(x @ W, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(neg, -(x @ W), rtol=1e-5, atol=1e-6)


def test_run_named_outputs_and_batches(runner):
    x = np.random.default_rng(2).standard_normal((6, 4)).astype(np.float32)  # 3 batches of 2
    (neg,) = runner.run(["neg_out"], {"input": x})
    assert neg.shape == (6, 4)
    np.testing.assert_allclose(neg, -(x @ W), rtol=1e-5, atol=1e-6)
    neg2, relu2 = runner.run(["neg_out", "relu_out"], {"input": x[:2]})
    np.testing.assert_allclose(relu2, np.maximum(x[:2] @ W, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(neg2, neg[:2])


def test_run_with_dynamic_batching():
    config = RuntimeConfig()
    config.batching_dim = 0
    with Runner(Compiler.compile(_model()), config) as r:
        x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
        (relu,) = r.run(["relu_out"], {"input": x})
    assert relu.shape == (5, 4)
    np.testing.assert_allclose(relu, np.maximum(x @ W, 0), rtol=1e-5, atol=1e-6)


def test_run_errors(runner):
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(errors.InvalidArgumentError, match="unknown output 'nope' \\(the outputs"):
        runner.run(["nope"], {"input": x})
    with pytest.raises(errors.InvalidArgumentError, match="did you mean 'relu_out'"):
        runner.run(["relu_ou"], {"input": x})
    with pytest.raises(errors.InvalidArgumentError, match="dict"):
        runner.run(None, [x])
    with pytest.raises(errors.ShapeError):
        runner.run(None, {"input": np.zeros((3, 4), np.float32)})
    with pytest.raises(errors.DTypeError):
        runner.run(None, {"input": np.zeros((2, 4), np.float64)})


def test_wrong_input_name_lists_only_inputs(runner):
    outputs = {d.name: np.zeros(d.shape, np.float32) for d in runner.get_execute_outputs()}
    with pytest.raises(errors.InvalidArgumentError) as info:
        runner.execute({"imput": np.zeros((2, 4), np.float32)}, outputs)
    message = str(info.value)
    assert "did you mean 'input'?" in message and "['input']" in message
    assert "'W'" not in message  # a weight stored in the PopEF is not a request's input
    with pytest.raises(errors.InvalidArgumentError, match="weight stored in the PopEF"):
        runner.execute({"W": W}, outputs)


def test_wrong_input_shape_name_lists_inputs():
    with pytest.raises(errors.ShapeError) as info:
        pyipu.Converter(input_shape=["inptu=2,4"]).convert(_model("N"))
    message = str(info.value)
    assert "did you mean 'input'?" in message and "(the inputs: ['input'])" in message
    assert "'W'" not in message


def test_sharding_names_each_unknown_node_once():
    with pytest.raises(errors.Error) as info:
        manual_sharding(_model(), {"relux": 0, "neg": 1}, {"relux": 0, "neg": 1})
    message = str(info.value)
    assert message.count("'relux'") == 2  # once in the list, once with its suggestion
    assert "did you mean 'relu'?" in message
