"""Data-dependent dimensions: a static capacity plus a run-time length.

A value whose size depends on data (NonZero's and NonMaxSuppression's results, and what is
computed from them) is a tensor of static shape whose dimension `axis` is a capacity, the
static upper bound of that dimension. Its true extent is a run-time length, an int64[1] arena
tensor written by the instruction that fixed it (NONZERO, NMS) or computed from another length
(Slice: MIN with the end; Reshape merging dims: MUL by their product). Rows past the length are
padding with defined contents (zeros, or what the ops that carried them computed from zeros).

`lower_dynamic` runs before a node's own lowering when one of its inputs is such a value:

- Shape of it is a symbolic value (`Sym`: one entry per dim, ints and one `Length`); Slice,
  Gather, Concat, Unsqueeze, Squeeze, Reshape, Cast and Identity of symbolic values stay
  symbolic, and Min/Max with constants (a clamped length: MIN/MAX at run time);
  ConstantOfShape, Expand and Reshape read them as their capacities and give their output the
  length; every other reader of a symbolic value is refused.
- The ops that handle their dynamic inputs themselves (NonZero, NonMaxSuppression, RoiAlign:
  ops_detect.py) are lowered as they are.
- Every other node is lowered on the capacities, then the rules below carry the length to its
  outputs: row-wise ops (element-wise, MatMul and Gemm rows, ops along another axis) carry it;
  Gather/GatherND with dynamic indices take the indices' length; Slice of the dynamic axis from
  0 takes MIN(length, end); reshapes that keep the padding at the end of the data scale it.
  An op that would read padding as data (a reduction, softmax or sort along the dynamic axis,
  a convolution...) raises UnsupportedOpError naming it: never a result computed on padding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx

from pyipu.compiler.errors import UnsupportedOpError
from pyipu.enums import BinaryFn, DType, Op

if TYPE_CHECKING:
    from pyipu.compiler.lower import Lowering


@dataclass(frozen=True)
class Dyn:
    """Dimension `axis` of a value is a capacity; `length` (int64[1] tensor) its extent."""

    axis: int
    length: int


@dataclass(frozen=True)
class Length:
    """A symbolic shape entry: the run-time `length` tensor, at most `cap`."""

    length: int
    cap: int


SymEntry = int | Length
Sym = tuple[SymEntry, ...]

# ops that read their dynamic inputs themselves (ops_detect.py)
SELF = frozenset({"NonZero", "NonMaxSuppression", "RoiAlign"})
# ops that may read a run-time input as a bound and give their output a length (TopK's K)
BOUNDED = frozenset({"TopK"})
ELEMENTWISE = frozenset(
    [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Max",
        "Min",
        "Sum",
        "Mean",
        "Greater",
        "Less",
        "Equal",
        "GreaterOrEqual",
        "LessOrEqual",
        "And",
        "Or",
        "Xor",
        "Not",
        "Where",
        "Cast",
        "CastLike",
        "Identity",
        "Relu",
        "Sigmoid",
        "Tanh",
        "Exp",
        "Log",
        "Abs",
        "Neg",
        "Sqrt",
        "Clip",
        "Floor",
        "Ceil",
        "Round",
        "Erf",
        "HardSigmoid",
        "HardSwish",
        "LeakyRelu",
        "Elu",
        "Selu",
        "Softplus",
        "Softsign",
        "Reciprocal",
        "Sign",
        "Mod",
        "IsNaN",
        "IsInf",
        "Sin",
        "Cos",
        "Gelu",
        "Mish",
        "PRelu",
        "ThresholdedRelu",
        "Celu",
        "Shrink",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitwiseNot",
    ]
)
SYM_OPS = frozenset(
    {
        "Slice",
        "Gather",
        "Concat",
        "Unsqueeze",
        "Squeeze",
        "Reshape",
        "Cast",
        "Identity",
        "Min",
        "Max",
    }
)
# Min/Max of a length and a constant: the run-time op and the bound of the result
_CLAMPS = {"Min": (BinaryFn.MIN, min), "Max": (BinaryFn.MAX, max)}


def refuse(label: str, why: str) -> UnsupportedOpError:
    return UnsupportedOpError(
        f"{label}: {why}: pyipu gives data-dependent dimensions a static capacity and a "
        "run-time length, and this op would read the padding past the length as data"
    )


def lower_dynamic(
    low: Lowering, proto: onnx.NodeProto, lower: Callable[[], None], label: str
) -> bool:
    """Lower `proto` when an input has a data-dependent dimension; False when none has."""
    dyn_in = {i: low.dyn[n] for i, n in enumerate(proto.input) if n in low.dyn}
    sym_in = {i: low.sym[n] for i, n in enumerate(proto.input) if n in low.sym}
    op = proto.op_type
    if op == "Shape" and dyn_in:
        _shape(low, proto, dyn_in[0], label)
        return True
    if not dyn_in and not sym_in:
        return False
    if sym_in:
        known = all(i in sym_in or n in low.constants for i, n in enumerate(proto.input) if n)
        symbolic = op in SYM_OPS and not dyn_in and known and (op != "Reshape" or 0 in sym_in)
        if symbolic and _sym_op(low, proto, label):
            return True
        at = 0 if op == "ConstantOfShape" else 1
        if op in ("ConstantOfShape", "Expand", "Reshape") and list(sym_in) == [at]:
            _from_sym(low, proto, at, sym_in[at], lower, label)
            return True
        for name in {proto.input[i] for i in sym_in}:
            _materialize(low, name)
        if not dyn_in:
            return False
    lower()
    if op in SELF or all(o in low.dyn for o in proto.output if o):  # or a function body did
        return True
    _carry(low, proto, dyn_in, label)
    return True


# ---------------------------------------------------------------- symbolic shapes


def _shape(low: Lowering, proto: onnx.NodeProto, d: Dyn, label: str) -> None:
    from pyipu.compiler.lower import Node

    n = Node(low, proto, low.graph.opset, label)
    shape = n.shape(0)
    start, end = int(n.attr("start", 0)), n.attr("end")
    entries: list[SymEntry] = list(shape)
    entries[d.axis] = Length(d.length, shape[d.axis])
    r = len(shape)
    s = max(0, min(r, start + r if start < 0 else start))
    e = r if end is None else max(0, min(r, int(end) + r if int(end) < 0 else int(end)))
    _set_sym(low, proto.output[0], tuple(entries[s:e]))


def _set_sym(low: Lowering, name: str, value: Sym) -> None:
    if all(isinstance(v, int) for v in value):
        low.constants[name] = np.array(value, np.int64)
    else:
        low.sym[name] = value


def _sym_values(low: Lowering, name: str) -> list[SymEntry]:
    if name in low.sym:
        return list(low.sym[name])
    return [int(v) for v in np.asarray(low.constants[name]).reshape(-1)]


def _sym_op(low: Lowering, proto: onnx.NodeProto, label: str) -> bool:
    """A shape computation on symbolic values, kept symbolic; False when it cannot be (the
    value is then computed at run time)."""
    from pyipu.compiler.lower import Node

    n = Node(low, proto, low.graph.opset, label)
    op, x = proto.op_type, _sym_values(low, proto.input[0])
    scalar = False
    if op == "Cast" and n.attr("to") != onnx.TensorProto.INT64:
        return False  # (a shape as floats: computed at run time)
    if op in ("Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape"):  # 1-D or 0-D in and out
        out = x
        if op == "Reshape":
            target = n.const_ints(1, "shape")
            if len(target) > 1 or (target and target[0] not in (-1, len(x))):
                return False
            scalar = not target
        else:
            scalar = op == "Squeeze" or (op != "Unsqueeze" and _is_scalar(low, proto.input[0]))
    elif op in _CLAMPS:
        fn, bound = _CLAMPS[op]
        values = [_sym_values(low, name) for name in proto.input]
        size = max(len(v) for v in values)
        if any(len(v) not in (1, size) for v in values):
            return False
        out = []
        for i in range(size):
            entries = [v[i if len(v) > 1 else 0] for v in values]
            lengths = [e for e in entries if isinstance(e, Length)]
            consts = [e for e in entries if isinstance(e, int)]
            if len(lengths) > 1:
                return False  # of two run-time lengths: computed at run time
            if not lengths:
                out.append(bound(consts))
                continue
            (ln,) = lengths
            if not consts:  # (a Min of one input)
                out.append(ln)
                continue
            c = bound(consts)
            if bound(ln.cap, c) < 0:
                raise refuse(label, f"{op} makes a dimension negative")
            t = _binary(low, fn, ln.length, c, f"{proto.output[0]}:{i}")
            out.append(Length(t, bound(ln.cap, c)))
        scalar = all(_is_scalar(low, name) for name in proto.input)
    elif op == "Concat":
        out = [v for name in proto.input for v in _sym_values(low, name)]
    elif op == "Gather":
        idx = n.const(1, "indices")
        if idx.ndim > 1:
            raise refuse(label, "Gather of a shape by indices of rank > 1")
        out = [x[int(i)] for i in idx.reshape(-1)]
        scalar = idx.ndim == 0
    else:  # Slice
        starts, ends = n.const_ints(1, "starts"), n.const_ints(2, "ends")
        steps = n.const_ints(4, "steps") if n.has_input(4) else [1]
        if len(starts) != 1 or steps != [1]:
            raise refuse(label, "Slice of a shape other than one range with step 1")
        r = len(x)
        s, e = (max(0, min(r, v + r if v < 0 else v)) for v in (starts[0], ends[0]))
        out = x[s:e]
    name = proto.output[0]
    if scalar and len(out) == 1 and isinstance(out[0], int):
        low.constants[name] = np.array(out[0], np.int64)
    elif scalar and len(out) == 1:
        low.sym[name] = tuple(out)
        low.sym_scalars.add(name)
    else:
        _set_sym(low, name, tuple(out))
    return True


def _is_scalar(low: Lowering, name: str) -> bool:
    if name in low.sym:
        return name in low.sym_scalars
    return np.asarray(low.constants[name]).ndim == 0


def _from_sym(
    low: Lowering,
    proto: onnx.NodeProto,
    at: int,
    value: Sym,
    lower: Callable[[], None],
    label: str,
) -> None:
    """ConstantOfShape, Expand, Reshape to a symbolic shape: lowered on its capacities."""
    lengths = [(i, v) for i, v in enumerate(value) if isinstance(v, Length)]
    if len(lengths) != 1:
        raise refuse(label, f"{proto.op_type} to a shape with several data-dependent dims")
    axis, entry = lengths[0]
    name = proto.input[at]
    caps = np.array([v.cap if isinstance(v, Length) else v for v in value], np.int64)
    del low.sym[name]
    low.constants[name] = caps
    try:
        if proto.op_type == "Reshape" and proto.input[0] in low.dyn:
            d = low.dyn[proto.input[0]]
            shape = low.spec(proto.input[0])[1]
            if math.prod(shape[: d.axis]) != math.prod(int(c) for c in caps[:axis]):
                raise refuse(label, "Reshape that moves the data-dependent dimension")
        lower()
    finally:
        del low.constants[name]
        low.sym[name] = value
    out_rank = len(low.spec(proto.output[0])[1])
    low.dyn[proto.output[0]] = Dyn(axis + out_rank - len(value), entry.length)


# ---------------------------------------------------------------- carrying a length


def _carry(low: Lowering, proto: onnx.NodeProto, dyn_in: dict[int, Dyn], label: str) -> None:
    from pyipu.compiler.lower import Node

    n = Node(low, proto, low.graph.opset, label)
    op = proto.op_type
    outs = [o for o in proto.output if o]
    out_shape = low.spec(outs[0])[1]
    r = len(out_shape)
    rank = [len(low.spec(name)[1]) if name else 0 for name in proto.input]
    result: Dyn | None = None
    if op in ELEMENTWISE:
        axes = {d.axis + r - rank[i] for i, d in dyn_in.items()}
        lens = {d.length for d in dyn_in.values()}
        if len(axes) != 1 or len(lens) != 1:
            raise refuse(label, f"{op} of values with different data-dependent dims")
        (axis,) = axes
        for i, name in enumerate(proto.input):
            if name and i not in dyn_in:
                k = axis - (r - rank[i])
                if k >= 0 and low.spec(name)[1][k] != 1:
                    raise refuse(label, f"{op} of a padded value and a static one along its dim")
        result = Dyn(axis, lens.pop())
    elif op in ("Softmax", "LogSoftmax", "Hardmax", "ArgMax", "ArgMin", "CumSum", "TopK",
                "LpNormalization"):  # fmt: skip
        d = _only(dyn_in, 0, label, op)
        default = -1 if op not in ("ArgMax", "ArgMin") and n.opset >= 13 else 1
        if op in ("ArgMax", "ArgMin"):
            default = 0
        axis = n.axis(int(n.attr("axis", default)), rank[0])
        if op == "CumSum":
            axis = n.axis(int(n.const_int(1, "axis")), rank[0])
        flat = op in ("Softmax", "LogSoftmax", "Hardmax") and n.opset < 13
        if axis == d.axis or (flat and axis <= d.axis):
            raise refuse(label, f"{op} along the data-dependent dimension")
        keep = op not in ("ArgMax", "ArgMin") or int(n.attr("keepdims", 1))
        result = Dyn(d.axis - (0 if keep or d.axis < axis else 1), d.length)
    elif op in ("Unsqueeze", "Squeeze", "Reshape", "Flatten"):
        d = _only(dyn_in, 0, label, op)
        result = _reshaped(low, d, low.spec(proto.input[0])[1], out_shape, label)
    elif op == "Transpose":
        d = _only(dyn_in, 0, label, op)
        perm = list(n.attr("perm", list(range(rank[0]))[::-1]))
        result = Dyn(perm.index(d.axis), d.length)
    elif op in ("MatMul", "Gemm"):
        d = _only(dyn_in, 0, label, op)
        trans = op == "Gemm" and int(n.attr("transA", 0))
        if trans or d.axis >= rank[0] - 1 or (op == "Gemm" and 2 in dyn_in):
            raise refuse(label, f"{op} summing over the data-dependent dimension")
        if op == "Gemm" and n.has_input(2):
            c = low.spec(proto.input[2])[1]
            if len(c) == 2 and c[0] != 1:
                raise refuse(label, "Gemm with a C of one row per padded row")
        result = Dyn(d.axis + r - rank[0], d.length)
    elif op == "Gather":
        result = _gather(n, dyn_in, rank, label)
    elif op == "GatherND":
        if 1 not in dyn_in or int(n.attr("batch_dims", 0)):
            raise refuse(label, "GatherND of padded data by static indices")
        d = dyn_in[1]
        if d.axis >= rank[1] - 1:
            raise refuse(label, "GatherND with a data-dependent index length")
        result = d
    elif op == "Slice":
        result = _slice(low, n, _only(dyn_in, 0, label, op), rank[0], label)
    elif op == "Concat":
        axis = n.axis(int(n.attr("axis")), r)
        lens = {d.length for d in dyn_in.values()}
        axes = {d.axis for d in dyn_in.values()}
        if len(dyn_in) != len([i for i in proto.input if i]) or len(lens) != 1 or axes == {axis}:
            raise refuse(label, "Concat of padded values along or with static ones")
        result = Dyn(axes.pop(), lens.pop())
    else:
        raise refuse(label, f"{op} of a value with a data-dependent dimension is not supported")
    for o in outs:
        low.dyn[o] = result


def _only(dyn_in: dict[int, Dyn], i: int, label: str, op: str) -> Dyn:
    if list(dyn_in) != [i]:
        raise refuse(label, f"{op} with a data-dependent dimension in input {sorted(dyn_in)}")
    return dyn_in[i]


def _gather(n, dyn_in: dict[int, Dyn], rank: Sequence[int], label: str) -> Dyn:  # noqa: ANN001
    """Indices valid for the true extents pick the same elements of the padded data, as the
    padding is at the end of the dynamic dim; a negative index would count from the capacity,
    so data gathered along its dynamic dim needs padded (run-time, never negative) indices or
    non-negative constant ones."""
    axis = n.axis(int(n.attr("axis", 0)), rank[0])
    if 0 in dyn_in and dyn_in[0].axis == axis:
        _check_indices(n, 1 in dyn_in, label)
    if 1 in dyn_in:  # the indices' padding rows gather row 0 (or whatever they hold)
        d = dyn_in[1]
        if 0 in dyn_in and dyn_in[0].axis != axis:
            raise refuse(label, "Gather of padded data by padded indices along another axis")
        return Dyn(axis + d.axis, d.length)
    d = dyn_in[0]
    if d.axis == axis:
        raise refuse(label, "Gather along the data-dependent dimension by static indices")
    return Dyn(d.axis if d.axis < axis else d.axis + rank[1] - 1, d.length)


def _check_indices(n, padded: bool, label: str) -> None:  # noqa: ANN001
    if padded:
        return
    name = n.inputs[1]
    if name not in n.low.constants or (np.asarray(n.low.constants[name]) < 0).any():
        raise refuse(label, "indexing a padded dimension by indices that may be negative")


def _slice(low: Lowering, n, d: Dyn, rank: int, label: str) -> Dyn:  # noqa: ANN001
    starts, ends = n.const_ints(1, "starts"), n.const_ints(2, "ends")
    axes = n.const_ints(3, "axes") if n.has_input(3) else list(range(len(starts)))
    steps = n.const_ints(4, "steps") if n.has_input(4) else [1] * len(starts)
    axes = [a + rank if a < 0 else a for a in axes]
    if d.axis not in axes:
        return d
    k = axes.index(d.axis)
    if starts[k] != 0 or steps[k] != 1 or ends[k] < 0:
        raise refuse(label, "Slice of the data-dependent dimension other than [0:end]")
    return Dyn(d.axis, _binary(low, BinaryFn.MIN, d.length, ends[k], n.outputs[0] + ":length"))


def _binary(low: Lowering, fn: BinaryFn | None, a: int, value: int, name: str) -> int:
    """fn(length a, constant value) (None: their product), once per pair."""
    key = ("binary", -1 if fn is None else int(fn), a, value)
    if key not in low.dyn_cache:
        b = low.b.weight(f"{name}:{value}", np.array([value], np.int64), low.subgraph)
        t = low.b.add(name, DType.INT64, (1,), low.subgraph)
        if fn is None:
            low.b.emit(low.subgraph, Op.MUL, [a, b], [t])
        else:
            low.b.emit(low.subgraph, Op.BINARY, [a, b], [t], [int(fn)])
        low.dyn_cache[key] = t
    return low.dyn_cache[key]


def _reshaped(low: Lowering, d: Dyn, src: Sequence[int], out: Sequence[int], label: str) -> Dyn:
    """The dynamic dim of a reshape of `src`: the padding must stay at the end of each block
    of the dims before the dynamic one, and the dims after it may merge into it."""
    before, inner = math.prod(src[: d.axis]), math.prod(src[d.axis + 1 :])
    acc = 1
    for b, size in enumerate(out):
        if acc == before and size > 1:
            inner_out = math.prod(out[b + 1 :])
            if inner % inner_out == 0 and size == src[d.axis] * (inner // inner_out):
                mult = inner // inner_out
                if mult == 1:
                    return Dyn(b, d.length)
                name = f"{low.b.tensors[d.length].name}:x"
                return Dyn(b, _binary(low, None, d.length, mult, name))
            break
        acc *= size
        if acc > before:
            break
    if src[d.axis] == 1:  # capacity 1: where the 1 goes is free
        for b, size in enumerate(out):
            if size == 1 and math.prod(out[:b]) == before:
                return Dyn(b, d.length)
    raise refuse(label, f"reshape of {list(src)} (dim {d.axis} data-dependent) to {list(out)}")


def run_time_k(n, cap: int) -> int:  # noqa: ANN001
    """TopK's run-time K as a length: K clamped to [0, cap] (ONNX requires K <= the axis; the
    top `cap` are computed and the first K of them are the result)."""
    low = n.low
    if n.dtype(1) != DType.INT64 or math.prod(n.shape(1)) != 1:
        n.shape_error("K must be one int64")
    if n.inputs[1] in low.dyn:
        raise refuse(n.label, "K is a value with a data-dependent dimension")
    k = n.input(1)
    if n.shape(1) != (1,):
        k = low.b.view(k, (1,), n.inputs[1] + ":k")
    name = f"{n.outputs[0] or n.outputs[1]}:k"
    return _binary(low, BinaryFn.MIN, _binary(low, BinaryFn.MAX, k, 0, name + "0"), cap, name)


def _materialize(low: Lowering, name: str) -> None:
    """A symbolic value as a run-time int64 tensor (for a reader that computes with it: Min,
    Sub, TopK's K...): its constant entries and lengths concatenated."""
    if name in low.values:
        return
    parts = []
    for i, v in enumerate(low.sym[name]):
        if isinstance(v, Length):
            parts.append(v.length)
        else:
            parts.append(low.b.weight(f"{name}:{i}", np.array([v], np.int64), low.subgraph))
    n = len(parts)
    t = low.b.add(name if name not in low.sym_scalars else name + ":1", DType.INT64, (n,),
                  low.subgraph)  # fmt: skip
    low.b.emit(low.subgraph, Op.CONCAT, parts, [t], [0])
    low.values[name] = low.b.view(t, (), name) if name in low.sym_scalars else t
