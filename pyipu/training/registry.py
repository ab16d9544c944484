"""The gradient-rule registry and what rules share.

A rule is `rule(g, node, gy, need) -> [gradient or None per input]`: `gy[k]` is the gradient
of output k (None when the loss does not depend on it), `need[i]` says whether input i wants
one. Shapes are static (GradGraph.shape). Rules live in `rules_math.py` (element-wise, matrix
products, Gather), `rules_shape.py` (reshaping, slicing, padding, resizing, reductions,
softmax), `rules_index.py` (GatherElements, the scatters, TopK) and `rules_nn.py`
(convolution, pooling, normalisation, dropout, losses). A module of rules is registered by
being imported in `pyipu/training/__init__.py` and in `gradients`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

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


def text(node: onnx.NodeProto, name: str, default: str) -> str:
    """A string attribute."""
    v = attr(node, name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def zeros(g: GradGraph, shape: tuple[int, ...], like: str) -> str:
    """Zeros of `shape` in `like`'s element type."""
    value = np.zeros(1, helper.tensor_dtype_to_np_dtype(g.dtype(like)))
    return g.op("ConstantOfShape", [g.ints(shape)], value=numpy_helper.from_array(value))


def spread_along(g: GradGraph, d: str, rank: int, axis: int, m: np.ndarray, like: str) -> str:
    """The gradient of y = M x taken along `axis` (M [out, in], known at compile time): d(y)
    with M^T applied along that axis. Resize, strided Slice and Pad's reflect and edge modes
    are such maps, one per axis."""
    if axis == rank - 1:  # [..., out] @ M -> [..., in]
        return g.op("MatMul", [d, g.const(m, like)])
    if axis == rank - 2:  # M^T @ [..., out, w] -> [..., in, w]
        return g.op("MatMul", [g.const(np.ascontiguousarray(m.T), like), d])
    perm = [i for i in range(rank) if i != axis] + [axis]
    moved = g.op("MatMul", [g.op("Transpose", [d], perm=perm), g.const(m, like)])
    return g.op("Transpose", [moved], perm=[int(i) for i in np.argsort(perm)])
