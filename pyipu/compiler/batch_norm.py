"""BatchNormalization as standard ONNX nodes, lowered in its place: training mode (batch
statistics, running mean and variance updated with `momentum`) and inference with parameters
that are run-time values (trained weights, pyipu.compiler.variables). Inference with constant
parameters folds into one multiply-add instead (ops_nn.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from pyipu.compiler.lower import Node
from pyipu.enums import DType


def expand_batch_norm(n: Node, training: bool) -> None:
    """y = (x - mean) / sqrt(var + epsilon) * scale + B over every axis but 1; in training mode
    mean and var are the batch's (population variance), and outputs 1 and 2 are
    input_mean * momentum + mean * (1 - momentum) (the same for var)."""
    from pyipu.compiler.ops import REGISTRY  # (ops imports this module's users)

    rank = len(n.shape(0))
    c = n.shape(0)[1]
    if rank < 2:
        n.shape_error(f"input {list(n.shape(0))} must have rank >= 2")
    if len(n.outputs) > 3 and any(n.outputs[3:]):
        n.fail("the saved_mean / saved_var outputs are not supported")
    low = n.low
    prefix = f"{n.outputs[0]}:bn:"

    def const(tag: str, value: np.ndarray) -> str:
        low.constants[prefix + tag] = value
        return prefix + tag

    nodes: list[onnx.NodeProto] = []

    def op(op_type: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        name = out or f"{prefix}{len(nodes)}"
        nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    dt = np.float16 if n.dtype(0) == DType.FLOAT16 else np.float32
    axes = [0, *range(2, rank)]
    bshape = const("shape", np.array([1, c, *([1] * (rank - 2))], np.int64))
    x, scale, bias, mean_in, var_in = n.inputs[:5]
    if training:
        mean = op("ReduceMean", [x], axes=axes, keepdims=1)
        d = op("Sub", [x, mean])
        var = op("ReduceMean", [op("Mul", [d, d])], axes=axes, keepdims=1)
    else:
        mean = op("Reshape", [mean_in, bshape])
        var = op("Reshape", [var_in, bshape])
        d = op("Sub", [x, mean])
    eps = const("eps", np.array(n.attr("epsilon", 1e-5), dt))
    inv = op("Reciprocal", [op("Sqrt", [op("Add", [var, eps])])])
    gamma = op("Reshape", [scale, bshape])
    beta = op("Reshape", [bias, bshape])
    op("Add", [op("Mul", [op("Mul", [d, inv]), gamma]), beta], n.outputs[0])
    if training:
        m = float(n.attr("momentum", 0.9))
        keep, take = const("momentum", np.array(m, dt)), const("1-momentum", np.array(1 - m, dt))
        flat = const("flat", np.array([c], np.int64))
        for k, (stat, running) in enumerate(((mean, mean_in), (var, var_in)), start=1):
            if len(n.outputs) > k and n.outputs[k]:
                new = op("Mul", [op("Reshape", [stat, flat]), take])
                op("Add", [op("Mul", [running, keep]), new], n.outputs[k])
    for node in nodes:
        low.lower_node(node, REGISTRY, 13)
