"""The gradient-rule registry and what rules share.

A rule is `rule(g, node, gy, need) -> [gradient or None per input]`: `gy[k]` is the gradient
of output k (None when the loss does not depend on it), `need[i]` says whether input i wants
one. Shapes are static (GradGraph.shape). Rules live in `rules_math.py` (element-wise, matrix
products, Gather), `rules_shape.py` (reshaping, slicing, reductions, softmax) and
`rules_nn.py` (convolution, pooling, normalisation, dropout, losses).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx
from onnx import helper

from pyipu.training.autodiff import GradGraph

Grads = list[str | None]
Rule = Callable[[GradGraph, onnx.NodeProto, Grads, list[bool]], Grads]
RULES: dict[str, Rule] = {}


def rule(*ops: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn

    return register


def attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def dy(gy: Grads) -> str:
    """The gradient of a node's first output (nodes reach their rule only with one)."""
    d = gy[0]
    assert d is not None
    return d


def out_shape(g: GradGraph, node: onnx.NodeProto) -> tuple[int, ...]:
    return g.shape(node.output[0])
