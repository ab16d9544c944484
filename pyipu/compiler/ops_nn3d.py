"""3-D convolution and pooling on the 2-D instructions (called from ops_nn for 5-D inputs).

Each kernel depth slice kd is a REINDEX that picks, for every output depth od, the input plane
od·stride + kd·dilation − pad (or padding), laid out as a batch of 2-D images: the 2-D
instruction then does the H, W part and the slices are combined (ADD for convolution and sums,
BINARY MAX for max pooling). Average pooling sums with a depthwise all-ones CONV2D and divides
by the window sizes, which are separable and computed at compile time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pyipu.compiler.ir import FLOAT_DTYPES
from pyipu.compiler.lower import Node
from pyipu.compiler.ops_nn import _ints, _out_dim, _reindex_temp
from pyipu.enums import BinaryFn, DType, Op


class Geometry:
    """Kernel, strides, dilations, begin/end pads and output dims of a 3-D conv/pool node."""

    def __init__(self, n: Node, kernel: Sequence[int], ceil: bool = False) -> None:
        src = n.shape(0)
        self.src = src
        self.kernel = list(kernel)
        self.strides = _ints(n, "strides", [1, 1, 1])
        self.dils = _ints(n, "dilations", [1, 1, 1])
        if len(self.kernel) != 3 or len(self.strides) != 3 or len(self.dils) != 3:
            n.fail("kernel_shape, strides and dilations must have 3 values")
        if min(self.kernel + self.strides + self.dils) < 1:
            n.fail("kernel_shape, strides and dilations must be positive")
        auto = n.attr("auto_pad", "NOTSET") or "NOTSET"
        spans = [(k - 1) * d + 1 for k, d in zip(self.kernel, self.dils, strict=True)]
        if auto == "NOTSET":
            pads = _ints(n, "pads", [0] * 6)
            if len(pads) != 6 or min(pads) < 0:
                n.fail(f"pads {pads} must be 6 non-negative values")
            self.begin, self.end = pads[:3], pads[3:]
        elif auto == "VALID":
            self.begin, self.end = [0] * 3, [0] * 3
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            self.begin, self.end = [], []
            for size, s, span in zip(src[2:], self.strides, spans, strict=True):
                total = max(0, (-(-size // s) - 1) * s + span - size)
                small, big = total // 2, total - total // 2
                self.begin.append(small if auto == "SAME_UPPER" else big)
                self.end.append(big if auto == "SAME_UPPER" else small)
        else:
            n.fail(f"auto_pad {auto!r} is not supported")
        self.out = [
            _out_dim(
                src[2 + i],
                self.begin[i],
                self.end[i],
                self.kernel[i],
                self.dils[i],
                self.strides[i],
                ceil,
            )
            for i in range(3)
        ]
        if min(self.out) < 1:
            n.shape_error(f"input {list(src)} is smaller than the kernel {self.kernel}")

    def depth_map(self, kd: int) -> np.ndarray:
        """Input plane of each output depth for kernel slice kd (-1: padding)."""
        p = np.arange(self.out[0]) * self.strides[0] + kd * self.dils[0] - self.begin[0]
        return np.where((p >= 0) & (p < self.src[2]), p, -1)

    def hw_attrs(self, extra: Sequence[int] = (0, 0)) -> list[int]:
        """[strides h w, dilations h w, pads top left bottom right] of the 2-D part."""
        return [
            *self.strides[1:],
            *self.dils[1:],
            *self.begin[1:],
            self.end[1] + extra[0],
            self.end[2] + extra[1],
        ]


def _slices(n: Node, g: Geometry, dt: DType, pad: float) -> list[tuple[int, int]]:
    """(kd, REINDEX of x to [N, C, OD, H, W]) for every kernel slice that reads some input."""
    src = g.src
    out = []
    for kd in range(g.kernel[0]):
        m = g.depth_map(kd)
        if (m < 0).all():
            continue  # only padding: contributes nothing (zeros / -inf)
        maps = [np.arange(src[0]), np.arange(src[1]), m, np.arange(src[3]), np.arange(src[4])]
        out.append((kd, _reindex_temp(n, n.input(0), maps, dt, f"d{kd}", pad)))
    return out


def conv3d(n: Node) -> None:
    idx = [i for i in range(3) if n.has_input(i)]
    dt = n.check_dtype(FLOAT_DTYPES, *idx)
    src, ws = n.shape(0), n.shape(1)
    group = int(n.attr("group", 1))
    if len(ws) != 5 or group < 1 or src[1] != ws[1] * group or ws[0] % group:
        n.shape_error(f"weight {list(ws)} and group {group} do not fit input {list(src)}")
    if list(_ints(n, "kernel_shape", ws[2:])) != list(ws[2:]):
        n.shape_error(f"kernel_shape {n.attr('kernel_shape')} differs from the weight's")
    g = Geometry(n, ws[2:])
    b = n.low.b
    nn, m = src[0], ws[0]
    od, oh, ow = g.out
    acc = None
    for kd, x in _slices(n, g, dt, 0.0):
        x = n.emit_temp(
            Op.TRANSPOSE, [x], (nn, od, src[1], *src[3:]), dt, [0, 2, 1, 3, 4], f":t{kd}"
        )
        x = b.view(x, (nn * od, src[1], *src[3:]), f"{n.outputs[0]}:img{kd}")
        w = _weight_slice(n, kd, dt)
        ins = [x, w] + ([n.input(2)] if acc is None and n.has_input(2) else [])
        y = n.emit_temp(Op.CONV2D, ins, (nn * od, m, oh, ow), dt, [group, *g.hw_attrs()], f":c{kd}")
        acc = (
            y
            if acc is None
            else n.emit_temp(Op.ADD, [acc, y], (nn * od, m, oh, ow), dt, suffix=f":s{kd}")
        )
    assert acc is not None  # the middle slice always reads the input (pads < span)
    acc = b.view(acc, (nn, od, m, oh, ow), f"{n.outputs[0]}:ndhw")
    n.emit(Op.TRANSPOSE, [acc], (nn, m, od, oh, ow), dt, [0, 2, 1, 3, 4])


def _weight_slice(n: Node, kd: int, dt: DType) -> int:
    ws = n.shape(1)
    b = n.low.b
    if n.inputs[1] in n.low.constants:
        w = np.ascontiguousarray(np.asarray(n.low.constants[n.inputs[1]])[:, :, kd])
        return b.weight(f"{n.outputs[0]}:w{kd}", w, n.low.subgraph)
    idx = b.weight(f"{n.outputs[0]}:kd{kd}", np.array(kd, np.int64), n.low.subgraph)
    attrs = [ws[0] * ws[1], ws[2], ws[3] * ws[4]]
    return n.emit_temp(Op.GATHER, [n.input(1), idx], (ws[0], ws[1], *ws[3:]), dt, attrs, f":w{kd}")


def pool3d(n: Node, kind: int) -> None:
    """kind 0: max, 1: average."""
    dt = n.check_dtype(FLOAT_DTYPES, 0)
    src = n.shape(0)
    g = Geometry(n, _ints(n, "kernel_shape", []), bool(n.attr("ceil_mode", 0)))
    for i in range(3):
        if max(g.begin[i], g.end[i]) >= (g.kernel[i] - 1) * g.dils[i] + 1:
            n.fail(f"pads {g.begin + g.end} must be smaller than the kernel {g.kernel}")
    b = n.low.b
    nn, c = src[:2]
    od, oh, ow = g.out
    planes = (nn, c * od, oh, ow)
    # the 2-D part may need extra end padding where ceil_mode lets the last window overhang
    extra = [
        max(
            0,
            (g.out[i] - 1) * g.strides[i]
            + (g.kernel[i] - 1) * g.dils[i]
            + 1
            - src[2 + i]
            - g.begin[i]
            - g.end[i],
        )
        for i in (1, 2)
    ]
    acc = None
    for kd, x in _slices(n, g, dt, -math.inf if kind == 0 else 0.0):
        x = b.view(x, (nn, c * od, *src[3:]), f"{n.outputs[0]}:img{kd}")
        if kind == 0:  # POOL2D: [kind, kernel, strides, pads, count_include_pad, dilations]
            hw = g.hw_attrs()
            attrs = [0, *g.kernel[1:], *hw[:2], *hw[4:], 0, *hw[2:4]]
            y = n.emit_temp(Op.POOL2D, [x], planes, dt, attrs, f":p{kd}")
            op, fn = Op.BINARY, [int(BinaryFn.MAX)]
        else:
            npdt = np.float16 if dt == DType.FLOAT16 else np.float32
            ones = b.weight(
                f"{n.outputs[0]}:ones", np.ones((c * od, 1, *g.kernel[1:]), npdt), n.low.subgraph
            )
            y = n.emit_temp(
                Op.CONV2D, [x, ones], planes, dt, [c * od, *g.hw_attrs(extra)], f":p{kd}"
            )
            op, fn = Op.ADD, []
        acc = y if acc is None else n.emit_temp(op, [acc, y], planes, dt, fn, f":a{kd}")
    assert acc is not None
    acc = b.view(acc, (nn, c, od, oh, ow), f"{n.outputs[0]}:5d")
    if kind == 0:
        n.set_view(acc, (nn, c, od, oh, ow))
        return
    include = bool(n.attr("count_include_pad", 0))
    counts = [
        _window_counts(
            src[2 + i],
            g.out[i],
            g.kernel[i],
            g.strides[i],
            g.dils[i],
            g.begin[i],
            g.end[i],
            include,
        )
        for i in range(3)
    ]
    count = counts[0][:, None, None] * counts[1][None, :, None] * counts[2][None, None, :]
    npdt = np.float16 if dt == DType.FLOAT16 else np.float32
    div = b.weight(f"{n.outputs[0]}:count", count.astype(npdt), n.low.subgraph)
    n.emit(Op.DIV, [acc, div], (nn, c, od, oh, ow), dt)


def _window_counts(
    size: int, out: int, k: int, s: int, d: int, begin: int, end: int, include_pad: bool
) -> np.ndarray:
    """Elements each window covers along one dim: inside the input, or inside the padded input
    when padding counts (a ceil_mode overhang beyond the padding never counts)."""
    lo, hi = (-begin, size + end) if include_pad else (0, size)
    p = np.arange(out)[:, None] * s - begin + np.arange(k)[None, :] * d
    return ((p >= lo) & (p < hi)).sum(axis=1).astype(np.float64)
