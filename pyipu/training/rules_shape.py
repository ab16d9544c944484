"""Gradient rules of reshaping, concatenation, reductions and softmax."""

from __future__ import annotations

import numpy as np
import onnx

from pyipu.compiler.errors import UnsupportedOpError
from pyipu.training.autodiff import GradGraph
from pyipu.training.registry import Grads, attr, dy, out_shape, rule


# --- shapes ------------------------------------------------------------------------------
@rule("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand")
def _reshape(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    x = n.input[0]
    if n.op_type == "Expand":
        grad = g.unbroadcast(d, out_shape(g, n), x)
    else:
        grad = g.reshape(d, g.shape(x))
    return [grad] + [None] * (len(n.input) - 1)


@rule("Transpose")
def _transpose(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    rank = len(g.shape(n.input[0]))
    perm = attr(n, "perm", list(reversed(range(rank))))
    return [g.op("Transpose", [d], perm=[int(i) for i in np.argsort(perm)])]


@rule("Concat")
def _concat(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    rank = len(out_shape(g, n))
    axis = int(attr(n, "axis")) % rank
    sizes = [g.shape(x)[axis] for x in n.input]
    if g.opset >= 13:
        parts = g.op("Split", [d, g.ints(sizes)], n_out=len(sizes), axis=axis)
    else:
        parts = g.op("Split", [d], n_out=len(sizes), axis=axis, split=sizes)
    parts = [parts] if isinstance(parts, str) else parts
    return [p if need[i] else None for i, p in enumerate(parts)]


def _reduce_axes(g: GradGraph, n: onnx.NodeProto) -> list[int]:
    rank = len(g.shape(n.input[0]))
    axes = attr(n, "axes")
    if axes is None and len(n.input) > 1 and n.input[1]:
        value = g.constant(n.input[1])
        if value is None:
            raise UnsupportedOpError(f"{n.op_type} {n.name!r}: axes must be constant to train")
        axes = value.tolist()
    if not axes:
        return [] if int(attr(n, "noop_with_empty_axes", 0)) else list(range(rank))
    return sorted(int(a) % rank for a in axes)


@rule("ReduceSum", "ReduceMean")
def _reduce(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    x = n.input[0]
    shape = g.shape(x)
    axes = _reduce_axes(g, n)
    kept = tuple(1 if i in axes else s for i, s in enumerate(shape))
    grad = g.op("Expand", [g.reshape(d, kept), g.ints(shape)])
    if n.op_type == "ReduceMean":
        count = int(np.prod([shape[a] for a in axes], dtype=np.int64)) or 1
        grad = g.op("Div", [grad, g.const(float(count), x)])
    return [grad] + [None] * (len(n.input) - 1)


def _softmax_axes(g: GradGraph, n: onnx.NodeProto) -> list[int]:
    rank = len(g.shape(n.input[0]))
    default = -1 if g.opset >= 13 else 1
    axis = int(attr(n, "axis", default)) % rank
    # before opset 13 the input is seen as 2-D: [dims before axis, dims from axis on]
    return [axis] if g.opset >= 13 else list(range(axis, rank))


@rule("Softmax")
def _softmax(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d, y = dy(gy), n.output[0]
    s = g.reduce("ReduceSum", g.op("Mul", [d, y]), _softmax_axes(g, n), keepdims=1)
    return [g.op("Mul", [y, g.op("Sub", [d, s])])]


@rule("LogSoftmax")
def _log_softmax(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d, y = dy(gy), n.output[0]
    s = g.reduce("ReduceSum", d, _softmax_axes(g, n), keepdims=1)
    return [g.op("Sub", [d, g.op("Mul", [g.op("Exp", [y]), s])])]
