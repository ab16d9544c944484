"""Gradient rules of element-wise ops, matrix products and Gather."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx

from pyipu.compiler.errors import UnsupportedAttributeError, UnsupportedOpError
from pyipu.training.autodiff import GradGraph
from pyipu.training.registry import RULES, Grads, Rule, attr, dy, out_shape, rule, text


# --- element-wise ------------------------------------------------------------------------
@rule("Add")
def _add(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    s = out_shape(g, n)
    return [g.unbroadcast(d, s, x) if need[i] else None for i, x in enumerate(n.input)]


@rule("Sub")
def _sub(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    s = out_shape(g, n)
    a, b = n.input
    return [
        g.unbroadcast(d, s, a) if need[0] else None,
        g.unbroadcast(g.op("Neg", [d]), s, b) if need[1] else None,
    ]


@rule("Mul")
def _mul(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    s = out_shape(g, n)
    a, b = n.input
    return [
        g.unbroadcast(g.op("Mul", [d, b]), s, a) if need[0] else None,
        g.unbroadcast(g.op("Mul", [d, a]), s, b) if need[1] else None,
    ]


@rule("Div")
def _div(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    s = out_shape(g, n)
    a, b = n.input
    ga = g.op("Div", [d, b])
    return [
        g.unbroadcast(ga, s, a) if need[0] else None,
        # d(a/b)/db = -(a/b)/b
        g.unbroadcast(g.op("Neg", [g.op("Mul", [ga, n.output[0]])]), s, b) if need[1] else None,
    ]


@rule("Sum")
def _sum(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    return _add(g, n, gy, need)


def _unary(fn: Callable[[GradGraph, onnx.NodeProto, str], str]) -> Rule:
    """A rule for y = f(x): d(x) = fn(g, node, d(y))."""

    def grad(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
        return [fn(g, n, dy(gy))] + [None] * (len(n.input) - 1)

    return grad


RULES["Identity"] = _unary(lambda g, n, d: d)
RULES["Neg"] = _unary(lambda g, n, d: g.op("Neg", [d]))
RULES["Exp"] = _unary(lambda g, n, d: g.op("Mul", [d, n.output[0]]))
RULES["Log"] = _unary(lambda g, n, d: g.op("Div", [d, n.input[0]]))
RULES["Sqrt"] = _unary(
    lambda g, n, d: g.op("Div", [d, g.op("Mul", [n.output[0], g.const(2.0, n.output[0])])])
)
RULES["Abs"] = _unary(lambda g, n, d: g.op("Mul", [d, g.op("Sign", [n.input[0]])]))
RULES["Reciprocal"] = _unary(
    lambda g, n, d: g.op("Neg", [g.op("Mul", [d, g.op("Mul", [n.output[0], n.output[0]])])])
)
RULES["Sigmoid"] = _unary(
    lambda g, n, d: g.op(
        "Mul",
        [d, g.op("Mul", [n.output[0], g.op("Sub", [g.const(1.0, n.output[0]), n.output[0]])])],
    )
)
RULES["Tanh"] = _unary(
    lambda g, n, d: g.op(
        "Mul",
        [d, g.op("Sub", [g.const(1.0, n.output[0]), g.op("Mul", [n.output[0], n.output[0]])])],
    )
)
RULES["Sin"] = _unary(lambda g, n, d: g.op("Mul", [d, g.op("Cos", [n.input[0]])]))
RULES["Cos"] = _unary(lambda g, n, d: g.op("Neg", [g.op("Mul", [d, g.op("Sin", [n.input[0]])])]))


def _positive(g: GradGraph, x: str) -> str:
    """1 where x > 0, else 0, in x's type."""
    return g.op("Cast", [g.op("Greater", [x, g.const(0.0, x)])], to=g.dtype(x))


RULES["Relu"] = _unary(lambda g, n, d: g.op("Mul", [d, _positive(g, n.input[0])]))


@rule("LeakyRelu")
def _leaky(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    x, d = n.input[0], dy(gy)
    alpha = float(attr(n, "alpha", 0.01))
    pos = g.op("Greater", [x, g.const(0.0, x)])
    return [g.op("Where", [pos, d, g.op("Mul", [d, g.const(alpha, x)])])]


@rule("Erf")
def _erf(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    x, d = n.input[0], dy(gy)
    # d erf(x) = 2/sqrt(pi) exp(-x^2)
    e = g.op("Exp", [g.op("Neg", [g.op("Mul", [x, x])])])
    return [g.op("Mul", [d, g.op("Mul", [e, g.const(2 / math.sqrt(math.pi), x)])])]


@rule("Gelu")
def _gelu(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    x, d = n.input[0], dy(gy)

    def mul(*v: str) -> str:
        return v[0] if len(v) == 1 else g.op("Mul", [v[0], mul(*v[1:])])

    def add(a: str, b: str) -> str:
        return g.op("Add", [a, b])

    def c(value: float) -> str:
        return g.const(value, x)

    x2 = mul(x, x)
    if text(n, "approximate", "none") == "tanh":
        # y = x/2 (1 + t), t = tanh(u), u = s (x + k x^3):
        # dy/dx = (1 + t)/2 + x/2 (1 - t^2) s (1 + 3k x^2)
        s, k = math.sqrt(2 / math.pi), 0.044715
        t = g.op("Tanh", [mul(c(s), add(x, mul(c(k), x2, x)))])
        dt = mul(g.op("Sub", [c(1.0), mul(t, t)]), c(s), add(c(1.0), mul(c(3 * k), x2)))
        local = mul(c(0.5), add(add(c(1.0), t), mul(x, dt)))
    else:
        # y = x Phi(x): dy/dx = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2
        cdf = mul(c(0.5), add(c(1.0), g.op("Erf", [mul(x, c(1 / math.sqrt(2)))])))
        pdf = mul(c(1 / math.sqrt(2 * math.pi)), g.op("Exp", [mul(x2, c(-0.5))]))
        local = add(cdf, mul(x, pdf))
    return [mul(d, local)]


@rule("Pow")
def _pow(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    x, p = n.input
    d = dy(gy)
    s = out_shape(g, n)
    out: Grads = [None, None]
    if need[0]:  # d x^p / dx = p x^(p-1)
        pm1 = g.op("Sub", [p, g.const(1.0, p)])
        local = g.op("Mul", [g.op("Cast", [p], to=g.dtype(x)), g.op("Pow", [x, pm1])])
        out[0] = g.unbroadcast(g.op("Mul", [d, local]), s, x)
    if need[1]:  # d x^p / dp = x^p log(x), for x > 0 (the exponent is a float tensor here)
        local = g.op("Mul", [n.output[0], g.op("Log", [x])])
        out[1] = g.unbroadcast(g.op("Cast", [g.op("Mul", [d, local])], to=g.dtype(p)), s, p)
    return out


@rule("Clip")
def _clip(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    x, d = n.input[0], dy(gy)
    lo = n.input[1] if len(n.input) > 1 and n.input[1] else None
    hi = n.input[2] if len(n.input) > 2 and n.input[2] else None
    if g.opset < 11:
        lo = g.const(attr(n, "min"), x) if attr(n, "min") is not None else None
        hi = g.const(attr(n, "max"), x) if attr(n, "max") is not None else None
    # y = min(max(x, lo), hi): x passes where lo <= x <= hi; lo is taken where x < lo <= hi,
    # hi where max(x, lo) > hi
    below = g.op("Less", [x, lo]) if lo is not None else None
    above = g.op("Greater", [x, hi]) if hi is not None else None
    if lo is not None and hi is not None and below is not None and above is not None:
        crossed = g.op("Greater", [lo, hi])
        below = g.op("And", [below, g.op("Not", [crossed])])
        above = g.op("Or", [above, crossed])
    took = [below, above]
    out: Grads = [None] * len(n.input)
    dx = d
    for t in took:
        if t is not None:
            dx = g.op("Mul", [dx, g.op("Cast", [g.op("Not", [t])], to=g.dtype(x))])
    out[0] = dx
    rank = len(out_shape(g, n))
    for i, (bound, t) in enumerate(zip((lo, hi), took, strict=True), start=1):
        if i < len(n.input) and need[i] and t is not None and bound is not None:
            part = g.op("Mul", [d, g.op("Cast", [t], to=g.dtype(x))])
            total = g.reduce("ReduceSum", part, list(range(rank)), keepdims=0) if rank else part
            out[i] = g.reshape(total, g.shape(bound))
    return out


@rule("Min", "Max")
def _min_max(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    d = dy(gy)
    if len(n.input) != 2:
        raise UnsupportedOpError(f"{n.op_type} {n.name!r}: gradient only with two inputs")
    a, b = n.input
    s = out_shape(g, n)
    # the input that was picked gets the gradient; on a tie, the first one
    beaten = g.op("Less" if n.op_type == "Max" else "Greater", [a, b])
    first = g.op("Not", [beaten])
    zero = g.const(0.0, n.output[0])
    return [
        g.unbroadcast(g.op("Where", [first, d, zero]), s, a) if need[0] else None,
        g.unbroadcast(g.op("Where", [first, zero, d]), s, b) if need[1] else None,
    ]


@rule("Where")
def _where(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    c, a, b = n.input
    d = dy(gy)
    s = out_shape(g, n)
    zero = g.const(0.0, n.output[0])
    return [
        None,
        g.unbroadcast(g.op("Where", [c, d, zero]), s, a) if need[1] else None,
        g.unbroadcast(g.op("Where", [c, zero, d]), s, b) if need[2] else None,
    ]


@rule("Cast")
def _cast(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    return [g.op("Cast", [dy(gy)], to=g.dtype(n.input[0]))]


# --- matrix products ---------------------------------------------------------------------
def _swap_last(g: GradGraph, x: str, rank: int) -> str:
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return g.op("Transpose", [x], perm=perm)


@rule("MatMul")
def _matmul(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    a, b = n.input
    d = dy(gy)
    sa, sb = g.shape(a), g.shape(b)
    if len(sa) >= 2 and len(sb) == 2 and g.opset >= 11:
        return _matmul_by_matrix(g, a, b, d, sa, sb, need)
    # 1-D operands as matrices: a [K] is [1, K], b [K] is [K, 1]
    a2 = a if len(sa) > 1 else g.reshape(a, (1, sa[0]))
    b2 = b if len(sb) > 1 else g.reshape(b, (sb[0], 1))
    ra, rb = max(len(sa), 2), max(len(sb), 2)
    ma = sa if len(sa) > 1 else (1, sa[0])
    mb = sb if len(sb) > 1 else (sb[0], 1)
    batch = np.broadcast_shapes(ma[:-2], mb[:-2])
    full = (*batch, ma[-2], mb[-1])
    d2 = g.reshape(d, full)
    out: Grads = [None, None]
    if need[0]:
        ga = g.op("MatMul", [d2, _swap_last(g, b2, rb)])
        out[0] = _sum_to(g, ga, (*batch, ma[-2], ma[-1]), ma, sa)
    if need[1]:
        gb = g.op("MatMul", [_swap_last(g, a2, ra), d2])
        out[1] = _sum_to(g, gb, (*batch, mb[-2], mb[-1]), mb, sb)
    return out


def _matmul_by_matrix(
    g: GradGraph,
    a: str,
    b: str,
    d: str,
    sa: tuple[int, ...],
    sb: tuple[int, ...],
    need: list[bool],
) -> Grads:
    """A [..., M, K] times a matrix B [K, N] (a linear layer): the batch folded into the rows,
    each gradient one Gemm with the transposes as attributes, dB's sum over the batch inside
    the product."""
    rows = int(np.prod(sa[:-1], dtype=np.int64))
    a2 = g.reshape(a, (rows, sa[-1])) if len(sa) > 2 else a
    d2 = g.reshape(d, (rows, sb[-1])) if len(sa) > 2 else d
    out: Grads = [None, None]
    if need[0]:  # dA = dY B^T
        ga = g.op("Gemm", [d2, b], transB=1)
        out[0] = g.reshape(ga, sa) if len(sa) > 2 else ga
    if need[1]:  # dB = A^T dY, over all rows
        out[1] = g.op("Gemm", [a2, d2], transA=1)
    return out


def _sum_to(
    g: GradGraph, x: str, have: tuple[int, ...], want: tuple[int, ...], final: tuple[int, ...]
) -> str:
    """x of shape `have` summed over broadcast batch dims to `want`, then reshaped to `final`."""
    lead = len(have) - len(want)
    axes = [i for i in range(len(have)) if i < lead or (want[i - lead] == 1 and have[i] != 1)]
    if axes:
        x = g.reduce("ReduceSum", x, axes, keepdims=1)
    return g.reshape(x, final) if tuple(have) != tuple(final) or axes else x


@rule("Gemm")
def _gemm(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    a, b = n.input[0], n.input[1]
    d = dy(gy)
    alpha, beta = float(attr(n, "alpha", 1.0)), float(attr(n, "beta", 1.0))
    ta, tb = int(attr(n, "transA", 0)), int(attr(n, "transB", 0))
    y = n.output[0]
    out: Grads = [None] * len(n.input)
    if g.opset >= 11:  # Gemm's C is optional: each gradient one Gemm, transposes as attributes
        if need[0]:  # dA' = dY B'^T, and dA = (dA')^T = B' dY^T when A is stored transposed
            args = ([d, b], 0, 1 - tb) if not ta else ([b, d], tb, 1)
            out[0] = g.op("Gemm", args[0], alpha=alpha, transA=args[1], transB=args[2])
        if need[1]:  # dB' = A'^T dY, and dB = dY^T A' when B is stored transposed
            args = ([a, d], 1 - ta, 0) if not tb else ([d, a], 1, ta)
            out[1] = g.op("Gemm", args[0], alpha=alpha, transA=args[1], transB=args[2])
        if len(n.input) > 2 and n.input[2] and need[2]:
            dc = d if beta == 1.0 else g.op("Mul", [d, g.const(beta, y)])
            out[2] = g.unbroadcast(dc, out_shape(g, n), n.input[2])
        return out
    da = d if alpha == 1.0 else g.op("Mul", [d, g.const(alpha, y)])
    if need[0]:  # dA' = dY B'^T
        bt = b if tb else g.op("Transpose", [b], perm=[1, 0])
        ga = g.op("MatMul", [da, bt])
        out[0] = g.op("Transpose", [ga], perm=[1, 0]) if ta else ga
    if need[1]:  # dB' = A'^T dY
        at = a if ta else g.op("Transpose", [a], perm=[1, 0])
        gb = g.op("MatMul", [at, da])
        out[1] = g.op("Transpose", [gb], perm=[1, 0]) if tb else gb
    if len(n.input) > 2 and n.input[2] and need[2]:
        dc = d if beta == 1.0 else g.op("Mul", [d, g.const(beta, y)])
        out[2] = g.unbroadcast(dc, out_shape(g, n), n.input[2])
    return out


@rule("Gather")
def _gather(g: GradGraph, n: onnx.NodeProto, gy: Grads, need: list[bool]) -> Grads:
    data, idx = n.input
    d = dy(gy)
    axis = int(attr(n, "axis", 0))
    shape = g.shape(data)
    if axis not in (0, -len(shape)):
        raise UnsupportedAttributeError(f"Gather {n.name!r}: gradient only along axis 0")
    rows, rest = shape[0], int(np.prod(shape[1:], dtype=np.int64))
    # d(data) = onehot(indices)^T @ d(y): every row gets the sum of the rows that read it
    flat = g.reshape(idx, (-1,))
    hot = g.op(
        "OneHot", [flat, g.const(np.float32(rows)), g.const(np.array([0, 1]), data)], axis=-1
    )
    gd = g.op("MatMul", [g.op("Transpose", [hot], perm=[1, 0]), g.reshape(d, (-1, rest))])
    return [g.reshape(gd, shape) if need[0] else None, None]
