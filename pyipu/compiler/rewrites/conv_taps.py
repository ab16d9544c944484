"""Drop the kernel rows and columns of a convolution that only ever read padding.

A tap (kh, kw) of CONV2D reads input row oh·sh − pt + kh·dh for output row oh. When that row
lies in the padding for every output row, the tap multiplies zeros only: its weights can go,
and the padding before it with them. Dilated convolutions on small maps are the usual case
(DeepLabV3's ASPP branch with dilation 36 on a 28 × 28 map is a 1 × 1 convolution), and so are
3 × 3 convolutions on 1 × 1 or 2 × 2 maps (SSD's last feature maps).

The leading and trailing dead rows (columns) are cut: w[:, :, kh0:kh1 + 1, kw0:kw1 + 1], pads
top −= kh0·dh, bottom −= (KH − 1 − kh1)·dh, which keeps the output's size. Only constant
weights (`constant`: not a variable, not a weight a session may rebind), all finite (a cut
0 · inf would have been NaN), are trimmed, and only where both pads stay non-negative. The
trimmed kernel is a weight of its own; the model's stays, under its name, in the executable.

>>> from pyipu.compiler.lower import GraphBuilder
>>> trim_dead_taps(GraphBuilder(1))
0
"""

from __future__ import annotations

import math

import numpy as np

from pyipu.compiler.ir import Instr
from pyipu.compiler.lower import GraphBuilder
from pyipu.compiler.rewrites import RewriteGraph, constant, rewrite_programs
from pyipu.enums import Op


def trim_dead_taps(b: GraphBuilder) -> int:
    """Trim every CONV2D's dead taps in place; returns the number of instructions removed (0)."""
    return rewrite_programs(b, (_trim_at,))


def live_taps(size: int, out: int, k: int, s: int, d: int, pad: int) -> tuple[int, int] | None:
    """The first and last tap along one axis that reads an input position for some output
    position; None when none does."""
    o = np.arange(out)
    live = [t for t in range(k) if (((p := o * s - pad + t * d) >= 0) & (p < size)).any()]
    return (live[0], live[-1]) if live else None


def _weight(b: GraphBuilder, t: int) -> np.ndarray | None:
    """The constant value of CONV2D's weight t: a weight, or a view of a whole one (a 1-D
    convolution's [M, C, 1, K])."""
    spec, v = b.tensors[t], constant(b, b.root(t))
    if v is None or spec.offset or v.size != math.prod(spec.shape):
        return None
    return v.reshape(spec.shape)


def _trim_at(g: RewriteGraph, prog: list[Instr], stages: list[int], i: int) -> int:
    b, conv = g.b, prog[i]
    if conv.op != Op.CONV2D:
        return 0
    w = _weight(b, conv.inputs[1])
    if w is None:
        return 0
    _, _, h, wd = b.tensors[conv.inputs[0]].shape
    _, _, oh, ow = b.tensors[conv.outputs[0]].shape
    _, sh, sw, dh, dw, pt, pl, pb, pr = conv.attrs[:9]
    kh, kw = w.shape[2:]
    rows = live_taps(h, oh, kh, sh, dh, pt)
    cols = live_taps(wd, ow, kw, sw, dw, pl)
    if rows is None or cols is None or (rows, cols) == ((0, kh - 1), (0, kw - 1)):
        return 0
    (r0, r1), (c0, c1) = rows, cols
    pads = (pt - r0 * dh, pl - c0 * dw, pb - (kh - 1 - r1) * dh, pr - (kw - 1 - c1) * dw)
    kept = w[:, :, r0 : r1 + 1, c0 : c1 + 1]
    if min(pads) < 0 or not np.isfinite(w).all():
        return 0
    name = f"{b.tensors[conv.outputs[0]].name}:taps"
    wt = b.weight(name, np.ascontiguousarray(kept), b.tensors[conv.inputs[1]].subgraph)
    g.reads[b.root(conv.inputs[1])] -= 1
    g.reads[wt] += 1
    attrs = (*conv.attrs[:5], *pads, *conv.attrs[9:])
    prog[i] = Instr(Op.CONV2D, (conv.inputs[0], wt, *conv.inputs[2:]), conv.outputs, attrs)
    return 0
