"""ONNX op lowerings: convolution, pooling and normalisations (see ops.py).

CONV2D and POOL2D are 2-D; 1-D ops run on a [N, C, 1, W] view of their input. LRN, LpPool and
InstanceNormalization are composed from existing instructions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pyipu.compiler.ir import FLOAT_DTYPES, f64_bits
from pyipu.compiler.lower import Node, UseFunctionBody
from pyipu.compiler.ops import REGISTRY, LowerFn, _prod, register
from pyipu.compiler.ops_data import _bits as pad_bits
from pyipu.enums import BinaryFn, DType, Op, UnaryFn


def _ints(n: Node, name: str, default: Sequence[int]) -> list[int]:
    v = n.attr(name)
    return list(default) if v is None else [int(a) for a in v]


class Spatial:
    """A conv/pool node's input and attributes in 2-D form: 1-D nodes get a unit H dim."""

    def __init__(self, n: Node, what: str) -> None:
        src = n.shape(0)
        if len(src) not in (3, 4):
            n.fail(
                f"only 1-D, 2-D and (for Conv and pooling) 3-D {what} is supported, got input "
                f"shape {list(src)}"
            )
        self.n = n
        self.one_d = len(src) == 3
        self.shape = (*src[:2], 1, src[2]) if self.one_d else src
        self.x = n.input(0)
        if self.one_d:
            self.x = n.view(self.x, self.shape, ":2d")

    def ints(self, name: str, default: Sequence[int], pad: int = 1) -> list[int]:
        """A spatial attribute in 2-D form; `pad` fills the unit H dim."""
        v = _ints(self.n, name, default)
        want = 1 if self.one_d else 2
        if name == "pads":
            if len(v) != 2 * want:
                self.n.fail(f"pads {v} must have {2 * want} values")
            return [0, v[0], 0, v[1]] if self.one_d else v
        if len(v) != want:
            self.n.fail(f"{name} {v} must have {want} value(s)")
        return [pad, *v] if self.one_d else v

    def positive(self, name: str) -> list[int]:
        v = self.ints(name, [1] * (1 if self.one_d else 2))
        if any(a < 1 for a in v):
            self.n.fail(f"{name} {v} must be positive")
        return v

    def pads(self, kernel: Sequence[int], strides: Sequence[int], dils: Sequence[int]) -> list[int]:
        """[top, left, bottom, right], auto_pad resolved."""
        n = self.n
        auto = n.attr("auto_pad", "NOTSET") or "NOTSET"
        if auto == "NOTSET":
            pads = self.ints("pads", [0] * (2 if self.one_d else 4), pad=0)
            if any(p < 0 for p in pads):
                n.fail(f"pads {pads} must be non-negative")
            return pads
        if auto == "VALID":
            return [0, 0, 0, 0]
        if auto not in ("SAME_UPPER", "SAME_LOWER"):
            n.fail(f"auto_pad {auto!r} is not supported")
        begin, end = [], []
        for size, k, s, d in zip(self.shape[2:], kernel, strides, dils, strict=True):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        return begin + end

    def emit(
        self, op: Op, inputs: list[int], out_2d: Sequence[int], dt: DType, attrs: list[int]
    ) -> None:
        n = self.n
        if not self.one_d:
            n.emit(op, inputs, out_2d, dt, attrs)
            return
        y = n.emit_temp(op, inputs, out_2d, dt, attrs, ":2d")
        n.set_view(y, (*out_2d[:2], out_2d[3]))


def _out_dim(size: int, pa: int, pb: int, k: int, d: int, s: int, ceil: bool = False) -> int:
    span = size + pa + pb - ((k - 1) * d + 1)
    if span < 0:
        return 0
    if not ceil:
        return span // s + 1
    out = -(-span // s) + 1
    return out - 1 if (out - 1) * s >= size + pa else out  # last window must start inside


@register("Conv", 1, 11)
def Conv(n: Node) -> None:  # noqa: N802
    if len(n.shape(0)) == 5:
        from pyipu.compiler.ops_nn3d import conv3d  # (it builds on this module)

        conv3d(n)
        return
    idx = [i for i in range(3) if n.has_input(i)]
    dt = n.check_dtype(FLOAT_DTYPES, *idx)
    sp = Spatial(n, "convolution")
    src, ws = sp.shape, n.shape(1)
    w = n.input(1)
    if len(ws) != len(n.shape(0)):
        n.shape_error(f"weight shape {list(ws)} must have the input's rank {len(n.shape(0))}")
    if sp.one_d:
        ws = (*ws[:2], 1, ws[2])
        w = n.low.b.view(w, ws, n.inputs[1] + ":2d")
    group = int(n.attr("group", 1))
    if group < 1 or src[1] % group or ws[0] % group or ws[1] * group != src[1]:
        n.shape_error(f"group {group} does not fit input {list(src)} and weight {list(ws)}")
    kernel = sp.ints("kernel_shape", ws[3:] if sp.one_d else ws[2:])
    if list(kernel) != list(ws[2:]):
        n.shape_error(f"kernel_shape {n.attr('kernel_shape')} differs from the weight's")
    strides, dils = sp.positive("strides"), sp.positive("dilations")
    pads = sp.pads(kernel, strides, dils)
    out = [
        _out_dim(src[2 + i], pads[i], pads[2 + i], kernel[i], dils[i], strides[i]) for i in (0, 1)
    ]
    if min(out) < 1:
        n.shape_error(f"input {list(src)} with pads {pads} is smaller than the kernel {kernel}")
    if n.has_input(2) and n.shape(2) != (ws[0],):
        n.shape_error(f"bias shape {list(n.shape(2))} must be [{ws[0]}]")
    inputs = [sp.x, w] + ([n.input(2)] if n.has_input(2) else [])
    sp.emit(Op.CONV2D, inputs, (src[0], ws[0], *out), dt, [group, *strides, *dils, *pads])


def _pool_attrs(n: Node, sp: Spatial, kind: int, cip: int) -> tuple[list[int], list[int]]:
    """(POOL2D attrs, output shape) of a pooling node in 2-D form."""
    src = sp.shape
    kernel = sp.ints("kernel_shape", [])
    if any(k < 1 for k in kernel):
        n.fail(f"kernel_shape {kernel} must be positive")
    strides, dils = sp.positive("strides"), sp.positive("dilations")
    pads = sp.pads(kernel, strides, dils)
    for i in (0, 1):
        if max(pads[i], pads[2 + i]) >= (kernel[i] - 1) * dils[i] + 1:
            n.fail(f"pads {pads} must be smaller than the kernel {kernel}")
    ceil = bool(n.attr("ceil_mode", 0))
    out = [
        _out_dim(src[2 + i], pads[i], pads[2 + i], kernel[i], dils[i], strides[i], ceil)
        for i in (0, 1)
    ]
    if min(out) < 1:
        n.shape_error(f"input {list(src)} with pads {pads} is smaller than the kernel {kernel}")
    return [kind, *kernel, *strides, *pads, cip, *dils], [*src[:2], *out]


def _pool(kind: int) -> LowerFn:
    def lower(n: Node) -> None:
        if len(n.outputs) > 1 and n.outputs[1]:
            n.fail("the Indices output of MaxPool is not supported")
        if n.attr("storage_order", 0):
            n.fail("storage_order=1 is not supported")
        if len(n.shape(0)) == 5:
            from pyipu.compiler.ops_nn3d import pool3d  # (it builds on this module)

            pool3d(n, kind)
            return
        dt = n.check_dtype(FLOAT_DTYPES, 0)
        sp = Spatial(n, "pooling")
        attrs, out = _pool_attrs(n, sp, kind, int(n.attr("count_include_pad", 0)))
        src = sp.shape
        if kind == 1 and not sp.one_d and attrs[1:3] == list(src[2:]) and not any(attrs[5:9]):
            # one window over each whole plane (ResNet's final 7x7 average): the mean of the
            # plane, one streaming pass instead of a window kernel per plane
            n.emit(Op.REDUCE_MEAN, [sp.x], out, dt, [_prod(src[:2]), _prod(src[2:]), 1])
            return
        sp.emit(Op.POOL2D, [sp.x], out, dt, attrs)

    return lower


register("MaxPool", 1, 8, 10, 11, 12)(_pool(0))
register("AveragePool", 1, 7, 10, 11, 19)(_pool(1))


@register("GlobalAveragePool", 1)
def GlobalAveragePool(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(FLOAT_DTYPES, 0)
    src = n.shape(0)
    if len(src) < 3:
        n.shape_error(f"input {list(src)} must have rank >= 3")
    out = (*src[:2], *([1] * (len(src) - 2)))
    n.emit(Op.REDUCE_MEAN, [n.input(0)], out, dt, [_prod(src[:2]), _prod(src[2:]), 1])


@register("GlobalMaxPool", 1)
def GlobalMaxPool(n: Node) -> None:  # noqa: N802 - a [1, S] max-pool window over a flat view
    dt = n.check_dtype(FLOAT_DTYPES, 0)
    src = n.shape(0)
    if len(src) < 3:
        n.shape_error(f"input {list(src)} must have rank >= 3")
    s = _prod(src[2:])
    x = n.view(n.input(0), (*src[:2], 1, s), ":2d")
    attrs = [0, 1, s, 1, 1, 0, 0, 0, 0, 0, 1, 1]
    y = n.emit_temp(Op.POOL2D, [x], (*src[:2], 1, 1), dt, attrs, ":2d")
    n.set_view(y, (*src[:2], *([1] * (len(src) - 2))))


@register("BatchNormalization", 9, 14, 15)
def BatchNormalization(n: Node) -> None:  # noqa: N802 - inference: y = x * scale' + shift'
    dt = n.check_dtype(FLOAT_DTYPES, 0)
    # training mode: training_mode=1, or (before opset 14) the running statistics as outputs
    training = bool(n.attr("training_mode", 0)) or (n.opset < 14 and any(o for o in n.outputs[1:]))
    if training or any(
        not n.has_input(i) or n.inputs[i] not in n.low.constants for i in range(1, 5)
    ):
        for node in _batch_norm_nodes(n, training):
            n.low.lower_node(node, REGISTRY, n.opset)
        return
    src = n.shape(0)
    if len(src) < 2:
        n.shape_error(f"input {list(src)} must have rank >= 2")
    c = src[1]
    names = ("scale", "B", "input_mean", "input_var")
    vals = [np.asarray(n.const(i, names[i - 1]), dtype=np.float64) for i in range(1, 5)]
    for name, v in zip(names, vals, strict=True):
        if v.shape != (c,):
            n.shape_error(f"{name} shape {list(v.shape)} must be [{c}]")
    scale, bias, mean, var = vals
    k = scale / np.sqrt(var + float(n.attr("epsilon", 1e-5)))
    shift = bias - mean * k
    shape = (c, *([1] * (len(src) - 2)))
    npdt = np.float16 if dt == DType.FLOAT16 else np.float32
    b = n.low.b
    tk = b.weight(n.outputs[0] + ":bn_scale", k.astype(npdt).reshape(shape), n.low.subgraph)
    ts = b.weight(n.outputs[0] + ":bn_shift", shift.astype(npdt).reshape(shape), n.low.subgraph)
    t = n.emit_temp(Op.MUL, [n.input(0), tk], src, dt, suffix=":bn_mul")
    n.emit(Op.ADD, [t, ts], src, dt)


def _batch_norm_nodes(n: Node, training: bool) -> list[onnx.NodeProto]:
    """BatchNormalization as element-wise ops and reductions, for the batch's own statistics
    (training mode) or a scale and bias computed at run time (a TrainingSession's weights):
    y = (x - mean) * (scale / sqrt(var + eps)) + B. Training mode also writes the running
    statistics, running = input * momentum + batch * (1 - momentum), with the batch's biased
    variance (the ONNX definition)."""
    for i, name in enumerate(("X", "scale", "B", "input_mean", "input_var")):
        if not n.has_input(i):
            n.fail(f"input {i} ({name}) is required")
    if n.opset < 14 and any(o for o in n.outputs[3:5]):
        n.fail("the saved mean and variance outputs are not supported")
    x, scale, bias, mean, var = n.inputs[:5]
    src = n.shape(0)
    if len(src) < 2:
        n.shape_error(f"input {list(src)} must have rank >= 2")
    npdt = np.float16 if n.dtype(0) == DType.FLOAT16 else np.float32
    p = f"{n.outputs[0]}:bn:"
    nodes: list[onnx.NodeProto] = []

    def op(op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op_type, inputs, [p + name], p + name, **attrs))
        return p + name

    def const(name: str, value: np.ndarray) -> str:
        return op("Constant", [], name, value=numpy_helper.from_array(value))

    chan = const("chan", np.array([src[1], *[1] * (len(src) - 2)], np.int64))
    axes = [0, *range(2, len(src))]

    def reduce_mean(t: str, name: str) -> str:
        if n.opset >= 18:
            return op("ReduceMean", [t, const(name + "_axes", np.array(axes, np.int64))], name)
        return op("ReduceMean", [t], name, axes=axes, keepdims=1)

    if training:
        batch_mean = reduce_mean(x, "mean")
        centred = op("Sub", [x, batch_mean], "centred")
        batch_var = reduce_mean(op("Mul", [centred, centred], "sq"), "var")
    else:
        centred = op("Sub", [x, op("Reshape", [mean, chan], "mean")], "centred")
        batch_var = op("Reshape", [var, chan], "var")
    eps = const("eps", np.array(float(n.attr("epsilon", 1e-5)), npdt))
    inv = op("Reciprocal", [op("Sqrt", [op("Add", [batch_var, eps], "var_eps")], "std")], "inv")
    k = op("Mul", [inv, op("Reshape", [scale, chan], "scale")], "k")
    scaled = op("Mul", [centred, k], "scaled")
    nodes.append(
        helper.make_node("Add", [scaled, op("Reshape", [bias, chan], "B")], [n.outputs[0]], p)
    )
    if training:
        momentum = float(n.attr("momentum", 0.9))
        flat = const("flat", np.array([src[1]], np.int64))
        for i, given, batch in ((1, mean, batch_mean), (2, var, batch_var)):
            if i < len(n.outputs) and n.outputs[i]:
                old = op("Mul", [given, const(f"m{i}", np.array(momentum, npdt))], f"old{i}")
                new = op("Reshape", [batch, flat], f"flat{i}")
                new = op("Mul", [new, const(f"m1{i}", np.array(1 - momentum, npdt))], f"new{i}")
                nodes.append(helper.make_node("Add", [old, new], [n.outputs[i]], f"{p}run{i}"))
    return nodes


# ---------------------------------------------------------------- composed normalisations


def _scalar(n: Node, value: float, dt: DType, tag: str) -> int:
    """A 0-d constant of the node's float dtype."""
    npdt = np.float16 if dt == DType.FLOAT16 else np.float32
    name = f"{n.outputs[0]}:{tag}"
    return n.low.b.weight(name, np.array(value, dtype=npdt), n.low.subgraph)


@register("LRN", 1, 13)
def LRN(n: Node) -> None:  # noqa: N802
    """y = x / (bias + alpha / size * sum of x^2 over `size` channels) ^ beta.

    The channel-window sum is an average pool with count_include_pad over an [N, 1, C, S] view of
    x^2, so the zero padding at the channel edges matches ONNX's clipped window."""
    dt = n.check_dtype(FLOAT_DTYPES, 0)
    src = n.shape(0)
    if len(src) < 3:
        n.shape_error(f"input {list(src)} must have rank >= 3")
    size = int(n.attr("size", 0))
    if size < 1:
        n.fail(f"size {size} must be >= 1")
    alpha, beta = float(n.attr("alpha", 1e-4)), float(n.attr("beta", 0.75))
    bias = float(n.attr("bias", 1.0))
    x = n.input(0)
    flat = (src[0], 1, src[1], _prod(src[2:]))
    sq = n.emit_temp(Op.MUL, [x, x], src, dt, suffix=":sq")
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    attrs = [1, size, 1, 1, 1, before, 0, after, 0, 1, 1, 1]
    avg = n.emit_temp(
        Op.POOL2D, [n.low.b.view(sq, flat, n.outputs[0] + ":sq2d")], flat, dt, attrs, ":avg"
    )
    avg = n.low.b.view(avg, src, n.outputs[0] + ":avgnd")
    t = n.emit_temp(Op.MUL, [avg, _scalar(n, alpha, dt, "alpha")], src, dt, suffix=":scaled")
    t = n.emit_temp(Op.ADD, [t, _scalar(n, bias, dt, "bias")], src, dt, suffix=":biased")
    p = n.emit_temp(
        Op.BINARY, [t, _scalar(n, beta, dt, "beta")], src, dt, [int(BinaryFn.POW)], ":pow"
    )
    n.emit(Op.DIV, [x, p], src, dt)


@register("LpPool", 1, 2, 11, 18)
def LpPool(n: Node) -> None:  # noqa: N802
    """y = (sum over the window of |x|^p) ^ (1/p): an average pool with count_include_pad
    (zero padding, as ONNX pads LpPool) times the window size."""
    dt = n.check_dtype(FLOAT_DTYPES, 0)
    sp = Spatial(n, "Lp pooling")
    p = float(n.attr("p", 2.0))
    if p <= 0:
        n.fail(f"p {p} must be positive")
    if n.opset < 2:
        n.fail("LpPool-1 (p as a float attribute with different defaults) is not supported")
    attrs, out = _pool_attrs(n, sp, 1, 1)
    k = attrs[1] * attrs[2]
    src = sp.shape
    a = n.emit_temp(Op.UNARY, [sp.x], src, dt, [int(UnaryFn.ABS), 0, 0], ":abs")
    a = n.emit_temp(Op.BINARY, [a, _scalar(n, p, dt, "p")], src, dt, [int(BinaryFn.POW)], ":pow")
    avg = n.emit_temp(Op.POOL2D, [a], out, dt, attrs, ":avg")
    s = n.emit_temp(Op.MUL, [avg, _scalar(n, float(k), dt, "k")], out, dt, suffix=":sum")
    inv = [s, _scalar(n, 1.0 / p, dt, "invp")]
    sp.emit(Op.BINARY, inv, out, dt, [int(BinaryFn.POW)])


@register("LayerNormalization", 17)
def LayerNormalization(n: Node) -> None:  # noqa: N802
    """One LAYER_NORM over the trailing axes from `axis`, with Scale (and B) of exactly that
    shape (leading 1s aside); the Mean / InvStdDev outputs and other forms take the function
    body (ReduceMean, Sub, ...)."""
    src = n.shape(0)
    axis = n.axis(int(n.attr("axis", -1)), len(src))
    trailing = src[axis:]
    length = _prod(trailing)

    def fits(i: int) -> bool:
        shape = list(n.shape(i))
        while len(shape) > len(trailing) and shape[0] == 1:
            shape.pop(0)
        return tuple(shape) == trailing

    params = {1: "scale", 2: "bias"} if n.has_input(2) else {1: "scale"}  # input -> name
    if (
        any(n.outputs[1:])
        or int(n.attr("stash_type", 1)) != 1
        or n.dtype(0) not in FLOAT_DTYPES
        or length == 0
        or not all(fits(i) for i in params)
    ):
        raise UseFunctionBody
    dt = n.check_dtype(FLOAT_DTYPES, 0, *params)
    b, name = n.low.b, n.outputs[0]
    views = [b.view(n.input(i), (length,), f"{name}:{tag}") for i, tag in params.items()]
    eps = f64_bits(float(n.attr("epsilon", 1e-5)))
    n.emit(Op.LAYER_NORM, [n.input(0), *views], src, dt, [length, eps])


@register("InstanceNormalization", 1, 6)
def InstanceNormalization(n: Node) -> None:  # noqa: N802
    """y = scale * (x - mean) / sqrt(var + epsilon) + B, statistics per (n, c) over space."""
    dt = n.check_dtype(FLOAT_DTYPES, 0, 1, 2)
    src = n.shape(0)
    if len(src) < 3:
        n.shape_error(f"input {list(src)} must have rank >= 3")
    c = src[1]
    for i, what in ((1, "scale"), (2, "B")):
        if n.shape(i) != (c,):
            n.shape_error(f"{what} shape {list(n.shape(i))} must be [{c}]")
    rows, s = src[0] * c, _prod(src[2:])
    b = n.low.b
    name = n.outputs[0]
    x = b.view(n.input(0), (rows, s), name + ":rows")
    mean = n.emit_temp(Op.REDUCE_MEAN, [x], (rows, 1), dt, [rows, s, 1], ":mean")
    d = n.emit_temp(Op.SUB, [x, mean], (rows, s), dt, suffix=":centred")
    sq = n.emit_temp(Op.MUL, [d, d], (rows, s), dt, suffix=":sq")
    var = n.emit_temp(Op.REDUCE_MEAN, [sq], (rows, 1), dt, [rows, s, 1], ":var")
    eps = _scalar(n, float(n.attr("epsilon", 1e-5)), dt, "eps")
    v = n.emit_temp(Op.ADD, [var, eps], (rows, 1), dt, suffix=":vareps")
    sd = n.emit_temp(Op.UNARY, [v], (rows, 1), dt, [int(UnaryFn.SQRT), 0, 0], ":std")
    norm = n.emit_temp(Op.DIV, [d, sd], (rows, s), dt, suffix=":norm")
    per_c = (c, *([1] * (len(src) - 2)))
    scale = b.view(n.input(1), per_c, name + ":scale_c")
    bias = b.view(n.input(2), per_c, name + ":bias_c")
    t = n.emit_temp(Op.MUL, [b.view(norm, src, name + ":normnd"), scale], src, dt, suffix=":scaled")
    n.emit(Op.ADD, [t, bias], src, dt)


# ---------------------------------------------------------------- transposed convolution


def _reindex_temp(
    n: Node, x: int, maps: Sequence[np.ndarray], dt: DType, tag: str, pad: float = 0.0
) -> int:
    """REINDEX of x by per-dim maps (-1: the pad value) into a temporary."""
    b = n.low.b
    shape = b.tensors[x].shape
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    table = np.concatenate([np.asarray(m, np.int64) for m in maps])
    t = b.weight(f"{n.outputs[0]}:{tag}", table, n.low.subgraph)
    yshape = tuple(len(m) for m in maps)
    return n.emit_temp(Op.REINDEX, [x, t], yshape, dt, [pad_bits(pad, dt), *strides], f":{tag}")


def _upsample_map(size: int, stride: int, before: int, after: int) -> np.ndarray:
    """Positions of a zero-stuffed (stride - 1 zeros between) and padded axis: -1 for zeros."""
    span = stride * (size - 1) + 1
    p = np.arange(-before, span + after)
    return np.where((p >= 0) & (p < span) & (p % stride == 0), p // stride, -1)


@register("ConvTranspose", 1, 11)
def ConvTranspose(n: Node) -> None:  # noqa: N802
    """A direct convolution of the zero-stuffed, padded input with the flipped, regrouped
    weights: the stuffing and padding are one REINDEX, so no intermediate is materialised
    twice."""
    idx = [i for i in range(3) if n.has_input(i)]
    dt = n.check_dtype(FLOAT_DTYPES, *idx)
    sp = Spatial(n, "transposed convolution")
    src = sp.shape
    ws = n.shape(1)
    if len(ws) != len(n.shape(0)):
        n.shape_error(f"weight shape {list(ws)} must have the input's rank {len(n.shape(0))}")
    if sp.one_d:
        ws = (*ws[:2], 1, ws[2])
    group = int(n.attr("group", 1))
    c, mg = ws[0], ws[1]
    if group < 1 or src[1] != c or c % group:
        n.shape_error(f"group {group} does not fit input {list(n.shape(0))} and weight {list(ws)}")
    cg, m = c // group, mg * group
    kernel = sp.ints("kernel_shape", ws[2:] if not sp.one_d else ws[3:])
    if list(kernel) != list(ws[2:]):
        n.shape_error(f"kernel_shape {n.attr('kernel_shape')} differs from the weight's")
    strides, dils = sp.positive("strides"), sp.positive("dilations")
    outpad = sp.ints("output_padding", [0] * (1 if sp.one_d else 2), pad=0)
    span = [(kernel[i] - 1) * dils[i] + 1 for i in (0, 1)]
    full = [strides[i] * (src[2 + i] - 1) + outpad[i] + span[i] for i in (0, 1)]
    auto = n.attr("auto_pad", "NOTSET") or "NOTSET"
    if n.attr("output_shape") is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        if n.attr("output_shape") is not None:
            target = sp.ints("output_shape", [], pad=1)[-2:]
        else:
            target = [src[2 + i] * strides[i] for i in (0, 1)]
        total = [full[i] - target[i] for i in (0, 1)]
        if auto == "SAME_UPPER":
            pads = [
                total[0] // 2,
                total[1] // 2,
                total[0] - total[0] // 2,
                total[1] - total[1] // 2,
            ]
        else:
            pads = [
                total[0] - total[0] // 2,
                total[1] - total[1] // 2,
                total[0] // 2,
                total[1] // 2,
            ]
    elif auto in ("NOTSET", "VALID"):
        pads = [0, 0, 0, 0] if auto == "VALID" else sp.ints("pads", [0] * (2 if sp.one_d else 4), 0)
    else:
        n.fail(f"auto_pad {auto!r} is not supported")
    out = [full[i] - pads[i] - pads[2 + i] for i in (0, 1)]
    if min(out) < 1:  # (negative pads, from an output_shape beyond the full size, just add zeros)
        n.shape_error(f"pads {pads} do not fit input {list(src)} and kernel {kernel}")
    maps = [np.arange(src[0]), np.arange(c)]
    for i in (0, 1):
        before, after = span[i] - 1 - pads[i], span[i] - 1 - pads[2 + i] + outpad[i]
        maps.append(_upsample_map(src[2 + i], strides[i], before, after))
    x = _reindex_temp(n, sp.x, maps, dt, "stuffed")
    w = _transposed_weights(n, dt, group, cg, mg, kernel, sp.one_d)
    inputs = [x, w] + ([n.input(2)] if n.has_input(2) else [])
    if n.has_input(2) and n.shape(2) != (m,):
        n.shape_error(f"bias shape {list(n.shape(2))} must be [{m}]")
    sp.emit(Op.CONV2D, inputs, (src[0], m, *out), dt, [group, 1, 1, *dils, 0, 0, 0, 0])


def _transposed_weights(
    n: Node, dt: DType, group: int, cg: int, mg: int, kernel: Sequence[int], one_d: bool
) -> int:
    """W [C, M/g, kh, kw] -> [M, C/g, kh, kw], regrouped and spatially flipped."""
    b = n.low.b
    kh, kw = kernel
    name = n.outputs[0]
    if n.inputs[1] in n.low.constants:
        w = np.asarray(n.low.constants[n.inputs[1]]).reshape(group, cg, mg, kh, kw)
        w = w.transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1].reshape(group * mg, cg, kh, kw)
        return b.weight(f"{name}:wflip", np.ascontiguousarray(w), n.low.subgraph)
    w5 = b.view(n.input(1), (group, cg, mg, kh, kw), f"{name}:w5")
    perm = [0, 2, 1, 3, 4]
    wt = n.emit_temp(Op.TRANSPOSE, [w5], (group, mg, cg, kh, kw), dt, perm, ":wt")
    maps = [
        np.arange(group),
        np.arange(mg),
        np.arange(cg),
        np.arange(kh)[::-1],
        np.arange(kw)[::-1],
    ]
    wf = _reindex_temp(n, wt, maps, dt, "wflip")
    return b.view(wf, (group * mg, cg, kh, kw), f"{name}:w4")
