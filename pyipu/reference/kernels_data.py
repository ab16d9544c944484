"""Reference kernels: data movement by index (see numpy_interp)."""

from __future__ import annotations

import itertools

import numpy as np

from pyipu.compiler.ir import Instr, bits_f64
from pyipu.enums import Op
from pyipu.reference.numpy_interp import kernel


def _rows(table: np.ndarray, dims: tuple[int, ...], taps: tuple[int, ...]) -> list[np.ndarray]:
    """The table split per output dim: [y_d, taps_d] blocks."""
    out, k = [], 0
    flat = table.reshape(-1)
    for n, t in zip(dims, taps, strict=True):
        out.append(flat[k : k + n * t].reshape(n, t))
        k += n * t
    return out


def _grid(parts: list[np.ndarray]) -> list[np.ndarray]:
    """Per-dim vectors broadcast against each other over the output shape."""
    r = len(parts)
    return [p.reshape((1,) * d + (-1,) + (1,) * (r - d - 1)) for d, p in enumerate(parts)]


@kernel(Op.REINDEX)
def reindex(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """y[i] = pad if any table_d[i_d] < 0 else x.flat[sum_d table_d[i_d] * s_d]."""
    x, table = xs
    strides = [int(s) for s in ins.attrs[1:]]
    es = x.dtype.itemsize
    pad = np.frombuffer(int(ins.attrs[0] & (2**64 - 1)).to_bytes(8, "little")[:es], x.dtype)[0]
    rows = [r[:, 0] for r in _rows(table, y.shape, (1,) * y.ndim)]
    idx = _grid(rows)
    outside = np.zeros(y.shape, bool)
    off = np.zeros(y.shape, np.int64)
    for d, i in enumerate(idx):
        outside |= i < 0
        off = off + np.maximum(i, 0) * strides[d]
    flat = x.reshape(-1)
    got = flat[np.where(outside, 0, off)] if flat.size else np.zeros(y.shape, x.dtype)
    return np.where(outside, pad, got).astype(x.dtype)


@kernel(Op.INTERP)
def interp(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """y[i] = sum over tap combinations of prod_d w_d[i_d, t_d] * x.flat[sum_d idx_d * s_d];
    an index whose taps are -1 is extrapolated (y = extrapolation value). float32 arithmetic."""
    x, idx, w = xs
    r = y.ndim
    taps = tuple(int(t) for t in ins.attrs[1 : 1 + r])
    strides = [int(s) for s in ins.attrs[1 + r : 1 + 2 * r]]
    idx_d = _rows(idx, y.shape, taps)
    w_d = _rows(w.astype(np.float32), y.shape, taps)
    flat = x.reshape(-1).astype(np.float32)
    acc = np.zeros(y.shape, np.float32)
    for combo in itertools.product(*(range(t) for t in taps)):
        off = sum(
            g
            for g in _grid(
                [np.maximum(i[:, t], 0) * s for i, t, s in zip(idx_d, combo, strides, strict=True)]
            )
        )
        wt = np.float32(1)
        for g in _grid([wd[:, t] for wd, t in zip(w_d, combo, strict=True)]):
            wt = wt * g
        acc = acc + wt * flat[off]
    ext = np.zeros(y.shape, bool)
    for g in _grid([i[:, 0] < 0 for i in idx_d]):
        ext = ext | g
    return np.where(ext, np.float32(bits_f64(ins.attrs[0])), acc)
