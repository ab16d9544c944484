"""DFT as a matrix product (see ops.py): with static shapes, a DFT of length N over one axis is
one MATMUL of the (real, imaginary) pairs of the signal by a constant [L·c, K·2] matrix of
cosines and sines, built at compile time in float64 (c = 1 for a real, 2 for a complex input;
K = N, or N/2 + 1 when onesided). Zero-padding to dft_length and truncation are rows of zeros or
rows left out of that matrix; the inverse conjugates and scales by 1/N."""

from __future__ import annotations

import math

import numpy as np

from pyipu.compiler.ir import FLOAT_DTYPES
from pyipu.compiler.lower import Node
from pyipu.compiler.ops import register
from pyipu.enums import DType, Op


def dft_matrix(length: int, comps: int, n: int, k_out: int, inverse: bool) -> np.ndarray:
    """[length·comps, k_out·2]: row (l, r) holds how component r of x[l] adds to each output."""
    l_idx = np.arange(min(length, n))[:, None]
    k_idx = np.arange(k_out)[None, :]
    theta = (1.0 if inverse else -1.0) * 2.0 * math.pi * ((l_idx * k_idx) % n) / n
    c, s = np.cos(theta), np.sin(theta)
    m = np.zeros((length, comps, k_out, 2))
    m[: l_idx.shape[0], 0, :, 0], m[: l_idx.shape[0], 0, :, 1] = c, s
    if comps == 2:
        m[: l_idx.shape[0], 1, :, 0], m[: l_idx.shape[0], 1, :, 1] = -s, c
    if inverse:
        m /= n
    return m.reshape(length * comps, k_out * 2)


@register("DFT", 17, 20)
def DFT(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(FLOAT_DTYPES, 0)
    src = n.shape(0)
    if len(src) < 3 or src[-1] not in (1, 2):
        n.shape_error(f"input {list(src)} must be [batch, ..., signal, 1 or 2]")
    if n.opset >= 20:
        axis = n.const_int(2, "axis") if n.has_input(2) else -2
    else:
        axis = int(n.attr("axis", 1))
    axis = n.axis(axis, len(src))
    if axis in (0, len(src) - 1):
        n.shape_error(f"axis {axis} must be a signal axis (not the batch or the last dim)")
    inverse, onesided = bool(n.attr("inverse", 0)), bool(n.attr("onesided", 0))
    if onesided and (inverse or src[-1] == 2):
        n.fail("onesided is only supported for a forward DFT of a real signal")
    length, comps = src[axis], src[-1]
    size = n.const_int(1, "dft_length") if n.has_input(1) else length
    if size < 1:
        n.shape_error(f"dft_length {size} must be positive")
    k_out = size // 2 + 1 if onesided else size
    n.check_table(length * comps * k_out * 2, f"dft_length {size}")
    # signal axis next to the components: x -> [rest..., length, comps] -> [B, length·comps]
    rest = [d for i, d in enumerate(src[:-1]) if i != axis]
    perm = [i for i in range(len(src) - 1) if i != axis] + [axis, len(src) - 1]
    x = n.input(0)
    if perm != list(range(len(src))):
        moved = [src[p] for p in perm]
        x = n.emit_temp(Op.TRANSPOSE, [x], moved, dt, perm, ":signal_last")
    b = n.low.b
    rows = math.prod(rest)
    x2 = b.view(x, (rows, length * comps), n.outputs[0] + ":rows")
    npdt = np.float16 if dt == DType.FLOAT16 else np.float32
    m = dft_matrix(length, comps, size, k_out, inverse).astype(npdt)
    w = b.weight(n.outputs[0] + ":dft", m, n.low.subgraph)
    y = n.emit_temp(Op.MATMUL, [x2, w], (rows, k_out * 2), dt, suffix=":mm")
    out_moved = (*rest, k_out, 2)
    y = b.view(y, out_moved, n.outputs[0] + ":moved")
    back = [perm.index(i) for i in range(len(src))]
    final = [out_moved[p] for p in back]
    if back == list(range(len(src))):
        n.set_view(y, final)
    else:
        n.emit(Op.TRANSPOSE, [y], final, dt, back)
