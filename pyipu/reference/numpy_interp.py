"""The NumPy reference interpreter: the executable form of docs/bytecode.md.

Memory is modelled as the device has it: one byte arena of `arena_size`, tensors are typed views
at their offsets (so the compiler's storage sharing is exercised, not assumed), and TENSOR_DATA
tensors are read-only views of the container's tensor data once the Load program has bound them.
Before anything runs, `run` has the C verifier (`ipu_executable_create`) check the model: the
reference relies on what it proves (operands in range, shapes, dtypes and attributes as
docs/bytecode.md says, weights bound before they are read, anchor roles), so a malformed model
raises its typed error (BadProgramError, CorruptFileError) rather than an IndexError or
KeyError from the middle of a kernel.
Each opcode is one small function computing its result from copies of its inputs; the result is
then stored with the output's dtype. float16 is computed in float32 and rounded to nearest even
on store; integers wrap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from pyipu.compiler.ir import (
    NO_INDEX,
    Direction,
    Instr,
    Location,
    ModelIR,
    bits_f64,
    np_dtype,
)
from pyipu.enums import ActFn, BinaryFn, DType, Op, UnaryFn
from pyipu.errors import BadProgramError, DTypeError, InvalidArgumentError, OutOfMemoryError

# A kernel gets the instruction, copies of its inputs and (a view of) its first output, and
# returns the result, or one result per output for multi-output opcodes (TOPK).
Kernel = Callable[[Instr, list[np.ndarray], np.ndarray], np.ndarray | tuple[np.ndarray, ...]]
KERNELS: dict[int, Kernel] = {}


def kernel(op: Op) -> Callable[[Kernel], Kernel]:
    def deco(fn: Kernel) -> Kernel:
        KERNELS[op] = fn
        return fn

    return deco


def _compute_dtype(dt: np.dtype) -> np.dtype:
    """float16 is computed in float32; everything else in its own type."""
    return np.dtype(np.float32) if dt == np.float16 else dt


def _args(xs: list[np.ndarray]) -> list[np.ndarray]:
    return [x.astype(_compute_dtype(x.dtype)) for x in xs]


# ---------------------------------------------------------------- element-wise


@kernel(Op.COPY)
def copy(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    return xs[0].reshape(-1).view(np.uint8).view(y.dtype).reshape(y.shape)


@kernel(Op.ADD)
def add(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    a, b = _args(xs)
    return a + b


@kernel(Op.SUB)
def sub(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    a, b = _args(xs)
    return a - b


@kernel(Op.MUL)
def mul(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    a, b = _args(xs)
    return a * b


def int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero; x / 0 == 0; INT_MIN / -1 wraps to INT_MIN."""
    a, b = np.broadcast_arrays(a, b)
    safe = np.where(b == 0, 1, b).astype(b.dtype)
    q = a // safe  # floors
    r = a - q * safe
    q = np.where((r != 0) & ((a < 0) != (safe < 0)), q + 1, q)
    return np.where(b == 0, 0, q).astype(a.dtype)


@kernel(Op.DIV)
def div(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    a, b = _args(xs)
    if np.issubdtype(a.dtype, np.integer):
        return int_div(a, b)
    return a / b


@kernel(Op.RELU)
def relu(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    (x,) = _args(xs)
    return np.maximum(x, x.dtype.type(0))


@kernel(Op.SCALE_SHIFT)
def scale_shift(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    x, scale, shift = _args(xs)
    axis, act = ins.attrs
    along = [1] * x.ndim
    along[axis] = x.shape[axis]
    r = x * scale.reshape(along) + shift.reshape(along)
    return np.maximum(r, r.dtype.type(0)) if act == ActFn.RELU else r


@kernel(Op.LAYER_NORM)
def layer_norm(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """Rows of L elements: (x - mean) / sqrt(var + eps) * scale (+ bias), in float32."""
    x, scale, *bias = (a.astype(np.float32) for a in xs)
    length, eps_bits = ins.attrs
    rows = x.reshape(-1, length)
    mean = rows.mean(axis=1, keepdims=True, dtype=np.float32)
    d = rows - mean
    var = (d * d).mean(axis=1, keepdims=True, dtype=np.float32)
    r = np.float32(1) / np.sqrt(var + np.float32(bits_f64(eps_bits)))
    out = d * r * scale.reshape(-1)
    if bias:
        out = out + bias[0].reshape(-1)
    return out.reshape(x.shape).astype(y.dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


# UNARY functions on float32 (float16 is computed in float32): the C kernels (kernels/unary.c)
# use the same formulations with libm's float functions. a, b: the float parameters.
_UNARY_FLOAT: dict[int, Callable[[np.ndarray, np.float32, np.float32], np.ndarray]] = {
    UnaryFn.SIGMOID: lambda x, a, b: np.float32(1) / (np.float32(1) + np.exp(-x)),
    UnaryFn.TANH: lambda x, a, b: np.tanh(x),
    UnaryFn.EXP: lambda x, a, b: np.exp(x),
    UnaryFn.LOG: lambda x, a, b: np.log(x),
    UnaryFn.SQRT: lambda x, a, b: np.sqrt(x),
    UnaryFn.ERF: lambda x, a, b: _erf(x),
    UnaryFn.RECIPROCAL: lambda x, a, b: np.float32(1) / x,
    UnaryFn.SIN: lambda x, a, b: np.sin(x),
    UnaryFn.COS: lambda x, a, b: np.cos(x),
    UnaryFn.FLOOR: lambda x, a, b: np.floor(x),
    UnaryFn.CEIL: lambda x, a, b: np.ceil(x),
    UnaryFn.ROUND: lambda x, a, b: np.round(x),  # half to even
    UnaryFn.SOFTPLUS: lambda x, a, b: np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),
    UnaryFn.LEAKY_RELU: lambda x, a, b: np.where(x >= 0, x, a * x),
    UnaryFn.ELU: lambda x, a, b: np.where(x >= 0, x, a * np.expm1(x)),
    UnaryFn.HARD_SIGMOID: lambda x, a, b: np.minimum(np.maximum(a * x + b, 0), 1),
    UnaryFn.TAN: lambda x, a, b: np.tan(x),
    UnaryFn.ASIN: lambda x, a, b: np.arcsin(x),
    UnaryFn.ACOS: lambda x, a, b: np.arccos(x),
    UnaryFn.ATAN: lambda x, a, b: np.arctan(x),
    UnaryFn.SINH: lambda x, a, b: np.sinh(x),
    UnaryFn.COSH: lambda x, a, b: np.cosh(x),
    UnaryFn.ASINH: lambda x, a, b: np.arcsinh(x),
    UnaryFn.ACOSH: lambda x, a, b: np.arccosh(x),
    UnaryFn.ATANH: lambda x, a, b: np.arctanh(x),
    UnaryFn.SOFTSIGN: lambda x, a, b: x / (np.float32(1) + np.abs(x)),
    UnaryFn.HARD_SWISH: lambda x, a, b: x * np.minimum(np.maximum(x / np.float32(6) + 0.5, 0), 1),
    UnaryFn.MISH: lambda x, a, b: x * np.tanh(np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))),
    UnaryFn.SELU: lambda x, a, b: np.where(x > 0, b * x, b * (a * np.exp(x) - a)),
    UnaryFn.CELU: lambda x, a, b: np.maximum(x, 0) + np.minimum(0, a * np.expm1(x / a)),
    UnaryFn.THRESHOLDED_RELU: lambda x, a, b: np.where(x > a, x, np.float32(0)),
    UnaryFn.SHRINK: lambda x, a, b: np.where(x < -b, x + a, np.where(x > b, x - a, 0)),
    UnaryFn.GELU: lambda x, a, b: _gelu(x, bool(a)),
    UnaryFn.SWISH: lambda x, a, b: x / (np.float32(1) + np.exp(-a * x)),
}


def _gelu(x: np.ndarray, tanh: bool) -> np.ndarray:
    if tanh:
        inner = np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)
        return np.float32(0.5) * x * (np.float32(1) + np.tanh(inner))
    return np.float32(0.5) * x * (np.float32(1) + _erf(x * np.float32(0.7071067811865476)))


def _int_shrink(x: np.ndarray, bias: np.float32, lambd: np.float32) -> np.ndarray:
    """SHRINK on integers: computed in float32 (as onnxruntime), truncated and saturated."""
    f = x.astype(np.float32)
    return saturating_cast(
        np.where(f < -lambd, f + bias, np.where(f > lambd, f - bias, 0)), x.dtype
    )


@kernel(Op.UNARY)
def unary(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    (x,) = _args(xs)
    fn, p0, p1 = (int(a) for a in ins.attrs)
    return _unary_values(fn, p0, p1, x)


def _unary_values(fn: int, p0: int, p1: int, x: np.ndarray) -> np.ndarray:
    """UNARY function `fn` with attributes p0, p1 (also a CONV2D's or GEMM's UNARY activation)."""
    if fn == UnaryFn.NOT:
        return ~x
    floating = np.issubdtype(x.dtype, np.floating)
    a, b = np.float32(bits_f64(p0)), np.float32(bits_f64(p1))
    if fn == UnaryFn.CLIP:  # minimum(maximum(x, lo), hi): NaN propagates
        if floating:
            lo, hi = a, b
        elif np.issubdtype(x.dtype, np.signedinteger):
            lo, hi = np.int64(p0), np.int64(p1)
        else:  # unsigned: the bounds are uint64 bit patterns
            lo, hi = np.int64(p0).view(np.uint64), np.int64(p1).view(np.uint64)
        return np.minimum(np.maximum(x.astype(lo.dtype), lo), hi)
    if fn == UnaryFn.NEG:
        return -x  # integers wrap
    if fn == UnaryFn.ABS:
        return np.abs(x)  # abs(INT_MIN) wraps to INT_MIN
    if fn == UnaryFn.SIGN:
        return np.sign(x)
    if fn == UnaryFn.BITWISE_NOT:
        return ~x
    if fn == UnaryFn.ISNAN:
        return np.isnan(x)
    if fn == UnaryFn.ISINF:
        return (np.isposinf(x) & bool(a)) | (np.isneginf(x) & bool(b))
    if fn == UnaryFn.SHRINK and not floating:
        return _int_shrink(x, a, b)
    return _UNARY_FLOAT[fn](x, a, b)


def _float_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's pow (IEEE 754): NumPy computes x ** 0.5 as sqrt(x), which differs at -inf (+inf in
    C, NaN in sqrt) and at -0 (+0 in C)."""
    y = np.power(a, b)
    half = b == 0.5
    y = np.where(half & np.isneginf(a), np.inf, y)
    return np.where(half & (a == 0), 0, y).astype(y.dtype, copy=False)


_BINARY: dict[int, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    BinaryFn.POW: _float_pow,
    BinaryFn.MIN: np.minimum,
    BinaryFn.MAX: np.maximum,
    BinaryFn.EQUAL: np.equal,
    BinaryFn.LESS: np.less,
    BinaryFn.GREATER: np.greater,
    BinaryFn.LESS_EQUAL: np.less_equal,
    BinaryFn.GREATER_EQUAL: np.greater_equal,
    BinaryFn.AND: np.logical_and,
    BinaryFn.OR: np.logical_or,
    BinaryFn.XOR: np.logical_xor,
}


def _int_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer power, wrapping; a negative exponent gives the truncated 1 / a^-b."""
    neg = b < 0
    p = np.power(a, np.where(neg, 0, b).astype(b.dtype))
    odd = (b % 2) != 0
    inv = np.where(a == 1, 1, np.where((a == -1) & odd, -1, np.where(a == -1, 1, 0)))
    return np.where(neg, inv, p).astype(a.dtype)


def _safe(b: np.ndarray) -> np.ndarray:
    return np.where(b == 0, 1, b).astype(b.dtype)


def _int_rem(a: np.ndarray, b: np.ndarray, floor: bool) -> np.ndarray:
    """Remainder with the divisor's sign (floor) or the dividend's (fmod); x mod 0 == 0."""
    r = np.mod(a, _safe(b)) if floor else np.fmod(a, _safe(b))
    return np.where(b == 0, 0, r).astype(a.dtype)


def _shift(a: np.ndarray, b: np.ndarray, left: bool) -> np.ndarray:
    """Shifts (arithmetic right shift for signed types); a shift by < 0 or >= the bit width
    leaves the sign fill only: -1 for a right shift of a negative value, else 0."""
    big = (b < 0) | (b >= a.dtype.itemsize * 8)
    sh = np.where(big, 0, b).astype(a.dtype)
    r = np.left_shift(a, sh) if left else np.right_shift(a, sh)
    fill = 0 if left else np.where(a < 0, -1, 0)
    return np.where(big, fill, r).astype(a.dtype)


_BINARY_INT: dict[int, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    BinaryFn.POW: _int_pow,
    BinaryFn.MOD: lambda a, b: _int_rem(a, b, True),
    BinaryFn.FMOD: lambda a, b: _int_rem(a, b, False),
    BinaryFn.BITSHIFT_LEFT: lambda a, b: _shift(a, b, True),
    BinaryFn.BITSHIFT_RIGHT: lambda a, b: _shift(a, b, False),
    BinaryFn.BITWISE_AND: np.bitwise_and,
    BinaryFn.BITWISE_OR: np.bitwise_or,
    BinaryFn.BITWISE_XOR: np.bitwise_xor,
}
_BINARY[BinaryFn.MOD] = np.mod  # floats: the divisor's sign
_BINARY[BinaryFn.FMOD] = np.fmod
_BINARY[BinaryFn.PRELU] = lambda a, b: np.where(a < 0, b * a, a)


@kernel(Op.BINARY)
def binary(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    a, b = _args(xs)
    fn = int(ins.attrs[0])
    if np.issubdtype(a.dtype, np.integer) and fn in _BINARY_INT:
        return _BINARY_INT[fn](a, b)
    return _BINARY[fn](a, b)


@kernel(Op.WHERE)
def where(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    return np.where(xs[0], xs[1], xs[2])


def saturating_cast(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """x → to: float→int truncates toward zero and saturates, NaN → 0; to bool: x != 0."""
    if to == np.bool_:
        return x != 0
    if np.issubdtype(x.dtype, np.floating) and np.issubdtype(to, np.integer):
        info = np.iinfo(to)
        t = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
        over, under = t >= float(info.max), t <= float(info.min)
        mid = np.where(over | under, 0, t).astype(to)
        return np.where(over, info.max, np.where(under, info.min, mid)).astype(to)
    return x.astype(to)  # float→float rounds to nearest even; int→int wraps


@kernel(Op.CAST)
def cast(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    return saturating_cast(xs[0], y.dtype)


# ---------------------------------------------------------------- matrix products


@kernel(Op.MATMUL)
def matmul(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    a, b = _args(xs)
    return np.matmul(a, b)


@kernel(Op.GEMM)
def gemm(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    trans_a, trans_b, alpha_bits, beta_bits, *act = ins.attrs
    a, b, *c = _args(xs)
    a = a.T if trans_a else a  # (an n-D A has no transA: its rows are those of [M, K])
    b = b.T if trans_b else b
    out = np.float32(bits_f64(alpha_bits)) * np.matmul(a, b)
    if c:
        out = out + np.float32(bits_f64(beta_bits)) * c[0]
    if act and act[0] == ActFn.RELU:  # fused by the compiler (conv_epilogue.py)
        out = np.maximum(out, out.dtype.type(0))
    if act and act[0] == ActFn.UNARY:  # on the sums rounded to the output dtype, as UNARY reads
        fn, p0, p1 = (int(a) for a in act[1:])
        out = _unary_values(fn, p0, p1, out.astype(y.dtype).astype(np.float32))
    return out


# ---------------------------------------------------------------- data movement


@kernel(Op.EXPAND)
def expand(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    return np.broadcast_to(xs[0], y.shape)


@kernel(Op.CONCAT)
def concat(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    return np.concatenate(xs, axis=int(ins.attrs[0]))


@kernel(Op.TRANSPOSE)
def transpose(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    return xs[0].transpose([int(p) for p in ins.attrs])


# ---------------------------------------------------------------- reductions, softmax


def _reduce_sum(ins: Instr, x: np.ndarray) -> tuple[np.ndarray, int]:
    outer, reduce, inner = (int(a) for a in ins.attrs)
    (xc,) = _args([x])
    # Integers accumulate in their own type (wrapping); floats in float32.
    return xc.reshape(outer, reduce, inner).sum(axis=1, dtype=xc.dtype), reduce


@kernel(Op.REDUCE_SUM)
def reduce_sum(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    return _reduce_sum(ins, xs[0])[0]


@kernel(Op.REDUCE_MEAN)
def reduce_mean(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    total, n = _reduce_sum(ins, xs[0])
    if np.issubdtype(total.dtype, np.integer):
        return int_div(total, np.array(n, dtype=total.dtype)) if n else np.zeros_like(total)
    with np.errstate(invalid="ignore"):
        return total / np.float32(n)  # n == 0: 0/0 = NaN


@kernel(Op.SOFTMAX)
def softmax(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    outer, axis_len, inner = (int(a) for a in ins.attrs)
    (x,) = _args(xs)
    x = x.reshape(outer, axis_len, inner)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# ---------------------------------------------------------------- convolution, pooling


def _window(k: int, d: int, s: int, n_out: int) -> slice:
    """Positions tap k reads in a padded axis for outputs 0..n_out-1."""
    return slice(k * d, k * d + s * (n_out - 1) + 1, s)


@kernel(Op.CONV2D)
def conv2d(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    g, sh, sw, dh, dw, pt, pl, pb, pr = (int(a) for a in ins.attrs[:9])
    act, has_res = (int(a) for a in ins.attrs[9:11]) if len(ins.attrs) >= 11 else (0, 0)
    args = _args(xs)
    res = args.pop() if has_res else None
    x, w, *bias = args
    n = x.shape[0]
    m, cig, kh_, kw_ = w.shape
    oh, ow = y.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    xp = xp.reshape(n, g, cig, *xp.shape[2:])
    wg = w.reshape(g, m // g, cig, kh_, kw_)
    out = np.zeros((n, g, m // g, oh, ow), np.float32)
    for kh in range(kh_):
        for kw in range(kw_):
            patch = xp[..., _window(kh, dh, sh, oh), _window(kw, dw, sw, ow)]
            out += np.einsum("ngchw,gmc->ngmhw", patch, wg[..., kh, kw])
    out = out.reshape(n, m, oh, ow)
    if bias:
        out = out + bias[0][:, None, None]
    if res is not None:  # fused epilogue: residual, then activation
        out = out + res.astype(np.float32)
    if act == ActFn.RELU:
        out = np.maximum(out, np.float32(0))
    if act == ActFn.UNARY:  # on the stored sums (rounded to float16 first), as UNARY does
        fn, p0, p1 = (int(a) for a in ins.attrs[11:14])
        out = _unary_values(fn, p0, p1, out.astype(y.dtype).astype(np.float32))
    return out


@kernel(Op.POOL2D)
def pool2d(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    kind, kh_, kw_, sh, sw, pt, pl, pb, pr, cip, dh, dw = (int(a) for a in ins.attrs)
    (x,) = _args(xs)
    h, w = x.shape[2:]
    oh, ow = y.shape[2:]
    eh = max(0, (oh - 1) * sh + (kh_ - 1) * dh + 1 - (h + pt + pb))  # ceil-mode overhang
    ew = max(0, (ow - 1) * sw + (kw_ - 1) * dw + 1 - (w + pl + pr))
    pads = ((pt, pb + eh), (pl, pr + ew))
    xp = np.pad(x, ((0, 0), (0, 0), *pads), constant_values=-np.inf if kind == 0 else 0)
    valid = np.pad(np.ones((h, w), np.float32), pads)
    inpad = np.pad(np.ones((h + pt + pb, w + pl + pr), np.float32), ((0, eh), (0, ew)))
    acc = np.full((*x.shape[:2], oh, ow), -np.inf if kind == 0 else 0, np.float32)
    cnt = np.zeros((oh, ow), np.float32)
    for kh in range(kh_):
        for kw in range(kw_):
            sl = (_window(kh, dh, sh, oh), _window(kw, dw, sw, ow))
            v = xp[(...,) + sl]
            acc = np.maximum(acc, v) if kind == 0 else acc + v
            cnt += (inpad if cip else valid)[sl]
    if kind == 0:
        return acc
    with np.errstate(invalid="ignore", divide="ignore"):
        return acc / cnt


# ---------------------------------------------------------------- the machine


class Machine:
    """One virtual IPU's memory for one executable: the arena and the bound tensor data."""

    def __init__(self, model: ModelIR) -> None:
        self.model = model
        try:
            self.arena = np.zeros(model.arena_size, dtype=np.uint8)
        except MemoryError as e:
            raise OutOfMemoryError(f"no memory for an arena of {model.arena_size} bytes") from e
        self.tensor_data = np.frombuffer(model.tensor_data_blob(), dtype=np.uint8)
        self.bound: set[int] = set()

    def view(self, t: int) -> np.ndarray:
        spec = self.model.tensors[t]
        if spec.location == Location.TENSOR_DATA:
            if t not in self.bound:
                raise BadProgramError(f"tensor t{t} is read before the Load program binds it")
            mem = self.tensor_data
        else:
            mem = self.arena
        raw = mem[spec.offset : spec.offset + spec.nbytes]
        return raw.view(np_dtype(spec.dtype)).reshape(spec.shape)

    def run_program(self, pid: int) -> None:
        for ins in self.model.program(pid).instrs:
            if ins.op == Op.BIND:
                self.bound.add(ins.outputs[0])
                continue
            xs = [self.view(t).copy() for t in ins.inputs]
            ys = [self.view(t) for t in ins.outputs]
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                res = KERNELS[ins.op](ins, xs, ys[0])
            results = res if isinstance(res, tuple) else (res,)
            for y, r in zip(ys, results, strict=True):
                result = np.asarray(r)
                if result.shape != y.shape:
                    result = result.reshape(y.shape)  # views of [outer, inner]: same order
                if y.dtype == np.float16 or np.issubdtype(y.dtype, np.integer):
                    result = result.astype(y.dtype)  # RNE for float16, wrap for integers
                y[...] = result

    def run_main(self, subgraph: int) -> None:
        """One batch through a subgraph's Main program; a sharded model runs its stages in
        order, each followed by its copy program (pipelining changes timing, not results)."""
        if not self.model.stages:
            self.run_program(self.model.main_programs[subgraph])
            return
        for stage in self.model.stages:
            self.run_program(stage.program)
            if stage.copy_program != NO_INDEX:
                self.run_program(stage.copy_program)


def verify(model: ModelIR) -> None:
    """Check `model` with the C verifier (the one the runtime loads files with); its typed
    error (a pyipu.Error) if it rejects it."""
    from pyipu import _core
    from pyipu.compiler.serialize import encode_container

    _core.Executable(_core.Container.from_bytes(encode_container(model, prepack=False)))


def _select_subgraph(model: ModelIR, inputs: Mapping[str, np.ndarray], subgraph: int | None) -> int:
    if subgraph is not None:
        if not 0 <= subgraph < model.num_subgraphs:
            raise InvalidArgumentError(
                f"subgraph {subgraph} out of range (model has {model.num_subgraphs})"
            )
        return subgraph
    if model.index_anchor != NO_INDEX:
        index_name = model.anchors[model.index_anchor].name
        if index_name in inputs:
            values = np.unique(np.asarray(inputs[index_name]).reshape(-1))
            if len(values) != 1 or not np.issubdtype(values.dtype, np.integer):
                raise InvalidArgumentError(f"{index_name!r} must select one subgraph, got {values}")
            return _select_subgraph(model, {}, int(values[0]))
    owners = {a.subgraph for a in model.anchors if a.name in inputs and a.subgraph != NO_INDEX}
    if len(owners) > 1:
        raise InvalidArgumentError(f"inputs belong to several subgraphs {sorted(owners)}")
    return owners.pop() if owners else 0


def _batches(name: str, x: np.ndarray, shape: tuple[int, ...]) -> int:
    numel = math.prod(shape)
    stacked = x.shape[1:] == shape[1:] if shape else x.ndim <= 1
    if x.size == 0 or x.size % numel or not stacked:
        raise InvalidArgumentError(
            f"input {name!r} of shape {list(x.shape)} is not N batches of {list(shape)}"
        )
    return x.size // numel


def run(
    model: ModelIR, inputs: Mapping[str, np.ndarray], subgraph: int | None = None
) -> dict[str, np.ndarray]:
    """Run `model` on `inputs` (anchor name → N batches stacked along dim 0).

    Returns output anchor name → N batches stacked along dim 0 (a 0-d output gives shape (N,),
    or () when N == 1). For a fused model the subgraph is `subgraph`, else the value of the
    `index` input, else the one the given input names belong to. A step-end program runs after
    every `batches_per_step` batches and after the last. Errors are pyipu.Error
    subclasses: the verifier's for a malformed model (`verify`), InvalidArgumentError and
    DTypeError for inputs that do not fit it, InvalidArgumentError for an index out of range.
    """
    verify(model)
    sub = _select_subgraph(model, inputs, subgraph)
    index_name = model.anchors[model.index_anchor].name if model.index_anchor != NO_INDEX else None
    mine = [a for a in model.anchors if a.subgraph in (sub, NO_INDEX)]
    feeds = [a for a in mine if a.direction == Direction.INPUT and not a.has_tensor_data]
    feeds = [a for a in feeds if a.name != index_name]
    outs = [a for a in mine if a.direction == Direction.OUTPUT]
    known = {a.name for a in feeds} | ({index_name} if index_name else set())
    extra = set(inputs) - known
    if extra:
        raise InvalidArgumentError(
            f"unknown or non-feedable inputs {sorted(extra)}; expected {sorted(known)}"
        )
    missing = [a.name for a in feeds if a.name not in inputs]
    if missing:
        raise InvalidArgumentError(f"missing inputs {missing}")

    arrays = {}
    counts = set()
    for a in feeds:
        spec = model.tensors[a.tensor]
        x = np.asarray(inputs[a.name])
        if x.dtype != np_dtype(spec.dtype):
            raise DTypeError(
                f"input {a.name!r} has dtype {x.dtype}, expected {DType(spec.dtype).name.lower()}"
            )
        counts.add(_batches(a.name, x, spec.shape))
        arrays[a.name] = x.reshape(-1, *spec.shape)
    if len(counts) > 1:
        raise InvalidArgumentError(f"inputs carry different numbers of batches {sorted(counts)}")
    n = counts.pop() if counts else 1

    machine = Machine(model)
    machine.run_program(model.load_program)
    results: dict[str, list[np.ndarray]] = {a.name: [] for a in outs}
    for i in range(n):
        for a in feeds:
            machine.view(a.tensor)[...] = arrays[a.name][i]
        if index_name is not None:
            machine.view(model.anchors[model.index_anchor].tensor)[...] = sub
        machine.run_main(sub)
        for a in outs:
            results[a.name].append(machine.view(a.tensor).copy())
        step_done = (i + 1) % model.batches_per_step == 0 or i == n - 1
        if step_done and model.step_end_program != NO_INDEX:
            machine.run_program(model.step_end_program)
    out: dict[str, np.ndarray] = {}
    for a in outs:
        stacked = np.stack(results[a.name])
        shape = model.tensors[a.tensor].shape
        if shape:
            out[a.name] = stacked.reshape(n * shape[0], *shape[1:])
        else:
            out[a.name] = stacked.reshape(n) if n > 1 else stacked.reshape(())
    return out


# The other kernel families register themselves on import (they need `kernel` defined above).
from pyipu.reference import (  # noqa: E402, F401
    kernels_data,
    kernels_detect,
    kernels_gather,
    kernels_reduce,
)
