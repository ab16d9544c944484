"""Reference kernels: gathers and scatters with run-time indices (see numpy_interp).

Indices are int32 or int64; an index outside [-n, n) raises InvalidArgumentError (the C kernels
fail the instruction with IPU_ERR_INVALID_ARGUMENT), negative ones wrap. Scatters apply updates
in the indices' flat order: with reduction NONE a repeated destination keeps the last update;
reductions combine one update at a time in the data dtype (float16 rounds after each step).
"""

from __future__ import annotations

import math

import numpy as np

from pyipu.compiler.ir import Instr
from pyipu.enums import Op
from pyipu.errors import InvalidArgumentError
from pyipu.reference.numpy_interp import kernel

# SCATTER_* attribute `reduction` (docs/bytecode.md).
REDUCTIONS = ("none", "add", "mul", "max", "min")
_UFUNCS = {1: np.add, 2: np.multiply, 3: np.maximum, 4: np.minimum}


def wrap_indices(idx: np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """int64 indices wrapped into [0, n); InvalidArgumentError naming the first bad one."""
    i = idx.astype(np.int64)
    bad = (i < -n) | (i >= n)
    if np.any(bad):
        pos = int(np.flatnonzero(bad.reshape(-1))[0])  # bad has i's shape: n broadcasts
        nn = int(np.broadcast_to(n, i.shape).reshape(-1)[pos])
        raise InvalidArgumentError(
            f"index {int(i.reshape(-1)[pos])} (element {pos} of the indices) is out of range "
            f"[{-nn}, {nn})"
        )
    return np.where(i < 0, i + n, i)


@kernel(Op.GATHER)
def gather(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    outer, n, inner = (int(a) for a in ins.attrs)
    data, idx = xs
    w = wrap_indices(idx, n)
    return data.reshape(outer, n, inner)[:, w.reshape(-1), :]


@kernel(Op.GATHER_ELEMENTS)
def gather_elements(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    axis = int(ins.attrs[0])
    data, idx = xs
    w = wrap_indices(idx, data.shape[axis])
    # off the axis, indices may be smaller than data: take the matching corner of data
    corner = tuple(slice(None) if d == axis else slice(0, s) for d, s in enumerate(idx.shape))
    return np.take_along_axis(data[corner], w, axis)


def _nd_rows(dshape: tuple[int, ...], idx: np.ndarray) -> tuple[np.ndarray, int]:
    """Flat row numbers of the [k]-tuples of `idx` in data dims dshape[:k], and k."""
    k = idx.shape[-1]
    w = wrap_indices(idx.reshape(-1, k), np.array(dshape[:k], dtype=np.int64))
    return np.ravel_multi_index(tuple(w.T), dshape[:k]), k


@kernel(Op.GATHER_ND)
def gather_nd(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    b = int(ins.attrs[0])
    data, idx = xs
    batch = math.prod(data.shape[:b])
    k = idx.shape[-1]
    dshape = data.shape[b:]
    rows, _ = _nd_rows(dshape, idx.reshape(batch, -1, k))
    rows = rows.reshape(batch, -1)
    d2 = data.reshape(batch, math.prod(dshape[:k]), -1)
    return d2[np.arange(batch)[:, None], rows]


def _scatter(y: np.ndarray, flat: np.ndarray, upd: np.ndarray, reduction: int) -> np.ndarray:
    """y (viewed as [rows, cols]) with update rows upd[i] applied at rows flat[i], in order."""
    y2 = y.reshape(-1, upd.shape[1]) if upd.ndim == 2 else y.reshape(-1)
    if reduction == 0:
        # last write wins: keep each destination's last update only
        last = len(flat) - 1 - np.unique(flat[::-1], return_index=True)[1]
        y2[flat[last]] = upd[last]
    else:
        _UFUNCS[reduction].at(y2, flat, upd)
    return y


@kernel(Op.SCATTER_ELEMENTS)
def scatter_elements(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    axis, reduction = (int(a) for a in ins.attrs)
    data, idx, upd = xs
    w = wrap_indices(idx, data.shape[axis])
    coords: list[np.ndarray] = list(np.indices(idx.shape, sparse=False))
    coords[axis] = w
    flat = np.ravel_multi_index(tuple(c.reshape(-1) for c in coords), data.shape)
    return _scatter(data.copy(), flat, upd.reshape(-1), reduction)


@kernel(Op.SCATTER_ND)
def scatter_nd(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    reduction = int(ins.attrs[0])
    data, idx, upd = xs
    rows, k = _nd_rows(data.shape, idx)
    cols = math.prod(data.shape[k:])
    return _scatter(data.copy(), rows, upd.reshape(-1, cols), reduction)
