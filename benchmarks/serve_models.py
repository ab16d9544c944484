"""The models of benchmarks/serve_load.py: each an ONNX builder by rows along dim 0 (an int for
pyipu's compiled batch, a name for ONNX Runtime's dynamic dim) and one request's inputs.

- mlp: MatMul 256x1024, Relu, MatMul 1024x256; one-row requests, batches of 8 rows.
- tiny: one Relu on [rows, 64]; one-row requests, batches of 8 rows.
- resnet50: onnx's light ResNet-50 with random weights (tests/light_models.py) and its logits
  as a second output, one 3x224x224 image a request, batches of 4 images.
- seed: the overlap-I/O seed model (tests/models.py), a [256, 256] request; its dim 0 is no
  batch dim (the model broadcasts the input to [4, 4, 256, 256]), so it is served without
  dynamic batching.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

WIDTH, HIDDEN = 256, 1024


@dataclass
class ServeModel:
    name: str
    build: Callable[[int | str], onnx.ModelProto]  # rows along dim 0 -> model
    request: Callable[[], dict[str, np.ndarray]]  # one request's inputs
    batch: int | None  # rows a batch of pyipu's dynamic batching holds; None: no batch dim


def mlp(rows: int | str) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((WIDTH, HIDDEN)) / 16).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, WIDTH)) / 32).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W1"], ["H"]),
            helper.make_node("Relu", ["H"], ["R"]),
            helper.make_node("MatMul", ["R", "W2"], ["Y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (rows, WIDTH))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (rows, WIDTH))],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def tiny(rows: int | str) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["Y"])],
        "tiny",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (rows, 64))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (rows, 64))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _set_dim0(vi: onnx.ValueInfoProto, rows: int | str) -> None:
    dim = vi.type.tensor_type.shape.dim[0]
    if isinstance(rows, str):
        dim.dim_param = rows
    else:
        dim.dim_value = rows


def resnet50(rows: int | str) -> onnx.ModelProto:
    """The light ResNet-50 with `rows` images: its data input, output and the Reshape before
    the classifier (shipped as [1, 2048]) take any batch."""
    from light_models import load, with_logits, with_random_weights

    # the logits too: a deep random network's probabilities saturate, the logits differ
    model = with_logits(with_random_weights(load("resnet50")))
    g = model.graph
    for i, init in enumerate(g.initializer):
        if init.name == "OC2_DUMMY_1":  # the Reshape's target shape
            g.initializer[i].CopyFrom(numpy_helper.from_array(np.array([-1, 2048]), init.name))
    inits = {i.name for i in g.initializer}
    (data,) = [vi for vi in g.input if vi.name not in inits]
    _set_dim0(data, rows)
    _set_dim0(g.output[0], rows)
    return model


def _resnet50_request() -> dict[str, np.ndarray]:
    from light_models import input_of, load

    return input_of(load("resnet50"))


def seed(rows: int | str) -> onnx.ModelProto:
    from models import seed_overlap_io_model

    return seed_overlap_io_model()


def _seed_request() -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)}


def _rows(width: int) -> Callable[[], dict[str, np.ndarray]]:
    return lambda: {"X": np.random.default_rng(1).standard_normal((1, width)).astype(np.float32)}


MODELS = {
    m.name: m
    for m in (
        ServeModel("seed", seed, _seed_request, None),
        ServeModel("resnet50", resnet50, _resnet50_request, 4),
        ServeModel("tiny", tiny, _rows(64), 8),
        ServeModel("mlp", mlp, _rows(WIDTH), 8),
    )
}
