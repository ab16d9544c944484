"""Gradient rules of the ops that read or write elements by index: GatherElements, TopK (a
GatherElements at the indices it finds), ScatterElements and ScatterND."""

from __future__ import annotations

import numpy as np
import onnx

from pyipu.compiler.errors import UnsupportedAttributeError, UnsupportedOpError
from pyipu.training.autodiff import GradGraph
from pyipu.training.registry import Grads, attr, dy, rule, text, zeros


def _gather_back(g: GradGraph, d: str, idx: str, axis: int, x: str) -> str:
    """d(x) of y = GatherElements(x, idx, axis) given d = d(y): each element of x gets the sum
    of d over the positions that read it (a one-hot of idx along `axis`, summed)."""
    shape, ishape = g.shape(x), g.shape(idx)
    rank = len(shape)
    a = axis % rank
    # hot[..., j, k, ...] = (idx[..., k, ...] == j), the new axis j at a (negatives wrap)
    hot = g.op("OneHot", [idx, g.const(np.float32(shape[a])), g.const(np.array([0, 1]), x)], axis=a)
    spread = g.op("Mul", [hot, g.unsqueeze(d, [a])])
    grad = g.reduce("ReduceSum", spread, [a + 1], keepdims=0)
    # idx may be smaller than x along the other axes: the rest of x was read by none
    have = [*ishape[:a], shape[a], *ishape[a + 1 :]]
    if list(have) != list(shape):
        short = [s - h for s, h in zip(shape, have, strict=True)]
        pads = [0] * rank + short
        grad = (
            g.op("Pad", [grad, g.ints(pads)]) if g.opset >= 11 else g.op("Pad", [grad], pads=pads)
        )
    return grad


@rule("GatherElements")
def _gather_elements(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    axis = int(attr(n, "axis", 0))
    return [_gather_back(g, dy(gy), n.input[1], axis, n.input[0]), None]


@rule("TopK")
def _topk(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    axis = int(attr(n, "axis", -1))
    if len(n.output) < 2 or not n.output[1]:
        raise UnsupportedOpError(f"TopK {n.name!r}: the gradient needs the indices output")
    return [_gather_back(g, dy(gy), n.output[1], axis, n.input[0])] + [None] * (len(n.input) - 1)


def _reduction(n: onnx.NodeProto) -> str:
    reduction = text(n, "reduction", "none")
    if reduction not in ("none", "add"):
        raise UnsupportedAttributeError(
            f"{n.op_type} {n.name!r}: gradient only for reduction 'none' and 'add'"
        )
    return reduction


@rule("ScatterElements")
def _scatter_elements(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    data, idx, upd = n.input
    axis = int(attr(n, "axis", 0))
    reduction = _reduction(n)
    out: Grads = [None, None, None]
    if need[0]:  # the elements overwritten take no gradient; added to, they keep it
        out[0] = d
        if reduction == "none":
            blank = zeros(g, g.shape(upd), upd)
            out[0] = g.op("ScatterElements", [d, idx, blank], axis=axis)
    if need[2]:
        out[2] = g.op("GatherElements", [d, idx], axis=axis)
    return out


@rule("ScatterND")
def _scatter_nd(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    data, idx, upd = n.input
    reduction = _reduction(n)
    out: Grads = [None, None, None]
    if need[0]:
        out[0] = d
        if reduction == "none":
            out[0] = g.op("ScatterND", [d, idx, zeros(g, g.shape(upd), upd)])
    if need[2]:
        out[2] = g.op("GatherND", [d, idx])
    return out
