"""Gradient rules of reshaping, slicing, padding, resizing, splitting, tiling, concatenation,
reductions, cumulative sums and softmax.

A strided Slice, a Pad in reflect, edge or wrap mode and a Resize map each axis linearly (every
output element reads fixed input elements, with fixed weights): their gradients apply each
axis's map transposed, a compile-time matrix (`registry.spread_along`).
"""

from __future__ import annotations

import numpy as np
import onnx

from pyipu.compiler.errors import UnsupportedAttributeError, UnsupportedOpError
from pyipu.training.autodiff import GradGraph
from pyipu.training.registry import Grads, attr, dy, out_shape, rule, spread_along, text


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
    if any(s == 0 for s in steps):
        raise UnsupportedAttributeError(f"Slice {n.name!r}: a step of 0")
    # d(x) is d(y) padded back to x's shape with zeros where the slice left x out
    before, after = [0] * rank, [0] * rank
    picks: dict[int, range] = {}
    for a, s, e, step in zip(axes, starts, ends, steps, strict=True):
        a %= rank
        dim = shape[a]
        if step != 1:  # Python's slices clamp and count from the end as ONNX's do
            picks[a] = range(dim)[s:e:step]
            continue
        lo = min(max(s + dim if s < 0 else s, 0), dim)
        hi = min(max(e + dim if e < 0 else e, 0), dim)
        before[a], after[a] = lo, dim - max(hi, lo)
    x = n.input[0]
    for a, picked in picks.items():  # each strided axis: y's element k is x's picked[k]
        m = np.zeros((len(picked), shape[a]))
        m[np.arange(len(picked)), list(picked)] = 1.0
        d = spread_along(g, d, rank, a, m, x)
    if any(before) or any(after):
        d = _pad_zeros(g, d, before, after)
    return [d] + [None] * (len(n.input) - 1)


def _pad_zeros(g: GradGraph, x: str, before: list[int], after: list[int]) -> str:
    if g.opset >= 11:
        return g.op("Pad", [x, g.ints(before + after)])
    return g.op("Pad", [x], pads=before + after)


@rule("Pad")
def _pad(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    mode = text(n, "mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise UnsupportedAttributeError(f"Pad {n.name!r}: no gradient for mode {mode!r}")
    shape = g.shape(n.input[0])
    rank = len(shape)
    pads = _constant_input(g, n, 1, "pads") if g.opset >= 11 else list(attr(n, "pads"))
    assert pads is not None
    axes = _constant_input(g, n, 3, "axes") if g.opset >= 18 else None
    axes = [a % rank for a in axes] if axes else list(range(rank))
    before, after = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[k + len(axes)]
    if mode != "constant":
        for a in range(rank):
            if before[a] or after[a]:
                m = _pad_matrix(mode, shape[a], before[a], after[a])
                d = spread_along(g, d, rank, a, m, n.input[0])
        return [d] + [None] * (len(n.input) - 1)
    if any(p < 0 for p in before + after):
        raise UnsupportedAttributeError(f"Pad {n.name!r}: gradient only for pads >= 0")
    # d(x): the part of d(y) where x was copied
    starts = before
    ends = [before[i] + shape[i] for i in range(rank)]
    grad = g.op("Slice", [d, g.ints(starts), g.ints(ends), g.ints(range(rank))])
    return [grad] + [None] * (len(n.input) - 1)


def _pad_matrix(mode: str, dim: int, before: int, after: int) -> np.ndarray:
    """[dim + before + after, dim]: which element of x each padded position copies."""
    k = np.arange(-before, dim + after)
    if mode == "edge":
        src = np.clip(k, 0, dim - 1)
    elif mode == "wrap":
        src = k % dim
    else:  # reflect: mirrored about the first and last elements, period 2(dim - 1)
        period = max(2 * (dim - 1), 1)
        src = np.abs(k) % period
        src = np.where(src >= dim, period - src, src)
    m = np.zeros((len(k), dim))
    m[np.arange(len(k)), src] = 1.0
    return m


# --- resizing ----------------------------------------------------------------------------
_CTMS = ("align_corners", "asymmetric", "pytorch_half_pixel", "half_pixel", "half_pixel_symmetric")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source(ctm: str, out: int, dim: int, scale: float) -> np.ndarray:
    """Where each output position of one axis reads x (ONNX's coordinate transformation)."""
    o = np.arange(out, dtype=np.float64)
    width = scale * dim  # the unrounded output length
    if ctm == "align_corners":
        return np.zeros(out) if width == 1 else o * (dim - 1) / (width - 1)
    if ctm == "asymmetric":
        return o / scale
    if ctm == "pytorch_half_pixel":
        return np.full(out, -0.5) if width == 1 else (o + 0.5) / scale - 0.5
    if ctm == "half_pixel":
        return (o + 0.5) / scale - 0.5
    assert ctm == "half_pixel_symmetric"
    offset = dim / 2 * (1 - out / width)
    return offset + (o + 0.5) / scale - 0.5


def _resize_matrix(n: onnx.NodeProto, out: int, dim: int, scale: float) -> np.ndarray:
    """[out, dim]: the weights of x's elements in each output element of one axis."""
    ctm = text(n, "coordinate_transformation_mode", "half_pixel")
    src = _source(ctm, out, dim, scale)
    # the two neighbours of src, edges clamped; an exact integer is the right one of its pair
    lo = np.floor(src)
    exact = src == lo
    lo = np.where(exact, lo - 1, lo)
    ratio = np.where(exact, 1.0, src - lo)
    if text(n, "mode", "nearest") == "linear":
        right = ratio
    else:
        nearest = text(n, "nearest_mode", "round_prefer_floor")
        right = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": exact,
            "ceil": np.ones(out, bool),
        }[nearest].astype(np.float64)
    m = np.zeros((out, dim))
    rows = np.arange(out)
    np.add.at(m, (rows, np.clip(lo, 0, dim - 1).astype(np.int64)), 1.0 - right)
    np.add.at(m, (rows, np.clip(lo + 1, 0, dim - 1).astype(np.int64)), right)
    return m


def _resize_scales(g: GradGraph, n: onnx.NodeProto) -> list[float]:
    """The scale of every axis: the given scales, or the ratio the sizes imply."""
    rank = len(g.shape(n.input[0]))
    shape = g.shape(n.input[0])
    axes = [int(a) % rank for a in attr(n, "axes", range(rank))]
    scales = None
    if len(n.input) > 2 and n.input[2]:
        value = g.constant(n.input[2])
        if value is None:
            raise UnsupportedOpError(f"Resize {n.name!r}: scales must be constant to train")
        scales = [float(v) for v in value.reshape(-1)] or None
    full = [1.0] * rank
    if scales is not None:
        for a, s in zip(axes, scales, strict=True):
            full[a] = s
        return full
    sizes = _constant_input(g, n, 3, "sizes")
    assert sizes is not None
    ratios = {a: size / shape[a] for a, size in zip(axes, sizes, strict=True)}
    policy = text(n, "keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        one = (min if policy == "not_larger" else max)(ratios.values())
        ratios = dict.fromkeys(ratios, one)
    for a, r in ratios.items():
        full[a] = r
    return full


@rule("Resize")
def _resize(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    x = n.input[0]
    mode = text(n, "mode", "nearest")
    ctm = text(n, "coordinate_transformation_mode", "half_pixel")
    if g.opset < 11:
        raise UnsupportedAttributeError(f"Resize {n.name!r}: gradient from opset 11 on")
    if mode not in ("nearest", "linear") or int(attr(n, "antialias", 0)):
        raise UnsupportedAttributeError(
            f"Resize {n.name!r}: gradient only for modes nearest and linear without antialias"
        )
    if ctm not in _CTMS:
        raise UnsupportedAttributeError(
            f"Resize {n.name!r}: no gradient for coordinate_transformation_mode {ctm!r}"
        )
    nearest = text(n, "nearest_mode", "round_prefer_floor")
    if mode == "nearest" and nearest not in _NEAREST:
        raise UnsupportedAttributeError(f"Resize {n.name!r}: unknown nearest_mode {nearest!r}")
    shape, out = g.shape(x), out_shape(g, n)
    for a, scale in enumerate(_resize_scales(g, n)):
        if out[a] == shape[a] and scale == 1.0:
            continue
        d = spread_along(g, d, len(shape), a, _resize_matrix(n, out[a], shape[a], scale), x)
    return [d] + [None] * (len(n.input) - 1)


@rule("CumSum")
def _cumsum(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    # each y element sums x elements on one side: d(x) sums d(y) on the other
    reverse = 1 - int(attr(n, "reverse", 0))
    exclusive = int(attr(n, "exclusive", 0))
    grad = g.op("CumSum", [dy(gy), n.input[1]], exclusive=exclusive, reverse=reverse)
    return [grad, None]


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
