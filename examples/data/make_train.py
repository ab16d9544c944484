"""Regenerate train.popef, the training executable examples/train.c runs under `meson test`.

A linear regression y = x W (x float32[8, 4], W float32[4, 2] starting at zero) with the loss
mean((y - t)^2), trained by SGD (learning rate 0.1, momentum 0.9): PopART's TrainingSession
compiles the forward pass, the backward pass and the update into one PopEF whose variables (W,
its velocity, the step count) stay on the device. Run: python examples/data/make_train.py
(tests/test_examples.py checks that the committed file equals what this produces).
"""

import tempfile
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from pyipu import popart


def regression_model():
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["y"]),
            helper.make_node("Sub", ["y", "t"], ["d"]),
            helper.make_node("Mul", ["d", "d"], ["sq"]),
            helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
        ],
        "regression",
        [
            helper.make_tensor_value_info("x", f, (8, 4)),
            helper.make_tensor_value_info("t", f, (8, 2)),
        ],
        [helper.make_tensor_value_info("loss", f, ())],
        [numpy_helper.from_array(np.zeros((4, 2), np.float32), "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def train_popef_bytes() -> bytes:
    session = popart.TrainingSession(
        regression_model().SerializeToString(),
        popart.DataFlow(1, {"loss": popart.AnchorReturnType("ALL")}),
        "loss",
        popart.SGD({"defaultLearningRate": (0.1, True), "defaultMomentum": (0.9, True)}),
        popart.DeviceManager().createCpuDevice(),
    )
    with tempfile.TemporaryDirectory() as d:
        session.compileAndExport(Path(d) / "train.popef")
        return (Path(d) / "train.popef").read_bytes()


if __name__ == "__main__":
    Path(__file__).with_name("train.popef").write_bytes(train_popef_bytes())
