"""ONNX op lowerings: reductions, arg-reductions, cumulative sums and top-k (see ops.py).

Every op here views its input as [outer, n, inner] and works along the middle axis (opcodes
REDUCE, ARG_REDUCE, CUMSUM, TOPK, LOG_SOFTMAX, HARDMAX; docs/bytecode.md). Reductions over
several axes that are not adjacent transpose them last first. LpNormalization is composed
(REDUCE + DIV).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pyipu.compiler.dynamic import Dyn, run_time_k
from pyipu.compiler.ir import ALL_DTYPES, FLOAT_DTYPES
from pyipu.compiler.lower import Node
from pyipu.compiler.ops import LowerFn, register
from pyipu.enums import BinaryFn, DType, Op, ReduceFn

# dtypes with a sum (REDUCE arithmetic functions) and with an order (MAX/MIN, ArgMax, TopK).
# int8/uint8/uint32 light up once they are in ALL_DTYPES.
ARITH_DTYPES = frozenset({DType.FLOAT32, DType.FLOAT16, DType.INT32, DType.INT64})
ORDERED_DTYPES = ARITH_DTYPES | (frozenset({DType.INT8, DType.UINT8, DType.UINT32}) & ALL_DTYPES)


def _layout(n: Node, src: Sequence[int], red: list[int]) -> tuple[int, int, int, int]:
    """(tensor, outer, n, inner) reducing the sorted axes `red` of input 0: a TRANSPOSE
    moves them last when they are not adjacent (size-1 axes do not count)."""
    x = n.input(0)
    big = [a for a in red if src[a] != 1]  # size-1 axes reduce nothing
    if not big:
        return x, math.prod(src), 1, 1
    if all(src[i] == 1 or i in red for i in range(big[0], big[-1] + 1)):
        red_n = math.prod(src[a] for a in big)
        return x, math.prod(src[: big[0]]), red_n, math.prod(src[big[-1] + 1 :])
    kept = [i for i in range(len(src)) if i not in red]
    perm = kept + red
    t = n.emit_temp(Op.TRANSPOSE, [x], [src[p] for p in perm], n.dtype(0), perm, ":transposed")
    return t, math.prod(src[i] for i in kept), math.prod(src[a] for a in red), 1


def _reduce_axes(n: Node, axes_input_since: int) -> list[int] | None:
    """The reduced axes (attribute before `axes_input_since`, constant input 1 from it), or
    None for "all"; [] means no-op (noop_with_empty_axes)."""
    if n.opset < axes_input_since:
        a = n.attr("axes")
        return None if a is None or len(a) == 0 else [int(v) for v in a]
    axes = n.const_ints(1, "axes") if n.has_input(1) else []
    if not axes:
        return [] if n.attr("noop_with_empty_axes", 0) else None
    return axes


def _reduce(fn: ReduceFn, axes_input_since: int, dtypes: frozenset[DType]) -> LowerFn:
    def lower(n: Node) -> None:
        dt = n.check_dtype(dtypes, 0)
        src = n.shape(0)
        axes = _reduce_axes(n, axes_input_since)
        if axes == []:  # no-op: f applied to each element alone (ONNX: axes=() in numpy)
            if fn in (ReduceFn.SUM, ReduceFn.MEAN, ReduceFn.MAX, ReduceFn.MIN):
                n.set_view(n.input(0), src)
            else:
                n.emit(Op.REDUCE, [n.input(0)], src, dt, [int(fn), math.prod(src), 1, 1])
            return
        rank = len(src)
        red = sorted({n.axis(a, rank) for a in axes}) if axes is not None else list(range(rank))
        if axes is not None and len(red) != len(axes):
            n.shape_error(f"axes {axes} repeat an axis")
        keep = bool(n.attr("keepdims", 1))
        out = [1 if i in red else d for i, d in enumerate(src) if keep or i not in red]
        x, outer, red_n, inner = _layout(n, src, red)
        n.emit(Op.REDUCE, [x], out, dt, [int(fn), outer, red_n, inner])

    return lower


_MAXMIN_OLD = ORDERED_DTYPES - {DType.INT8, DType.UINT8}  # int8/uint8 from opset 12
for _name, _fn in (("ReduceMax", ReduceFn.MAX), ("ReduceMin", ReduceFn.MIN)):
    register(_name, 1, 11)(_reduce(_fn, 18, _MAXMIN_OLD))
    register(_name, 12, 13)(_reduce(_fn, 18, ORDERED_DTYPES))
    register(_name, 18)(_reduce(_fn, 18, ORDERED_DTYPES))
    register(_name, 20)(_reduce(_fn, 18, ORDERED_DTYPES | {DType.BOOL}))
for _name, _fn, _dts in (
    ("ReduceProd", ReduceFn.PROD, ARITH_DTYPES),
    ("ReduceSumSquare", ReduceFn.SUM_SQUARE, ARITH_DTYPES),
    ("ReduceL1", ReduceFn.L1, ARITH_DTYPES),
    ("ReduceL2", ReduceFn.L2, ARITH_DTYPES),
    # integer log-sums would round a logarithm to an integer: floats only
    ("ReduceLogSum", ReduceFn.LOG_SUM, FLOAT_DTYPES),
    ("ReduceLogSumExp", ReduceFn.LOG_SUM_EXP, FLOAT_DTYPES),
):
    register(_name, 1, 11, 13)(_reduce(_fn, 18, _dts))
    register(_name, 18)(_reduce(_fn, 18, _dts))


def _split(n: Node, src: Sequence[int], axis: int) -> list[int]:
    """[outer, n, inner] around `axis`."""
    return [math.prod(src[:axis]), src[axis], math.prod(src[axis + 1 :])]


def _arg(is_min: int) -> LowerFn:
    def lower(n: Node) -> None:
        n.check_dtype(ORDERED_DTYPES, 0)
        src = n.shape(0)
        if not src:
            n.shape_error("input must have rank >= 1")
        axis = n.axis(int(n.attr("axis", 0)), len(src))
        last = int(n.attr("select_last_index", 0)) if n.opset >= 12 else 0
        if last not in (0, 1):
            n.fail(f"select_last_index must be 0 or 1, got {last}")
        keep = bool(n.attr("keepdims", 1))
        out = [1 if i == axis else d for i, d in enumerate(src) if keep or i != axis]
        attrs = [is_min, last, *_split(n, src, axis)]
        n.emit(Op.ARG_REDUCE, [n.input(0)], out, DType.INT64, attrs)

    return lower


register("ArgMax", 1, 11, 12, 13)(_arg(0))
register("ArgMin", 1, 11, 12, 13)(_arg(1))


@register("CumSum", 11, 14)
@register("CumProd", 26)
def CumSum(n: Node) -> None:  # noqa: N802 - registry functions are named after ONNX ops
    dts = ORDERED_DTYPES - {DType.INT8, DType.UINT8}
    dt = n.check_dtype(dts if n.opset >= 14 else dts - {DType.FLOAT16}, 0)
    src = n.shape(0)
    if not src:
        n.shape_error("input must have rank >= 1")
    a = np.asarray(n.const(1, "axis"))
    if a.size != 1 or not np.issubdtype(a.dtype, np.integer):
        n.shape_error(f"axis must be one integer, got {a.dtype} of shape {list(a.shape)}")
    axis = n.axis(int(a.reshape(-1)[0]), len(src))
    flags = []
    for name in ("exclusive", "reverse"):
        v = int(n.attr(name, 0))
        if v not in (0, 1):
            n.fail(f"{name} must be 0 or 1, got {v}")
        flags.append(v)
    op = Op.CUMPROD if n.op_type == "CumProd" else Op.CUMSUM
    n.emit(op, [n.input(0)], src, dt, [*_split(n, src, axis), *flags])


@register("TopK", 1, 10, 11)
def TopK(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(ORDERED_DTYPES, 0)
    src = n.shape(0)
    if not src:
        n.shape_error("input must have rank >= 1")
    axis = n.axis(int(n.attr("axis", -1)), len(src))
    length = None
    if n.opset < 10:
        k = int(n.attr("k"))
    elif n.inputs[1] not in n.low.constants and not _declares_k(n, axis):
        # K known at run time: the axis is its capacity (a graph output declaring the extent
        # along axis asks for K's value at compile time instead: const_int's error)
        k, length = src[axis], run_time_k(n, src[axis])
    else:
        k = n.const_int(1, "K")
    if not 1 <= k <= src[axis]:
        n.shape_error(f"k = {k} outside [1, {src[axis]}] (axis {axis} of {list(src)})")
    largest, sort = (
        (int(n.attr("largest", 1)), int(n.attr("sorted", 1))) if n.opset >= 11 else (1, 1)
    )
    if largest not in (0, 1) or sort not in (0, 1):
        n.fail(f"largest ({largest}) and sorted ({sort}) must be 0 or 1")
    out = [k if i == axis else d for i, d in enumerate(src)]
    # One instruction writes both outputs; an unused output still gets its storage.
    outs = (n.outputs + ["", ""])[:2]
    stem = outs[0] or outs[1] or n.inputs[0] + ":topk"
    b, sub = n.low.b, n.low.subgraph
    tv = b.add(outs[0] or stem + ":values", dt, out, sub)
    ti = b.add(outs[1] or stem + ":indices", DType.INT64, out, sub)
    # sorted = 0 allows any order: the output is always sorted
    b.emit(sub, Op.TOPK, [n.input(0)], [tv, ti], [*_split(n, src, axis), k, largest, sort])
    for name, t in zip(outs, (tv, ti), strict=True):
        if name:
            n.low.values[name] = t
            if length is not None:
                n.low.dyn[name] = Dyn(axis, length)


def _declares_k(n: Node, axis: int) -> bool:
    """Whether a graph output of this TopK declares a static extent along `axis`."""
    for name in n.outputs:
        dims = n.low.graph.declared.get(name, (0, None))[1] if name else None
        if dims is not None and axis < len(dims) and isinstance(dims[axis], int):
            return True
    return False


def _softmax_like(op: Op) -> LowerFn:
    def lower(n: Node) -> None:
        dt = n.check_dtype(FLOAT_DTYPES, 0)
        src = n.shape(0)
        if n.opset < 13:  # coerced to 2-D at axis: over all dims from axis on
            axis = n.axis(int(n.attr("axis", 1)), len(src))
            attrs = [math.prod(src[:axis]), math.prod(src[axis:]), 1]
        else:
            axis = n.axis(int(n.attr("axis", -1)), len(src))
            attrs = _split(n, src, axis) if src else [1, 1, 1]
        n.emit(op, [n.input(0)], src, dt, attrs)

    return lower


register("LogSoftmax", 1, 11, 13)(_softmax_like(Op.LOG_SOFTMAX))
register("Hardmax", 1, 11, 13)(_softmax_like(Op.HARDMAX))


@register("LpNormalization", 1, 22)
def LpNormalization(n: Node) -> None:  # noqa: N802 - x / ||x||_p along axis; 0 where ||x|| = 0
    dt = n.check_dtype(FLOAT_DTYPES, 0)
    src = n.shape(0)
    if not src:
        n.shape_error("input must have rank >= 1")
    axis = n.axis(int(n.attr("axis", -1)), len(src))
    p = int(n.attr("p", 2))
    if p not in (1, 2):
        n.fail(f"p = {p} is not supported (1 or 2)")
    fn = ReduceFn.L1 if p == 1 else ReduceFn.L2
    norm_shape = [1 if i == axis else d for i, d in enumerate(src)]
    norm = n.emit_temp(
        Op.REDUCE, [n.input(0)], norm_shape, dt, [int(fn), *_split(n, src, axis)], ":norm"
    )
    # ONNX: a zero norm (all of x zero along axis) gives 0, not 0/0: divide by 1 there
    npdt = np.float16 if dt == DType.FLOAT16 else np.float32
    b = n.low.b
    zero = b.weight(n.outputs[0] + ":zero", np.zeros((), npdt), n.low.subgraph)
    one = b.weight(n.outputs[0] + ":one", np.ones((), npdt), n.low.subgraph)
    is0 = n.emit_temp(
        Op.BINARY, [norm, zero], norm_shape, DType.BOOL, [int(BinaryFn.EQUAL)], ":is0"
    )
    safe = n.emit_temp(Op.WHERE, [is0, one, norm], norm_shape, dt, suffix=":safe")
    n.emit(Op.DIV, [n.input(0), safe], src, dt)
