"""ONNX op lowerings, one function per op type, registered by the opset version they start at.

`REGISTRY[op_type][since_version] = fn`; the lowering used for a model is the one with the largest
`since_version` <= the model's opset. Shapes are static here: every function computes its output
shapes itself and checks its inputs against docs/bytecode.md, failing with the node's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from onnx import TensorProto

from pyipu.compiler.ir import (
    ALL_DTYPES,
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    SIGNED_DTYPES,
    UNSIGNED_DTYPES,
    f64_bits,
    np_dtype,
)
from pyipu.compiler.lower import OP_DOMAINS, Node
from pyipu.enums import BinaryFn, DType, Op, UnaryFn

LowerFn = Callable[[Node], None]
REGISTRY: dict[str, dict[int, LowerFn]] = {}


def register(op_type: str, *since: int, domain: str = "") -> Callable[[LowerFn], LowerFn]:
    """`domain`: an op of a domain other than ONNX's default (its opset versions in `since`)."""

    def deco(fn: LowerFn) -> LowerFn:
        for v in since:
            REGISTRY.setdefault(op_type, {})[v] = fn
        if domain:
            OP_DOMAINS[op_type] = domain
        return fn

    return deco


def _broadcast(n: Node, *shapes: Sequence[int]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        n.shape_error(f"cannot broadcast shapes {[list(s) for s in shapes]}")


def _prod(dims: Sequence[int]) -> int:
    return math.prod(dims)


# ---------------------------------------------------------------- element-wise

# MATMUL and the reductions take these (docs/bytecode.md); the element-wise family takes all
# NUMERIC_DTYPES.
_MM_DTYPES = FLOAT_DTYPES | {DType.INT32, DType.INT64}
# Add/Sub/Mul/Div before opset 14 (14 added the 8- and 16-bit integers).
_ARITH_V7 = FLOAT_DTYPES | {DType.INT32, DType.INT64, DType.UINT32, DType.UINT64}


def _legacy_b(n: Node, has_broadcast_attr: bool = True) -> tuple[int, tuple[int, ...]]:
    """Input 1 and its shape under opset < 7 broadcasting: with `axis`, B's dims line up with
    A's from that axis on (a view with trailing 1s makes that numpy broadcasting)."""
    sa, sb = n.shape(0), n.shape(1)
    if n.opset >= 7:
        return n.input(1), sb
    if has_broadcast_attr and not n.attr("broadcast", 0):
        if sa != sb:
            n.shape_error(f"shapes {list(sa)} and {list(sb)} differ (broadcast=0)")
        return n.input(1), sb
    axis = n.attr("axis")
    if axis is None:
        return n.input(1), sb
    axis = n.axis(int(axis), len(sa))
    if axis + len(sb) > len(sa) or any(b not in (1, sa[axis + i]) for i, b in enumerate(sb)):
        n.shape_error(f"B {list(sb)} does not line up with A {list(sa)} at axis {axis}")
    shape = (*sb, *([1] * (len(sa) - axis - len(sb))))
    return n.low.b.view(n.input(1), shape, n.inputs[1] + ":axis"), shape


def _binary(op: Op) -> LowerFn:
    def lower(n: Node) -> None:
        b, sb = _legacy_b(n)
        dt = n.check_dtype(NUMERIC_DTYPES if n.opset >= 14 else _ARITH_V7, 0, 1)
        shape = _broadcast(n, n.shape(0), sb)
        n.emit(op, [n.input(0), b], shape, dt)

    return lower


for _name, _op in (("Add", Op.ADD), ("Sub", Op.SUB), ("Mul", Op.MUL), ("Div", Op.DIV)):
    register(_name, 1)(_binary(_op))


@register("Relu", 1)
def Relu(n: Node) -> None:  # noqa: N802 - registry functions are named after ONNX ops
    dt = n.check_dtype(FLOAT_DTYPES | SIGNED_DTYPES if n.opset >= 14 else FLOAT_DTYPES, 0)
    n.emit(Op.RELU, [n.input(0)], n.shape(0), dt)


# ---------------------------------------------------------------- UNARY / BINARY / WHERE

BOOL_DTYPES = frozenset({DType.BOOL})


def _floats(_opset: int) -> frozenset[int]:
    return FLOAT_DTYPES


def unary(
    fn: UnaryFn,
    params: Sequence[tuple[str, float]] = (),
    dtypes: Callable[[int], frozenset[int]] = _floats,
    out: DType | None = None,
) -> LowerFn:
    """One UNARY instruction; `dtypes(opset)` are the input dtypes ONNX allows; the float
    attributes `params` (name, ONNX default) go to p0, p1; `out`: a fixed output dtype."""

    def lower(n: Node) -> None:
        dt = n.check_dtype(dtypes(n.opset), 0)
        vals = [f64_bits(float(n.attr(name, default))) for name, default in params]
        vals += [0] * (2 - len(vals))
        n.emit(Op.UNARY, [n.input(0)], n.shape(0), out or dt, [int(fn), *vals])

    return lower


def _since(v: int, new: frozenset[int], old: frozenset[int]) -> Callable[[int], frozenset[int]]:
    return lambda opset: new if opset >= v else old


for _name, _fn, _since_v in (
    ("Sigmoid", UnaryFn.SIGMOID, 1),
    ("Tanh", UnaryFn.TANH, 1),
    ("Exp", UnaryFn.EXP, 1),
    ("Log", UnaryFn.LOG, 1),
    ("Sqrt", UnaryFn.SQRT, 1),
    ("Erf", UnaryFn.ERF, 9),
    ("Reciprocal", UnaryFn.RECIPROCAL, 1),
    ("Sin", UnaryFn.SIN, 7),
    ("Cos", UnaryFn.COS, 7),
    ("Floor", UnaryFn.FLOOR, 1),
    ("Ceil", UnaryFn.CEIL, 1),
    ("Round", UnaryFn.ROUND, 11),
    ("Softplus", UnaryFn.SOFTPLUS, 1),
):
    register(_name, _since_v)(unary(_fn))
register("Neg", 1)(unary(UnaryFn.NEG, dtypes=_since(6, FLOAT_DTYPES | SIGNED_DTYPES, FLOAT_DTYPES)))
register("Abs", 1)(unary(UnaryFn.ABS, dtypes=_since(6, NUMERIC_DTYPES, FLOAT_DTYPES)))
register("Sign", 9)(unary(UnaryFn.SIGN, dtypes=lambda _: NUMERIC_DTYPES))
register("LeakyRelu", 1)(unary(UnaryFn.LEAKY_RELU, (("alpha", 0.01),)))
register("Elu", 1)(unary(UnaryFn.ELU, (("alpha", 1.0),)))
register("HardSigmoid", 1)(unary(UnaryFn.HARD_SIGMOID, (("alpha", 0.2), ("beta", 0.5))))


@register("Not", 1)
def Not(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(BOOL_DTYPES, 0)
    n.emit(Op.UNARY, [n.input(0)], n.shape(0), dt, [int(UnaryFn.NOT), 0, 0])


@register("Clip", 1, 11)
def Clip(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(NUMERIC_DTYPES if n.opset >= 12 else FLOAT_DTYPES, 0)
    floating = dt in FLOAT_DTYPES
    bounds: list[float | int | None] = [None, None]
    if n.opset < 11:
        bounds = [n.attr("min"), n.attr("max")]
    else:
        for i in (1, 2):
            if n.has_input(i):
                if n.dtype(i) != dt:
                    n.fail(f"input {i} has dtype {n.dtype(i).name.lower()}, x {dt.name.lower()}")
                v = np.asarray(n.const(i, ("min", "max")[i - 1]))
                if v.size != 1:
                    n.shape_error(f"input {i} must be a scalar, got shape {list(v.shape)}")
                bounds[i - 1] = v.item()
    if floating:
        lo = -math.inf if bounds[0] is None else float(bounds[0])
        hi = math.inf if bounds[1] is None else float(bounds[1])
        attrs = [f64_bits(lo), f64_bits(hi)]
    elif dt in UNSIGNED_DTYPES:  # compared as uint64: the bounds' bit patterns
        lo = 0 if bounds[0] is None else int(bounds[0])
        hi = int(np.iinfo(np.uint64).max) if bounds[1] is None else int(bounds[1])
        attrs = [v - (1 << 64) if v >= 1 << 63 else v for v in (lo, hi)]
    else:
        info = np.iinfo(np.int64)
        attrs = [
            info.min if bounds[0] is None else int(bounds[0]),
            info.max if bounds[1] is None else int(bounds[1]),
        ]
    n.emit(Op.UNARY, [n.input(0)], n.shape(0), dt, [int(UnaryFn.CLIP), *attrs])


# BINARY functions whose output is bool.
COMPARISONS = frozenset(
    {
        BinaryFn.EQUAL,
        BinaryFn.LESS,
        BinaryFn.GREATER,
        BinaryFn.LESS_EQUAL,
        BinaryFn.GREATER_EQUAL,
    }
)


def _pow_operands(n: Node, dtypes: frozenset[int]) -> tuple[int, int, DType, DType | None]:
    """Pow: (base, exponent, dtype computed in, dtype to cast the result to or None).

    From opset 12 the exponent may have any numeric type: it is cast to the base's type, except
    for an integer base with a float exponent, computed in float32 and cast back (truncating)."""
    a, b = n.input(0), n.input(1)
    dt = n.check_dtype(dtypes, 0)
    eb = n.dtype(1)
    if eb == dt:
        return a, b, dt, None
    if eb not in NUMERIC_DTYPES or n.opset < 12:
        n.check_dtype(dtypes, 0, 1)  # raises: the dtypes differ
    if dt in FLOAT_DTYPES or eb not in FLOAT_DTYPES:
        b = n.emit_temp(Op.CAST, [b], n.shape(1), dt, suffix=":cast")
        return a, b, dt, None
    a = n.emit_temp(Op.CAST, [a], n.shape(0), DType.FLOAT32, suffix=":base_f32")
    if eb != DType.FLOAT32:
        b = n.emit_temp(Op.CAST, [b], n.shape(1), DType.FLOAT32, suffix=":cast")
    return a, b, DType.FLOAT32, dt


def _binary_fn(fn: BinaryFn, dtypes: Callable[[int], frozenset[int]]) -> LowerFn:
    """One BINARY instruction; `dtypes(opset)` are the input dtypes ONNX allows."""

    def lower(n: Node) -> None:
        if fn == BinaryFn.POW and n.opset < 7 and n.attr("axis") is not None:
            n.fail("legacy 'axis' broadcasting (opset < 7) of Pow is not supported")
        b, sb = _legacy_b(n, has_broadcast_attr=fn != BinaryFn.PRELU)
        shape = _broadcast(n, n.shape(0), sb)
        if fn == BinaryFn.POW:
            a, b, dt, back = _pow_operands(n, dtypes(n.opset))
            if back is not None:
                t = n.emit_temp(Op.BINARY, [a, b], shape, dt, [int(fn)], ":pow_f32")
                n.emit(Op.CAST, [t], shape, back)
                return
        else:
            a = n.input(0)
            dt = n.check_dtype(dtypes(n.opset), 0, 1)
        out = DType.BOOL if fn in COMPARISONS else dt
        n.emit(Op.BINARY, [a, b], shape, out, [int(fn)])

    return lower


_INTS = frozenset({DType.INT32, DType.INT64})
register("Pow", 1)(_binary_fn(BinaryFn.POW, _since(12, _MM_DTYPES, FLOAT_DTYPES)))
for _name, _bfn in (("Less", BinaryFn.LESS), ("Greater", BinaryFn.GREATER)):
    register(_name, 1)(_binary_fn(_bfn, _since(9, NUMERIC_DTYPES, FLOAT_DTYPES)))
register("LessOrEqual", 12)(_binary_fn(BinaryFn.LESS_EQUAL, lambda _: NUMERIC_DTYPES))
register("GreaterOrEqual", 12)(_binary_fn(BinaryFn.GREATER_EQUAL, lambda _: NUMERIC_DTYPES))
register("Equal", 1)(
    _binary_fn(BinaryFn.EQUAL, _since(11, NUMERIC_DTYPES | BOOL_DTYPES, _INTS | BOOL_DTYPES))
)
for _name, _bfn in (("And", BinaryFn.AND), ("Or", BinaryFn.OR), ("Xor", BinaryFn.XOR)):
    register(_name, 1)(_binary_fn(_bfn, lambda _: BOOL_DTYPES))


def _variadic(op: Op, attrs: list[int], numeric_since: int | None) -> LowerFn:
    """Min/Max/Sum: n inputs lowered as a chain of two-input instructions; one input is a view.
    Integer inputs are allowed from opset `numeric_since` (None: floats only)."""

    def lower(n: Node) -> None:
        idx = list(range(len(n.inputs)))
        if not idx or not all(n.has_input(i) for i in idx):
            n.fail("every input is required")
        numeric = numeric_since is not None and n.opset >= numeric_since
        dt = n.check_dtype(NUMERIC_DTYPES if numeric else FLOAT_DTYPES, *idx)
        shape = _broadcast(n, *(n.shape(i) for i in idx))
        if len(idx) == 1:
            n.set_view(n.input(0), shape)
            return
        acc, acc_shape = n.input(0), n.shape(0)
        for i in idx[1:]:
            acc_shape = _broadcast(n, acc_shape, n.shape(i))
            ins = [acc, n.input(i)]
            if i == idx[-1]:
                n.emit(op, ins, acc_shape, dt, attrs)
            else:
                acc = n.emit_temp(op, ins, acc_shape, dt, attrs, f":{i}")

    return lower


register("Min", 1)(_variadic(Op.BINARY, [int(BinaryFn.MIN)], 12))
register("Max", 1)(_variadic(Op.BINARY, [int(BinaryFn.MAX)], 12))
register("Sum", 1)(_variadic(Op.ADD, [], None))


@register("Where", 9)
def Where(n: Node) -> None:  # noqa: N802
    n.check_dtype(BOOL_DTYPES, 0)
    dt = n.check_dtype(ALL_DTYPES, 1, 2)
    shape = _broadcast(n, n.shape(0), n.shape(1), n.shape(2))
    n.emit(Op.WHERE, [n.input(0), n.input(1), n.input(2)], shape, dt)


@register("Cast", 1)
def Cast(n: Node) -> None:  # noqa: N802
    src = n.check_dtype(ALL_DTYPES, 0)
    to = n.attr("to")
    if isinstance(to, str):  # opset 1 spelled the type name ("FLOAT")
        to = TensorProto.DataType.Value(to.upper())
    try:
        dst = DType(int(to))
    except ValueError:
        n.fail(f"cast to ONNX type {to} is not supported")
    if dst not in ALL_DTYPES:
        n.fail(f"cast to {dst.name.lower()} is not supported")
    if dst == src:
        n.set_view(n.input(0), n.shape(0))
    else:
        n.emit(Op.CAST, [n.input(0)], n.shape(0), dst)


@register("BitCast", 26)
def BitCast(n: Node) -> None:  # noqa: N802 - same bytes, another dtype of the same width
    src = n.check_dtype(ALL_DTYPES, 0)
    try:
        dst = DType(int(n.attr("to")))
    except (TypeError, ValueError):
        n.fail(f"bit-cast to ONNX type {n.attr('to')} is not supported")
    if dst not in ALL_DTYPES:
        n.fail(f"bit-cast to {dst.name.lower()} is not supported")
    if np_dtype(dst).itemsize != np_dtype(src).itemsize or DType.BOOL in (src, dst):
        n.fail(f"cannot bit-cast {src.name.lower()} to {dst.name.lower()}: widths differ")
    b = n.low.b
    x = n.input(0)
    name = n.outputs[0]
    xt = b.tensors[x]
    t = b.add(name, dst, n.shape(0), n.low.subgraph, xt.kind, base=b.root(x), offset=xt.offset)
    n.low.values[name] = t


# ---------------------------------------------------------------- matrix products


@register("MatMul", 1)
def MatMul(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(_MM_DTYPES, 0, 1)
    sa, sb = n.shape(0), n.shape(1)
    if not sa or not sb:
        n.shape_error(f"cannot matmul {list(sa)} and {list(sb)}: operands must have rank >= 1")
    a, b = n.input(0), n.input(1)
    # The instruction needs rank >= 2: 1-D operands become [1, K] / [K, 1] views.
    if len(sa) == 1:
        sa = (1, *sa)
        a = n.low.b.view(a, sa, n.inputs[0] + ":2d")
    if len(sb) == 1:
        sb = (*sb, 1)
        b = n.low.b.view(b, sb, n.inputs[1] + ":2d")
    if sa[-1] != sb[-2]:
        n.shape_error(f"cannot matmul {list(n.shape(0))} and {list(n.shape(1))}")
    batch = _broadcast(n, sa[:-2], sb[:-2])
    full = (*batch, sa[-2], sb[-1])
    m_dim = n.shape(0)[-2:-1]  # () when A was 1-D
    n_dim = n.shape(1)[-1:] if len(n.shape(1)) > 1 else ()
    final = (*batch, *m_dim, *n_dim)
    if final == full:
        n.emit(Op.MATMUL, [a, b], full, dt)
    else:
        n.set_view(n.emit_temp(Op.MATMUL, [a, b], full, dt, suffix=":2d"), final)


@register("Gemm", 1)
def Gemm(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(FLOAT_DTYPES, *(i for i in range(3) if n.has_input(i)))
    sa, sb = n.shape(0), n.shape(1)
    if len(sa) != 2 or len(sb) != 2:
        n.shape_error(f"A {list(sa)} and B {list(sb)} must be 2-D")
    trans_a, trans_b = int(n.attr("transA", 0)), int(n.attr("transB", 0))
    m, k = (sa[1], sa[0]) if trans_a else sa
    k2, nn = (sb[1], sb[0]) if trans_b else sb
    if k != k2:
        n.shape_error(
            f"cannot gemm A {list(sa)} (transA={trans_a}) and B {list(sb)} (transB={trans_b})"
        )
    inputs = [n.input(0), n.input(1)]
    if n.has_input(2):
        sc = n.shape(2)
        legacy_exact = n.opset < 7 and not n.attr("broadcast", 0)
        if len(sc) > 2 or _broadcast(n, sc, (m, nn)) != (m, nn) or (legacy_exact and sc != (m, nn)):
            n.shape_error(f"C {list(sc)} does not broadcast to [{m}, {nn}]")
        inputs.append(n.input(2))
    attrs = [trans_a, trans_b, f64_bits(n.attr("alpha", 1.0)), f64_bits(n.attr("beta", 1.0))]
    n.emit(Op.GEMM, inputs, (m, nn), dt, attrs)


# ---------------------------------------------------------------- views and data movement


@register("Identity", 1)
def Identity(n: Node) -> None:  # noqa: N802
    n.check_dtype(ALL_DTYPES, 0)
    n.set_view(n.input(0), n.shape(0))


@register("Dropout", 1)
def Dropout(n: Node) -> None:  # noqa: N802 - inference: identity, mask of ones
    if n.opset < 7 and not n.attr("is_test", 0):
        n.fail("training-mode Dropout (is_test=0) is not supported")
    if n.has_input(2) and bool(np.asarray(n.const(2, "training_mode")).item()):
        ratio = float(np.asarray(n.const(1, "ratio")).item()) if n.has_input(1) else 0.5
        if ratio != 0.0:  # random masks: pyipu is an inference runtime
            n.fail(f"training-mode Dropout with ratio {ratio} is not supported (only ratio 0)")
    n.check_dtype(ALL_DTYPES, 0)
    n.set_view(n.input(0), n.shape(0))
    if len(n.outputs) > 1 and n.outputs[1]:
        n.set_const(np.ones(n.shape(0), dtype=bool), out=1)


@register("Reshape", 1, 5)
def Reshape(n: Node) -> None:  # noqa: N802
    n.check_dtype(ALL_DTYPES, 0)
    src = n.shape(0)
    if n.opset < 5:
        target = n.attr("shape")
        if target is None:
            n.fail("attribute 'shape' is required (Reshape-1)")
    else:
        shape_input = np.asarray(n.const(1, "shape"))
        if shape_input.ndim != 1:
            n.shape_error(f"the shape input must be 1-D, not of shape {list(shape_input.shape)}")
        target = n.const_ints(1, "shape")
    allowzero = int(n.attr("allowzero", 0))
    dims = [int(d) for d in target]
    for i, d in enumerate(dims):
        if d == 0 and not allowzero:
            if i >= len(src):
                n.shape_error(f"shape {target}: dim {i} copies a dim the input {list(src)} lacks")
            dims[i] = src[i]
    if dims.count(-1) > 1:
        n.shape_error(f"shape {target} has more than one -1")
    if -1 in dims:
        known = _prod([d for d in dims if d != -1])
        if known == 0 or _prod(src) % known:
            n.shape_error(f"cannot reshape {list(src)} to {target}")
        dims[dims.index(-1)] = _prod(src) // known
    if _prod(dims) != _prod(src) or any(d < 0 for d in dims):
        n.shape_error(f"cannot reshape {list(src)} to {target}")
    n.set_view(n.input(0), dims)


@register("Flatten", 1)
def Flatten(n: Node) -> None:  # noqa: N802
    n.check_dtype(ALL_DTYPES, 0)
    src = n.shape(0)
    axis = int(n.attr("axis", 1))
    axis = axis + len(src) if axis < 0 else axis
    if not 0 <= axis <= len(src):
        n.shape_error(f"axis {n.attr('axis')} is out of range for rank {len(src)}")
    n.set_view(n.input(0), (_prod(src[:axis]), _prod(src[axis:])))


def _axes(n: Node, attr_before: int) -> list[int] | None:
    """Axes from the attribute (opset < attr_before) or from the optional constant input 1."""
    if n.opset < attr_before:
        axes = n.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    if not n.has_input(1):
        return None
    return n.const_ints(1, "axes")


@register("Squeeze", 1, 13)
def Squeeze(n: Node) -> None:  # noqa: N802
    n.check_dtype(ALL_DTYPES, 0)
    src = n.shape(0)
    axes = _axes(n, 13)
    if axes is None:
        drop = {i for i, d in enumerate(src) if d == 1}
    else:
        drop = {n.axis(a, len(src)) for a in axes}
        if any(src[a] != 1 for a in drop):
            n.shape_error(f"cannot squeeze axes {axes} of {list(src)}: dims must be 1")
    n.set_view(n.input(0), [d for i, d in enumerate(src) if i not in drop])


@register("Unsqueeze", 1, 13)
def Unsqueeze(n: Node) -> None:  # noqa: N802
    n.check_dtype(ALL_DTYPES, 0)
    src = n.shape(0)
    axes = _axes(n, 13)
    if axes is None:
        n.fail("axes are required")
    rank = len(src) + len(axes)
    where = {n.axis(a, rank) for a in axes}
    if len(where) != len(axes):
        n.shape_error(f"axes {axes} repeat an axis")
    it = iter(src)
    n.set_view(n.input(0), [1 if i in where else next(it) for i in range(rank)])


@register("Expand", 8)
def Expand(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(ALL_DTYPES, 0)
    target = n.const_ints(1, "shape")
    shape = _broadcast(n, n.shape(0), target)  # ONNX Expand broadcasts both ways
    if shape == n.shape(0):
        n.set_view(n.input(0), shape)
    else:
        n.emit(Op.EXPAND, [n.input(0)], shape, dt)


@register("Concat", 1, 4)
def Concat(n: Node) -> None:  # noqa: N802
    # Zero-size inputs contribute nothing (pyipu has no zero-size tensors).
    idx = [i for i in range(len(n.inputs)) if n.has_input(i) and _prod(n.shape(i)) > 0]
    if not idx:
        n.shape_error("every input is empty")
    dt = n.check_dtype(ALL_DTYPES, *idx)
    rank = len(n.shape(idx[0]))
    if rank == 0:
        n.shape_error("cannot concat scalars (rank 0)")
    axis = n.axis(int(n.attr("axis", 1)), rank)
    first = n.shape(idx[0])
    for i in idx:
        s = n.shape(i)
        if len(s) != rank or any(
            a != b for j, (a, b) in enumerate(zip(s, first, strict=True)) if j != axis
        ):
            n.shape_error(f"cannot concat {[list(n.shape(j)) for j in idx]} on axis {axis}")
    if len(idx) > 255:
        n.fail(f"{len(idx)} inputs (at most 255)")
    shape = list(first)
    shape[axis] = sum(n.shape(i)[axis] for i in idx)
    if len(idx) == 1:
        n.set_view(n.input(idx[0]), shape)
    else:
        n.emit(Op.CONCAT, [n.input(i) for i in idx], shape, dt, [axis])


@register("Transpose", 1)
def Transpose(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(ALL_DTYPES, 0)
    src = n.shape(0)
    perm = n.attr("perm")
    perm = list(reversed(range(len(src)))) if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(len(src))):
        n.shape_error(f"perm {perm} is not a permutation of the {len(src)} axes")
    shape = [src[p] for p in perm]
    moved = [p for p in perm if src[p] != 1]
    if moved == sorted(moved):  # only size-1 dims move: the bytes stay in order
        n.set_view(n.input(0), shape)
    else:
        n.emit(Op.TRANSPOSE, [n.input(0)], shape, dt, perm)


# ---------------------------------------------------------------- reductions, softmax


def _reduce(op: Op, axes_input_since: int) -> LowerFn:
    def lower(n: Node) -> None:
        dt = n.check_dtype(_MM_DTYPES, 0)
        src = n.shape(0)
        axes = _axes(n, axes_input_since)
        keepdims = bool(n.attr("keepdims", 1))
        if not axes:
            if n.attr("noop_with_empty_axes", 0) and n.opset >= axes_input_since:
                n.set_view(n.input(0), src)
                return
            axes = list(range(len(src)))
        red = sorted({n.axis(a, len(src)) for a in axes})
        out = (
            [1 if i in red else d for i, d in enumerate(src)]
            if keepdims
            else [d for i, d in enumerate(src) if i not in red]
        )
        x = n.input(0)
        big = [a for a in red if src[a] != 1]  # size-1 axes reduce nothing
        if not big:
            outer, reduce, inner = _prod(src), 1, 1
        elif all(src[i] == 1 or i in red for i in range(big[0], big[-1] + 1)):
            outer, reduce, inner = (
                _prod(src[: big[0]]),
                _prod([src[a] for a in big]),
                _prod(src[big[-1] + 1 :]),
            )
        else:  # reduced axes not contiguous: move them last
            kept = [i for i in range(len(src)) if i not in red]
            perm = kept + red
            x = n.emit_temp(Op.TRANSPOSE, [x], [src[p] for p in perm], dt, perm, ":transposed")
            outer, reduce, inner = _prod([src[i] for i in kept]), _prod([src[a] for a in red]), 1
        n.emit(op, [x], out, dt, [outer, reduce, inner])

    return lower


register("ReduceSum", 1)(_reduce(Op.REDUCE_SUM, 13))
register("ReduceSum", 13)(_reduce(Op.REDUCE_SUM, 13))
register("ReduceMean", 1)(_reduce(Op.REDUCE_MEAN, 18))
register("ReduceMean", 18)(_reduce(Op.REDUCE_MEAN, 18))


@register("Softmax", 1, 13)
def Softmax(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(FLOAT_DTYPES, 0)
    src = n.shape(0)
    if n.opset < 13:  # coerced to 2-D at axis: softmax over all dims from axis on
        axis = n.axis(int(n.attr("axis", 1)), len(src))
        attrs = [_prod(src[:axis]), _prod(src[axis:]), 1]
    else:
        axis = n.axis(int(n.attr("axis", -1)), len(src))
        attrs = [_prod(src[:axis]), src[axis] if src else 1, _prod(src[axis + 1 :])]
    n.emit(Op.SOFTMAX, [n.input(0)], src, dt, attrs)


# ---------------------------------------------------------------- compile-time values


@register("Shape", 1)
def Shape(n: Node) -> None:  # noqa: N802 - static shapes make Shape a constant
    src = n.shape(0)
    start, end = int(n.attr("start", 0)), n.attr("end")
    dims = list(src)[start : (None if end is None else int(end))]
    n.set_const(np.array(dims, dtype=np.int64))


def _folded(n: Node) -> None:
    """Ops whose outputs are compile-time values: their inputs (shape, start/limit...) must be
    constants, as the output shape depends on them (IPU graphs are static)."""
    n.fold()


for _name, _first in (
    ("Constant", 1),
    ("ConstantOfShape", 9),
    ("Range", 11),
    ("HannWindow", 17),  # window and filter-bank generators: their size is their input
    ("HammingWindow", 17),
    ("BlackmanWindow", 17),
    ("MelWeightMatrix", 17),
):
    register(_name, _first)(_folded)


@register("Size", 1)
def Size(n: Node) -> None:  # noqa: N802
    n.set_const(np.array(_prod(n.shape(0)), dtype=np.int64))


def _import_families() -> None:
    """Import every pyipu/compiler/ops_*.py: each op family registers its lowerings on import
    (they need `register`, defined above), so a new family module needs no list entry here."""
    import importlib
    import pkgutil

    import pyipu.compiler as pkg

    for mod in sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)):
        if mod.startswith("ops_"):
            importlib.import_module(f"{pkg.__name__}.{mod}")


_import_families()
