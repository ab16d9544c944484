"""Reference kernels: reductions, arg-reductions, cumulative sums, top-k (see numpy_interp).

x is viewed as [outer, n, inner] and the op works along the middle axis. Floats (float16 read
as float32) accumulate in float64 and are rounded once on store, as the C kernels
(kernels/reduce2.c) do; integers accumulate in uint64 and wrap to their own type.
"""

from __future__ import annotations

import numpy as np

from pyipu.compiler.ir import Instr
from pyipu.enums import Op, ReduceFn
from pyipu.errors import BadProgramError
from pyipu.reference.numpy_interp import int_div, kernel


def _view(x: np.ndarray, outer: int, n: int, inner: int) -> np.ndarray:
    return x.reshape(outer, n, inner)


def _float(x: np.ndarray) -> bool:
    return bool(np.issubdtype(x.dtype, np.floating))


def _wrap(v: np.ndarray, dt: np.dtype) -> np.ndarray:
    """uint64 accumulators wrapped to dt (sign-extended to int64 for signed types)."""
    return v.astype(dt).astype(np.int64)


def _reduce_float(fn: int, x: np.ndarray) -> np.ndarray:
    d = x.astype(np.float64)
    if fn == ReduceFn.MAX:  # NaN propagates (np.max does)
        return x.max(axis=1)
    if fn == ReduceFn.MIN:
        return x.min(axis=1)
    if fn == ReduceFn.LOG_SUM_EXP:  # stable: max subtracted, added back
        m = x.max(axis=1).astype(np.float64)
        s = np.exp(d - m[:, None, :]).sum(axis=1)
        return np.where(np.isfinite(m), m + np.log(s), m)
    sums = {
        ReduceFn.SUM: lambda: d.sum(axis=1),
        ReduceFn.MEAN: lambda: d.sum(axis=1) / x.shape[1],
        ReduceFn.PROD: lambda: d.prod(axis=1),
        ReduceFn.SUM_SQUARE: lambda: (d * d).sum(axis=1),
        ReduceFn.L1: lambda: np.abs(d).sum(axis=1),
        ReduceFn.L2: lambda: np.sqrt((d * d).sum(axis=1)),
        ReduceFn.LOG_SUM: lambda: np.log(d.sum(axis=1)),
    }
    return sums[ReduceFn(fn)]()


def _reduce_int(fn: int, x: np.ndarray) -> np.ndarray:
    if fn == ReduceFn.MAX:
        return x.max(axis=1)
    if fn == ReduceFn.MIN:
        return x.min(axis=1)
    u = x.astype(np.int64).astype(np.uint64)  # sign-extended, then modulo 2^64
    if fn in (ReduceFn.SUM, ReduceFn.MEAN):
        acc = u.sum(axis=1, dtype=np.uint64)
    elif fn == ReduceFn.PROD:
        acc = u.prod(axis=1, dtype=np.uint64)
    elif fn in (ReduceFn.SUM_SQUARE, ReduceFn.L2):
        acc = (u * u).sum(axis=1, dtype=np.uint64)
    elif fn == ReduceFn.L1:
        acc = np.abs(x.astype(np.int64)).astype(np.uint64).sum(axis=1, dtype=np.uint64)
    else:
        raise BadProgramError(f"reduce function {ReduceFn(fn).name} does not take integers")
    s = _wrap(acc, x.dtype)
    if fn == ReduceFn.MEAN:  # truncating toward zero
        return int_div(s, np.array(x.shape[1], np.int64))
    if fn == ReduceFn.L2:  # sqrt of the wrapped sum of squares, truncated; 0 if negative
        return np.where(s > 0, np.sqrt(np.maximum(s, 0).astype(np.float64)), 0).astype(np.int64)
    return s


@kernel(Op.REDUCE)
def reduce(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    fn, outer, n, inner = (int(a) for a in ins.attrs)
    x = xs[0]
    if x.dtype == np.float16:
        x = x.astype(np.float32)
    if x.dtype == np.bool_:
        x = x.astype(np.uint8)
    x = _view(x, outer, n, inner)
    out = _reduce_float(fn, x) if _float(x) else _reduce_int(fn, x)
    if np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_:
        return out.astype(np.int64).astype(y.dtype)  # wrap (MAX/MIN are already in range)
    return out.astype(np.float32)


def _argbest(x: np.ndarray, is_min: bool, last: bool) -> np.ndarray:
    """Index along axis 1 of the max (min); first on ties or last; NaN wins (numpy's rule)."""
    if last:
        x = x[:, ::-1, :]
    i = x.argmin(axis=1) if is_min else x.argmax(axis=1)
    return (x.shape[1] - 1 - i) if last else i


@kernel(Op.ARG_REDUCE)
def arg_reduce(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    is_min, last, outer, n, inner = (int(a) for a in ins.attrs)
    x = _view(xs[0], outer, n, inner)
    return _argbest(x, bool(is_min), bool(last)).astype(np.int64)


@kernel(Op.HARDMAX)
def hardmax(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    outer, n, inner = (int(a) for a in ins.attrs)
    x = _view(xs[0].astype(np.float32), outer, n, inner)
    i = _argbest(x, False, False)
    return (np.arange(n)[None, :, None] == i[:, None, :]).astype(np.float32)


@kernel(Op.LOG_SOFTMAX)
def log_softmax(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    outer, n, inner = (int(a) for a in ins.attrs)
    x = _view(xs[0].astype(np.float32), outer, n, inner)
    m = x.max(axis=1, keepdims=True).astype(np.float64)
    d = x.astype(np.float64) - m
    return (d - np.log(np.exp(d).sum(axis=1, keepdims=True))).astype(np.float32)


@kernel(Op.CUMSUM)
@kernel(Op.CUMPROD)
def cumsum(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    outer, n, inner, exclusive, reverse = (int(a) for a in ins.attrs)
    x = _view(xs[0], outer, n, inner)
    if reverse:
        x = x[:, ::-1, :]
    scan = np.cumprod if ins.op == Op.CUMPROD else np.cumsum
    acc: np.ndarray
    if _float(x):
        acc = scan(x.astype(np.float64), axis=1)
    else:
        acc = scan(x.astype(np.int64).astype(np.uint64), axis=1, dtype=np.uint64)
    if exclusive:
        first = np.ones_like(acc[:, :1]) if ins.op == Op.CUMPROD else np.zeros_like(acc[:, :1])
        acc = np.concatenate([first, acc[:, :-1]], axis=1)
    if reverse:
        acc = acc[:, ::-1, :]
    return acc.astype(y.dtype)  # float rounding once; integers wrap


@kernel(Op.TOPK)
def topk(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> tuple[np.ndarray, ...]:
    outer, n, inner, k, largest, _sorted = (int(a) for a in ins.attrs)
    x = _view(xs[0], outer, n, inner)
    # Order: values with NaN above +inf, largest (or smallest) first; ties: lower index first.
    # np.lexsort is stable and sorts by its last key first.
    keys: tuple[np.ndarray, ...]
    if _float(x):
        nan = np.isnan(x)
        v = np.where(nan, 0, x).astype(np.float64)
        keys = (-v, ~nan) if largest else (v, nan)
    else:
        vi = x.astype(np.int64)
        keys = (~vi,) if largest else (vi,)  # ~vi reverses the order without overflow
    order = np.lexsort(keys, axis=1)[:, :k, :]
    return np.take_along_axis(x, order, axis=1), order.astype(np.int64)
