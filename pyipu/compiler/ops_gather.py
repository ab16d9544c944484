"""ONNX op lowerings: gathers and scatters with run-time indices, and ops composed from them.

Gather, GatherElements, GatherND, ScatterElements (and the deprecated Scatter) and ScatterND map
to one instruction each (docs/bytecode.md). Their indices may be computed at run time: an index
outside [-n, n) then fails the run with InvalidArgumentError; constant indices are checked here.
OneHot is Where(Equal(indices, range) | Equal(indices, range - depth), on, off), Trilu is
Where(constant mask, x, 0), EyeLike is a constant. Compress, NonZero and Unique have
data-dependent output shapes and are not registered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pyipu.compiler.errors import UnsupportedDTypeError
from pyipu.compiler.ir import ALL_DTYPES, NUMERIC_DTYPES, np_dtype
from pyipu.compiler.lower import Node
from pyipu.compiler.ops import register
from pyipu.enums import BinaryFn, DType, Op

INDEX_DTYPES = frozenset({DType.INT32, DType.INT64})
# SCATTER_* attribute `reduction` and the opset that introduced each ONNX reduction.
REDUCTIONS = {"none": (0, 1), "add": (1, 16), "mul": (2, 16), "max": (3, 18), "min": (4, 18)}


def _index_dtype(n: Node, i: int) -> None:
    if n.dtype(i) not in INDEX_DTYPES:
        raise UnsupportedDTypeError(
            f"{n.label}: indices have dtype {n.dtype(i).name.lower()}, expected int32 or int64"
        )


def _check_const_indices(n: Node, i: int, sizes: Sequence[int] | int) -> None:
    """Constant indices are checked now rather than at run time."""
    name = n.inputs[i]
    if name not in n.low.constants:
        return
    idx = np.asarray(n.low.constants[name], dtype=np.int64)
    lim = np.asarray(sizes, dtype=np.int64)
    bad = (idx < -lim) | (idx >= lim)
    if np.any(bad):
        pos = tuple(int(p) for p in np.argwhere(bad)[0])
        n.shape_error(
            f"index {int(idx[pos])} at {list(pos)} is out of range for a dim of size "
            f"{int(np.broadcast_to(lim, idx.shape)[pos])}"
        )


def _reduction(n: Node) -> int:
    name = n.attr("reduction", "none") or "none"
    if name not in REDUCTIONS or REDUCTIONS[name][1] > n.opset:
        n.fail(f"reduction {name!r} is not defined at opset {n.opset}")
    if name != "none" and n.dtype(0) not in NUMERIC_DTYPES:
        raise UnsupportedDTypeError(
            f"{n.label}: reduction {name!r} on dtype {n.dtype(0).name.lower()} is not supported "
            "(float32, float16, int32, int64 only)"
        )
    return REDUCTIONS[name][0]


# ---------------------------------------------------------------- gathers


@register("Gather", 1, 11, 13)
def Gather(n: Node) -> None:  # noqa: N802 - registry functions are named after ONNX ops
    dt = n.check_dtype(ALL_DTYPES, 0)
    _index_dtype(n, 1)
    src, q = n.shape(0), n.shape(1)
    if not src:
        n.shape_error("data must have rank >= 1")
    axis = n.axis(int(n.attr("axis", 0)), len(src))
    _check_const_indices(n, 1, src[axis])
    attrs = [math.prod(src[:axis]), src[axis], math.prod(src[axis + 1 :])]
    shape = (*src[:axis], *q, *src[axis + 1 :])
    n.emit(Op.GATHER, [n.input(0), n.input(1)], shape, dt, attrs)


@register("GatherElements", 11, 13)
def GatherElements(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(ALL_DTYPES, 0)
    _index_dtype(n, 1)
    src, q = n.shape(0), n.shape(1)
    if not src or len(q) != len(src):
        n.shape_error(f"data {list(src)} and indices {list(q)} must have the same rank >= 1")
    axis = n.axis(int(n.attr("axis", 0)), len(src))
    if any(q[d] > src[d] for d in range(len(src)) if d != axis):
        n.shape_error(f"indices {list(q)} exceed data {list(src)} off axis {axis}")
    _check_const_indices(n, 1, src[axis])
    n.emit(Op.GATHER_ELEMENTS, [n.input(0), n.input(1)], q, dt, [axis])


@register("GatherND", 11, 12, 13)
def GatherND(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(ALL_DTYPES, 0)
    _index_dtype(n, 1)
    src, q = n.shape(0), n.shape(1)
    b = int(n.attr("batch_dims", 0))
    if not q or not 0 <= b < min(len(q), len(src)):
        n.shape_error(f"batch_dims {b} must be in [0, min(rank of indices {list(q)}, data))")
    k = q[-1]
    if not 1 <= k <= len(src) - b:
        n.shape_error(f"indices {list(q)}: last dim must be in [1, {len(src) - b}]")
    if q[:b] != src[:b]:
        n.shape_error(f"batch dims of indices {list(q)} and data {list(src)} differ")
    _check_const_indices(n, 1, src[b : b + k])
    shape = (*q[:-1], *src[b + k :])
    n.emit(Op.GATHER_ND, [n.input(0), n.input(1)], shape, dt, [b])


# ---------------------------------------------------------------- scatters


def _scatter_dtypes(n: Node) -> DType:
    dt = n.check_dtype(ALL_DTYPES, 0, 2)
    _index_dtype(n, 1)
    return dt


@register("ScatterElements", 11, 13, 16, 18)
def ScatterElements(n: Node) -> None:  # noqa: N802 - updates applied in index order
    dt = _scatter_dtypes(n)
    red = _reduction(n)
    src, q, u = n.shape(0), n.shape(1), n.shape(2)
    if not src or len(q) != len(src) or u != q:
        n.shape_error(
            f"data {list(src)}, indices {list(q)} and updates {list(u)}: same rank >= 1, "
            "updates shaped as indices"
        )
    axis = n.axis(int(n.attr("axis", 0)), len(src))
    if any(q[d] > src[d] for d in range(len(src)) if d != axis):
        n.shape_error(f"indices {list(q)} exceed data {list(src)} off axis {axis}")
    _check_const_indices(n, 1, src[axis])
    ins = [n.input(0), n.input(1), n.input(2)]
    n.emit(Op.SCATTER_ELEMENTS, ins, src, dt, [axis, red])


register("Scatter", 9, 11)(ScatterElements)  # deprecated alias (no reduction attribute)


@register("ScatterND", 11, 13, 16, 18)
def ScatterND(n: Node) -> None:  # noqa: N802
    dt = _scatter_dtypes(n)
    red = _reduction(n)
    src, q, u = n.shape(0), n.shape(1), n.shape(2)
    if not q or not 1 <= q[-1] <= len(src):
        n.shape_error(f"indices {list(q)}: last dim must be in [1, rank of data {len(src)}]")
    k = q[-1]
    if u != (*q[:-1], *src[k:]):
        n.shape_error(
            f"updates {list(u)} must be indices.shape[:-1] + data.shape[{k}:] = "
            f"{[*q[:-1], *src[k:]]}"
        )
    _check_const_indices(n, 1, src[:k])
    ins = [n.input(0), n.input(1), n.input(2)]
    n.emit(Op.SCATTER_ND, ins, src, dt, [red])


# ---------------------------------------------------------------- composed ops


def _weight(n: Node, suffix: str, array: np.ndarray) -> int:
    return n.low.b.weight(n.outputs[0] + suffix, array, n.low.subgraph)


@register("OneHot", 9, 11)
def OneHot(n: Node) -> None:  # noqa: N802
    n.check_dtype(NUMERIC_DTYPES | {DType.INT8, DType.UINT8, DType.UINT32}, 0)
    vdt = n.check_dtype(ALL_DTYPES, 2)
    depth_v = np.asarray(n.const(1, "depth")).reshape(-1)
    if depth_v.size != 1:
        n.shape_error(f"depth must hold one value, got shape {list(depth_v.shape)}")
    depth = int(depth_v[0])
    if depth < 1:
        n.shape_error(f"depth {depth} must be >= 1")
    if n.shape(2) != (2,):
        n.shape_error(f"values shape {list(n.shape(2))} must be [2] (off, on)")
    src = n.shape(0)
    n.check_table(depth * math.prod(src), f"depth {depth}")
    axis = n.axis(int(n.attr("axis", -1)), len(src) + 1)
    idx = n.input(0)
    idt = n.dtype(0)
    if idt not in INDEX_DTYPES:  # floats truncate, small ints widen (as onnx.reference)
        idx = n.emit_temp(Op.CAST, [idx], src, DType.INT64, suffix=":onehot_idx")
        idt = DType.INT64
    idx = n.low.b.view(idx, (*src[:axis], 1, *src[axis:]), n.outputs[0] + ":onehot_idx_u")
    shape = (*src[:axis], depth, *src[axis:])
    # [depth, 1, ...] broadcasts against the indices at `axis`; range - depth matches the
    # negative indices, so out-of-range indices match nothing and give `off` everywhere
    rng = np.arange(depth, dtype=np_dtype(idt)).reshape(depth, *([1] * (len(src) - axis)))
    eq = [
        n.emit_temp(
            Op.BINARY,
            [idx, _weight(n, f":onehot_range{i}", rng - depth * i)],
            shape,
            DType.BOOL,
            [int(BinaryFn.EQUAL)],
            f":onehot_eq{i}",
        )
        for i in (0, 1)
    ]
    mask = n.emit_temp(Op.BINARY, eq, shape, DType.BOOL, [int(BinaryFn.OR)], ":onehot_mask")
    if n.inputs[2] in n.low.constants:
        values = np.asarray(n.low.constants[n.inputs[2]])
        off, on = (
            _weight(n, f":onehot_{w}", values[i].reshape(())) for i, w in ((0, "off"), (1, "on"))
        )
    else:  # values computed at run time: pick them out with two GATHERs
        off, on = (
            n.emit_temp(
                Op.GATHER,
                [n.input(2), _weight(n, f":onehot_pick{i}", np.array(i, np.int32))],
                (),
                vdt,
                [1, 2, 1],
                f":onehot_v{i}",
            )
            for i in (0, 1)
        )
    n.emit(Op.WHERE, [mask, on, off], shape, vdt)


@register("Trilu", 14)
def Trilu(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(ALL_DTYPES, 0)
    src = n.shape(0)
    if len(src) < 2:
        n.shape_error(f"input {list(src)} must have rank >= 2")
    k = 0
    if n.has_input(1):
        k = n.const_int(1, "k")
    rows, cols = src[-2:]
    n.check_table(rows * cols, f"shape {list(src)}")
    diff = np.arange(cols)[None, :] - np.arange(rows)[:, None]  # column - row
    mask = diff >= k if int(n.attr("upper", 1)) else diff <= k
    if mask.all():
        n.set_view(n.input(0), src)
        return
    zero = np.zeros((), np_dtype(dt))
    ins = [_weight(n, ":trilu_mask", mask), n.input(0), _weight(n, ":trilu_zero", zero)]
    n.emit(Op.WHERE, ins, src, dt)


@register("EyeLike", 9)
def EyeLike(n: Node) -> None:  # noqa: N802 - depends on the input's shape only
    src = n.shape(0)
    if len(src) != 2:
        n.shape_error(f"input {list(src)} must be 2-D")
    n.check_table(src[0] * src[1], f"shape {list(src)}")
    to = n.attr("dtype")
    try:
        dt = DType(int(to)) if to is not None else n.dtype(0)
    except ValueError:
        dt = None
    if dt not in ALL_DTYPES:
        raise UnsupportedDTypeError(f"{n.label}: output dtype {to} is not supported")
    n.set_const(np.eye(src[0], src[1], int(n.attr("k", 0)), dtype=np_dtype(dt)))
