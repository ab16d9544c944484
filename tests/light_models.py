"""The nine `light` CNNs shipped with onnx (onnx/backend/test/data/light), with random weights.

The shipped models fill every weight with ConstantOfShape(0.02), which makes their reference
outputs degenerate (all classes nearly equal). `with_random_weights` replaces each fill with a
random initializer scaled for its consumer, so that activations stay O(1) through 20-120 layers
and a wrong kernel shows up in the output.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

LIGHT_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
NAMES = [
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
]
LARGE = ["bvlc_alexnet", "vgg19", "zfnet512"]  # 60-140 M weights: 5-25 s per test (marked slow)


def load(name: str) -> onnx.ModelProto:
    return onnx.load(str(LIGHT_DIR / f"light_{name}.onnx"))


def _fill(op: str, slot: int, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if op in ("Conv", "Gemm", "MatMul") and slot == 1 and len(shape) >= 2:
        fan_in = math.prod(shape[1:]) if op == "Conv" else shape[0]
        if op == "Gemm":  # B is [K, N] or, with transB, [N, K]: the larger dim is K here
            fan_in = max(shape)
        return rng.normal(0.0, math.sqrt(2.0 / fan_in), shape)
    if op == "BatchNormalization":
        if slot in (1, 4):  # scale, variance: positive, near 1
            return rng.uniform(0.5, 1.5, shape)
        return rng.normal(0.0, 0.1, shape)  # bias, mean
    return rng.normal(0.0, 0.05, shape)  # biases and anything else


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy whose ConstantOfShape weight fills are random initializers (same names)."""
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    users: dict[str, tuple[str, int]] = {}
    for node in g.node:
        for slot, name in enumerate(node.input):
            users.setdefault(name, (node.op_type, slot))
    keep, replaced = [], set()
    for node in g.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in consts:
            keep.append(node)
            continue
        shape = tuple(int(d) for d in consts[node.input[0]])
        value = _fill(*users.get(node.output[0], ("", 0)), shape, rng).astype(np.float32)
        g.initializer.append(numpy_helper.from_array(value, node.output[0]))
        replaced.add(node.output[0])
    del g.node[:]
    g.node.extend(keep)
    used = {i for node in g.node for i in node.input}
    live = [i for i in g.initializer if i.name in used or i.name in replaced]
    del g.initializer[:]
    g.initializer.extend(live)
    names = {i.name for i in live}
    inputs = [vi for vi in g.input if vi.name in names or vi.name not in consts]
    del g.input[:]
    g.input.extend(inputs)
    return out


def with_logits(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy that also outputs the input of the final Softmax: the probabilities of a deep
    random network saturate, the logits show every difference."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    (last,) = [n for n in out.graph.node if n.output[0] == out.graph.output[0].name]
    if last.op_type == "Softmax":
        logits = onnx.helper.make_tensor_value_info(last.input[0], onnx.TensorProto.FLOAT, None)
        out.graph.output.append(logits)
    return out


def input_of(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """A random image batch for the model's one data input."""
    inits = {i.name for i in model.graph.initializer}
    (vi,) = [i for i in model.graph.input if i.name not in inits]
    shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
    x = np.random.default_rng(seed).normal(0.0, 1.0, shape).astype(np.float32)
    return {vi.name: x}
