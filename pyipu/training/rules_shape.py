"""Gradient rules of reshaping, slicing, padding, splitting, tiling, concatenation, reductions
and softmax."""

from __future__ import annotations

import numpy as np
import onnx

from pyipu.compiler.errors import UnsupportedAttributeError, UnsupportedOpError
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


def _constant_input(g: GradGraph, n: onnx.NodeProto, i: int, what: str) -> list[int] | None:
    """Input i as a list of ints (None when absent); it must be known at compile time."""
    if len(n.input) <= i or not n.input[i]:
        return None
    value = g.constant(n.input[i])
    if value is None:
        raise UnsupportedOpError(f"{n.op_type} {n.name!r}: {what} must be constant to train")
    return [int(v) for v in np.asarray(value).reshape(-1)]


@rule("Slice")
def _slice(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    shape = g.shape(n.input[0])
    rank = len(shape)
    if g.opset >= 10:
        starts = _constant_input(g, n, 1, "starts") or []
        ends = _constant_input(g, n, 2, "ends") or []
        axes = _constant_input(g, n, 3, "axes") or list(range(len(starts)))
        steps = _constant_input(g, n, 4, "steps") or [1] * len(starts)
    else:
        starts, ends = list(attr(n, "starts")), list(attr(n, "ends"))
        axes, steps = list(attr(n, "axes", range(len(starts)))), [1] * len(starts)
    if any(s != 1 for s in steps):
        raise UnsupportedAttributeError(f"Slice {n.name!r}: gradient only for steps of 1")
    # d(x) is d(y) padded back to x's shape with zeros where the slice left x out
    before, after = [0] * rank, [0] * rank
    for a, s, e in zip(axes, starts, ends, strict=True):
        a %= rank
        dim = shape[a]
        lo = min(max(s + dim if s < 0 else s, 0), dim)
        hi = min(max(e + dim if e < 0 else e, 0), dim)
        before[a], after[a] = lo, dim - max(hi, lo)
    return [_pad_zeros(g, d, before, after)] + [None] * (len(n.input) - 1)


def _pad_zeros(g: GradGraph, x: str, before: list[int], after: list[int]) -> str:
    if g.opset >= 11:
        return g.op("Pad", [x, g.ints(before + after)])
    return g.op("Pad", [x], pads=before + after)


@rule("Pad")
def _pad(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    mode = attr(n, "mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "constant":
        raise UnsupportedAttributeError(f"Pad {n.name!r}: gradient only for mode 'constant'")
    shape = g.shape(n.input[0])
    rank = len(shape)
    pads = _constant_input(g, n, 1, "pads") if g.opset >= 11 else list(attr(n, "pads"))
    assert pads is not None
    axes = _constant_input(g, n, 3, "axes") if g.opset >= 18 else None
    axes = [a % rank for a in axes] if axes else list(range(rank))
    before, after = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[k + len(axes)]
    if any(p < 0 for p in before + after):
        raise UnsupportedAttributeError(f"Pad {n.name!r}: gradient only for pads >= 0")
    # d(x): the part of d(y) where x was copied
    starts = before
    ends = [before[i] + shape[i] for i in range(rank)]
    grad = g.op("Slice", [d, g.ints(starts), g.ints(ends), g.ints(range(rank))])
    return [grad] + [None] * (len(n.input) - 1)


@rule("Split")
def _split(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    rank = len(g.shape(n.input[0]))
    axis = int(attr(n, "axis", 0)) % rank
    parts = []
    for out, d in zip(n.output, gy, strict=True):
        if d is None:  # an output the loss does not read: zeros of its shape
            d = g.op("Cast", [g.op("ConstantOfShape", [g.ints(g.shape(out))])], to=g.dtype(out))
        parts.append(d)
    return [g.op("Concat", parts, axis=axis)] + [None] * (len(n.input) - 1)


@rule("Tile")
def _tile(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    shape = g.shape(n.input[0])
    repeats = _constant_input(g, n, 1, "repeats")
    assert repeats is not None
    # y viewed as [r0, x0, r1, x1, ...]: d(x) sums over the repeat axes
    split = [v for r, s in zip(repeats, shape, strict=True) for v in (r, s)]
    summed = g.reduce("ReduceSum", g.reshape(d, split), list(range(0, 2 * len(shape), 2)), 0)
    return [summed, None]
