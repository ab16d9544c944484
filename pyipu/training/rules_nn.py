"""Gradient rules of convolution, pooling, normalisation, dropout and the ONNX loss ops.

Convolution: dX is a ConvTranspose of dY by the same weights; dW a convolution of the input by
dY with strides and dilations swapped (channels of each group and the batch exchanged, so a
grouped or depthwise convolution is one node too). ConvTranspose, the adjoint of a convolution,
the other way round. Pooling: dY spread back over each window by
a depthwise ConvTranspose (MaxPool: to the window's first maximum, found by comparing the
window's elements with the output in order).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from pyipu.compiler.errors import UnsupportedAttributeError, UnsupportedOpError
from pyipu.training.autodiff import GradGraph
from pyipu.training.registry import Grads, attr, dy, out_shape, rule, text


def _window(g: GradGraph, n: onnx.NodeProto, kernel: tuple[int, ...]) -> dict[str, list[int]]:
    """strides, dilations and begin/end pads of a Conv / pool node, auto_pad resolved, the end
    pads extended so that every output's window lies inside the padded input."""
    r = len(kernel)
    x, y = g.shape(n.input[0])[2:], out_shape(g, n)[2:]
    strides = list(attr(n, "strides", [1] * r))
    dil = list(attr(n, "dilations", [1] * r))
    pads = list(attr(n, "pads", [0] * (2 * r)))
    auto = attr(n, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    begin, end = pads[:r], pads[r:]
    for i in range(r):
        span = (y[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            total = max(span - x[i], 0)
            small = total // 2
            begin[i] = small if auto == "SAME_UPPER" else total - small
        elif auto == "VALID":
            begin[i] = 0
        end[i] = max(span - x[i] - begin[i], 0)
    return {"strides": strides, "dilations": dil, "begin": begin, "end": end}


def _transpose_back(
    g: GradGraph,
    d: str,
    ys: tuple[int, ...],
    w: str,
    ws: tuple[int, ...],
    x: str,
    win: dict[str, list[int]],
    group: int,
) -> str:
    """ConvTranspose of d (shape ys) by w (shape ws) giving x's shape: the input gradient of a
    convolution."""
    xs = g.shape(x)
    r = len(ws) - 2
    extra = []
    for i in range(r):
        made = (ys[2 + i] - 1) * win["strides"][i] + (ws[2 + i] - 1) * win["dilations"][i] + 1
        extra.append(xs[2 + i] - (made - win["begin"][i] - win["end"][i]))
    # windows that stop short of the padded end leave the last inputs untouched: output_padding
    # must be below the stride, so pad the input side instead when it is not
    end = [win["end"][i] - max(extra[i] - (win["strides"][i] - 1), 0) for i in range(r)]
    outpad = [min(extra[i], win["strides"][i] - 1) for i in range(r)]
    if any(e < 0 for e in end):
        raise UnsupportedAttributeError(f"cannot express the gradient of {x!r}'s window")
    return g.op(
        "ConvTranspose",
        [d, w],
        strides=win["strides"],
        dilations=win["dilations"],
        pads=win["begin"] + end,
        output_padding=outpad,
        group=group,
    )


@rule("Conv")
def _conv(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    x, w = n.input[0], n.input[1]
    ws = g.shape(w)
    xs = g.shape(x)
    r = len(ws) - 2
    group = int(attr(n, "group", 1))
    win = _window(g, n, ws[2:])
    out: Grads = [None] * len(n.input)
    if need[0]:
        out[0] = _transpose_back(g, d, out_shape(g, n), w, ws, x, win, group)
    if need[1]:
        out[1] = _weight_grad(g, x, xs, d, ws, win, group)
    if len(n.input) > 2 and n.input[2] and need[2]:
        out[2] = g.reduce("ReduceSum", d, [0, *range(2, 2 + r)], keepdims=0)
    return out


def _weight_grad(
    g: GradGraph,
    x: str,
    xs: tuple[int, ...],
    d: str,
    ws: tuple[int, ...],
    win: dict[str, list[int]],
    group: int,
) -> str:
    """d(W) of y = Conv(x, W) (W of shape ws) given d = d(y): a convolution of x by d."""
    r = len(ws) - 2
    batch, chans = xs[0], xs[1] // group
    # x as [C/group, group·N, spatial]: each group's N "channels" meet dY's channels
    xt = g.reshape(x, (batch, group, chans, *xs[2:]))
    xt = g.op("Transpose", [xt], perm=[2, 1, 0, *range(3, 3 + r)])
    xt = g.reshape(xt, (chans, group * batch, *xs[2:]))
    dt = g.op("Transpose", [d], perm=[1, 0, *range(2, 2 + r)])  # [M, N, out spatial]
    gw = g.op(
        "Conv",
        [xt, dt],
        strides=win["dilations"],
        dilations=win["strides"],
        pads=win["begin"] + win["end"],
        group=group,
    )
    gw = g.op("Transpose", [gw], perm=[1, 0, *range(2, 2 + r)])  # [M, C/group, k']
    starts, ends = [0] * r, list(ws[2:])
    return g.op("Slice", [gw, g.ints(starts), g.ints(ends), g.ints(range(2, 2 + r))])


@rule("ConvTranspose")
def _conv_transpose(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    """y = ConvTranspose(x, W) is the adjoint of the convolution c(z) = Conv(z, W): so
    d(x) = c(d(y)), and d(W) is the weight gradient of c at input d(y) and output gradient x."""
    d = dy(gy)
    x, w = n.input[0], n.input[1]
    xs, ws, ys = g.shape(x), g.shape(w), out_shape(g, n)
    r = len(ws) - 2
    group = int(attr(n, "group", 1))
    auto = text(n, "auto_pad", "NOTSET")
    if attr(n, "output_shape") is not None or auto not in ("NOTSET", "VALID"):
        raise UnsupportedAttributeError(
            f"ConvTranspose {n.name!r}: gradient only with explicit pads (no output_shape, "
            "auto_pad NOTSET or VALID)"
        )
    strides = list(attr(n, "strides", [1] * r))
    dil = list(attr(n, "dilations", [1] * r))
    pads = [0] * (2 * r) if auto == "VALID" else list(attr(n, "pads", [0] * (2 * r)))
    begin, end = pads[:r], list(pads[r:])
    out: Grads = [None] * len(n.input)
    if need[0]:
        out[0] = g.op("Conv", [d, w], strides=strides, dilations=dil, pads=pads, group=group)
    if need[1]:
        # c's windows over d(y): the rows past the last window (output_padding beyond the end
        # pad) were written by no element of x, so they are cut off
        cut = list(ys)
        for i in range(r):
            span = (xs[2 + i] - 1) * strides[i] + (ws[2 + i] - 1) * dil[i] + 1
            end[i] = span - ys[2 + i] - begin[i]
            if end[i] < 0:
                cut[2 + i] += end[i]
                end[i] = 0
        dc = d
        if tuple(cut) != tuple(ys):
            dc = g.op("Slice", [d, g.ints([0] * r), g.ints(cut[2:]), g.ints(range(2, 2 + r))])
        win = {"strides": strides, "dilations": dil, "begin": begin, "end": end}
        out[1] = _weight_grad(g, dc, tuple(cut), x, ws, win, group)
    if len(n.input) > 2 and n.input[2] and need[2]:
        out[2] = g.reduce("ReduceSum", d, [0, *range(2, 2 + r)], keepdims=0)
    return out


def _pool_kernel(n: onnx.NodeProto) -> tuple[int, ...]:
    return tuple(int(k) for k in attr(n, "kernel_shape"))


def _spread(
    g: GradGraph,
    parts: str,
    out: tuple[int, ...],
    x: str,
    kernel: tuple[int, ...],
    win: dict[str, list[int]],
) -> str:
    """Depthwise ConvTranspose of `parts` [N, C·k, *out] (k = kernel positions, one-hot kernels)
    back to x's shape: each window position's share lands on its input element."""
    batch, chans = g.shape(x)[:2]
    k = math.prod(kernel)
    # kernel c·k + j is one at window position j
    onehot = np.tile(np.eye(k).reshape(k, 1, *kernel), (chans, 1, *[1] * len(kernel)))
    onehot = onehot.astype(helper.tensor_dtype_to_np_dtype(g.dtype(x)))
    return _transpose_back(
        g, parts, (batch, chans * k, *out), g.const(onehot), onehot.shape, x, win, chans
    )


@rule("MaxPool")
def _max_pool(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    x, y = n.input[0], n.output[0]
    kernel = _pool_kernel(n)
    win = _window(g, n, kernel)
    xs, ys = g.shape(x), g.shape(y)
    r = len(kernel)
    if int(attr(n, "storage_order", 0)):
        raise UnsupportedAttributeError(f"MaxPool {n.name!r}: storage_order 1 cannot be trained")
    lowest = g.const(np.array(-np.inf), x)
    padded = g.op("Pad", [x, g.ints([0, 0, *win["begin"], 0, 0, *win["end"]]), lowest])
    taken = None
    parts = []
    k = math.prod(kernel)
    for j in range(k):
        offset = np.unravel_index(j, kernel)
        starts = [int(offset[i]) * win["dilations"][i] for i in range(r)]
        ends = [starts[i] + (ys[2 + i] - 1) * win["strides"][i] + 1 for i in range(r)]
        seen = g.op(
            "Slice",
            [padded, g.ints(starts), g.ints(ends), g.ints(range(2, 2 + r)), g.ints(win["strides"])],
        )
        hit = g.op("Equal", [seen, y])
        if taken is not None:  # the first maximum of a window takes the gradient, as PyTorch
            hit = g.op("And", [hit, g.op("Not", [taken])])
            taken = g.op("Or", [taken, hit])
        else:
            taken = hit
        parts.append(g.unsqueeze(g.op("Mul", [d, g.op("Cast", [hit], to=g.dtype(x))]), [2]))
    stacked = g.reshape(g.op("Concat", parts, axis=2), (xs[0], xs[1] * k, *ys[2:]))
    return [_spread(g, stacked, ys[2:], x, kernel, win)]


@rule("AveragePool")
def _average_pool(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    x = n.input[0]
    kernel = _pool_kernel(n)
    win = _window(g, n, kernel)
    xs, ys = g.shape(x), out_shape(g, n)
    r = len(kernel)
    pads = attr(n, "pads", [0] * (2 * r))
    # how many inputs each window averaged: padding counts only with count_include_pad
    inside = np.ones(xs[2:])
    if int(attr(n, "count_include_pad", 0)):
        inside = np.pad(inside, list(zip(pads[:r], pads[r:], strict=True)), constant_values=1)
        lo = [win["begin"][i] - pads[i] for i in range(r)]
    else:
        lo = win["begin"]
    counts = _window_sums(inside, lo, kernel, win, ys[2:])
    share = g.op("Div", [d, g.const(counts.reshape(1, 1, *ys[2:]), x)])
    k = math.prod(kernel)
    tiled = g.op("Tile", [g.unsqueeze(share, [2]), g.ints([1, 1, k, *[1] * r])])
    stacked = g.reshape(tiled, (xs[0], xs[1] * k, *ys[2:]))
    return [_spread(g, stacked, ys[2:], x, kernel, win)]


def _window_sums(
    a: np.ndarray,
    lo: list[int],
    kernel: tuple[int, ...],
    win: dict[str, list[int]],
    out: tuple[int, ...],
) -> np.ndarray:
    """Sum of `a` (zero outside) over each output's window, in numpy (static shapes)."""
    r = len(kernel)
    counts = np.zeros(out)
    for idx in np.ndindex(*out):
        sl = []
        for i in range(r):
            start = idx[i] * win["strides"][i] - lo[i]
            taps = start + np.arange(kernel[i]) * win["dilations"][i]
            sl.append(taps[(taps >= 0) & (taps < a.shape[i])])
        counts[idx] = a[np.ix_(*sl)].sum() if all(len(s) for s in sl) else 0
    return np.maximum(counts, 1)


@rule("GlobalAveragePool")
def _global_average_pool(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    xs = g.shape(n.input[0])
    count = math.prod(xs[2:])
    spread = g.op("Expand", [d, g.ints(xs)])
    return [g.op("Div", [spread, g.const(float(count), n.input[0])])]


@rule("BatchNormalization")
def _batch_norm(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    x, scale, bias, mean, var = n.input[:5]
    xs = g.shape(x)
    eps = float(attr(n, "epsilon", 1e-5))
    axes = [0, *range(2, len(xs))]
    chan = (1, xs[1], *[1] * (len(xs) - 2))
    training = int(attr(n, "training_mode", 0)) or (g.opset < 14 and len(n.output) > 1)
    if training:  # statistics of this batch: they depend on x too
        mu = g.reduce("ReduceMean", x, axes, keepdims=1)
        centred = g.op("Sub", [x, mu])
        v = g.reduce("ReduceMean", g.op("Mul", [centred, centred]), axes, keepdims=1)
    else:
        centred = g.op("Sub", [x, g.reshape(mean, chan)])
        v = g.reshape(var, chan)
    inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [v, g.const(eps, x)])])])
    xhat = g.op("Mul", [centred, inv])
    out: Grads = [None] * len(n.input)
    dscale = g.reduce("ReduceSum", g.op("Mul", [d, xhat]), axes, keepdims=0)
    if need[1]:
        out[1] = dscale
    if need[2]:
        out[2] = g.reduce("ReduceSum", d, axes, keepdims=0)
    if need[0]:
        k = g.op("Mul", [g.reshape(scale, chan), inv])
        if not training:
            out[0] = g.op("Mul", [d, k])
        else:  # dx = k (dy - mean(dy) - xhat mean(dy xhat))
            m_dy = g.reduce("ReduceMean", d, axes, keepdims=1)
            m_dyx = g.reduce("ReduceMean", g.op("Mul", [d, xhat]), axes, keepdims=1)
            inner = g.op("Sub", [g.op("Sub", [d, m_dy]), g.op("Mul", [xhat, m_dyx])])
            out[0] = g.op("Mul", [k, inner])
    if (need[3] or need[4]) and not training:
        raise UnsupportedOpError(
            f"BatchNormalization {n.name!r}: the running mean and variance cannot be trained"
        )
    return out


@rule("LayerNormalization")
def _layer_norm(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    x, scale = n.input[0], n.input[1]
    xs = g.shape(x)
    axis = int(attr(n, "axis", -1)) % len(xs)
    eps = float(attr(n, "epsilon", 1e-5))
    axes = list(range(axis, len(xs)))
    mu = g.reduce("ReduceMean", x, axes, keepdims=1)
    centred = g.op("Sub", [x, mu])
    v = g.reduce("ReduceMean", g.op("Mul", [centred, centred]), axes, keepdims=1)
    inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [v, g.const(eps, x)])])])
    xhat = g.op("Mul", [centred, inv])
    out: Grads = [None] * len(n.input)
    if need[1]:
        gs = g.op("Mul", [d, xhat])
        out[1] = g.unbroadcast(gs, xs, scale)
    if len(n.input) > 2 and n.input[2] and need[2]:
        out[2] = g.unbroadcast(d, xs, n.input[2])
    if need[0]:
        ds = g.op("Mul", [d, scale])
        m1 = g.reduce("ReduceMean", ds, axes, keepdims=1)
        m2 = g.reduce("ReduceMean", g.op("Mul", [ds, xhat]), axes, keepdims=1)
        inner = g.op("Sub", [g.op("Sub", [ds, m1]), g.op("Mul", [xhat, m2])])
        out[0] = g.op("Mul", [inv, inner])
    return out


@rule("Dropout")
def _dropout(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    x = n.input[0]
    training = False
    ratio = float(attr(n, "ratio", 0.5))
    if g.opset >= 12:
        if len(n.input) > 2 and n.input[2]:
            t = g.constant(n.input[2])
            if t is None:
                raise UnsupportedOpError(f"Dropout {n.name!r}: training_mode must be constant")
            training = bool(t)
        if len(n.input) > 1 and n.input[1]:
            r = g.constant(n.input[1])
            if r is None:
                raise UnsupportedOpError(f"Dropout {n.name!r}: ratio must be constant")
            ratio = float(r)
    else:
        training = not int(attr(n, "is_test", 0)) if g.opset < 7 else True
    if not training or ratio == 0.0:
        return [d] + [None] * (len(n.input) - 1)
    if len(n.output) < 2 or not n.output[1]:
        raise UnsupportedOpError(f"Dropout {n.name!r}: training needs its mask output")
    keep = g.op("Cast", [n.output[1]], to=g.dtype(x))
    scaled = g.op("Mul", [d, g.op("Mul", [keep, g.const(1.0 / (1.0 - ratio), x)])])
    return [scaled] + [None] * (len(n.input) - 1)


def _nll_backward(
    g: GradGraph, d: str, n: onnx.NodeProto, logp: str, label: str, weight: str | None
) -> str:
    """d(loss)/d(log-probabilities) of NegativeLogLikelihoodLoss([logp, label, weight])."""
    ls = g.shape(logp)
    classes = ls[1]
    reduction = attr(n, "reduction", b"mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    ignore = attr(n, "ignore_index")
    label64 = g.op("Cast", [label], to=onnx.TensorProto.INT64)
    # a per-element weight: the class weight (1 without), 0 where the label is ignored
    safe = label64
    if ignore is not None:
        keep = g.op("Not", [g.op("Equal", [label64, g.const(np.int64(ignore))])])
        safe = g.op("Where", [keep, label64, g.const(np.int64(0))])
    if weight:
        w = g.op("Gather", [weight, safe])
    else:
        w = g.op("Cast", [g.op("Equal", [safe, safe])], to=g.dtype(logp))
    if ignore is not None:
        w = g.op("Mul", [w, g.op("Cast", [keep], to=g.dtype(logp))])
    scale = d  # "sum", and "none" (d has the label's shape)
    if reduction == "mean":  # the weighted mean: divided by the weights' sum
        total = g.reduce("ReduceSum", w, list(range(len(g.shape(label)))), keepdims=0)
        scale = g.op("Div", [d, total])
    per = g.op("Neg", [g.op("Mul", [w, scale])])  # label's shape [N, d...]
    hot = g.op(
        "OneHot", [safe, g.const(np.float32(classes)), g.const(np.array([0.0, 1.0]), logp)], axis=1
    )
    return g.op("Mul", [hot, g.unsqueeze(per, [1])])


@rule("NegativeLogLikelihoodLoss")
def _nll(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    weight = n.input[2] if len(n.input) > 2 and n.input[2] else None
    if weight and need[2]:
        raise UnsupportedOpError(f"{n.op_type} {n.name!r}: class weights cannot be trained")
    return [_nll_backward(g, d, n, n.input[0], n.input[1], weight)] + [None] * (len(n.input) - 1)


@rule("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    weight = n.input[2] if len(n.input) > 2 and n.input[2] else None
    if weight and need[2]:
        raise UnsupportedOpError(f"{n.op_type} {n.name!r}: class weights cannot be trained")
    logits = n.input[0]
    logp = g.op("LogSoftmax", [logits], axis=1)
    g.types[logp] = g.types[logits]
    dlogp = None
    if gy[0] is not None:
        dlogp = _nll_backward(g, gy[0], n, logp, n.input[1], weight)
    if len(gy) > 1 and gy[1] is not None:  # the log_prob output's own gradient
        dlogp = gy[1] if dlogp is None else g.op("Add", [dlogp, gy[1]])
    assert dlogp is not None
    # LogSoftmax over axis 1: dx = dlogp - softmax · sum(dlogp over axis 1)
    s = g.reduce("ReduceSum", dlogp, [1], keepdims=1)
    dx = g.op("Sub", [dlogp, g.op("Mul", [g.op("Exp", [logp]), s])])
    return [dx] + [None] * (len(n.input) - 1)
