"""Recognise GELU written out with Erf and emit one UNARY GELU instruction (docs/bytecode.md).

Exporters (PyTorch, TensorFlow, onnx.helper graphs such as benchmarks/zoo.py) spell
GELU(x) = x/2 · (1 + erf(x/√2)) as five element-wise nodes, each a pass over the activations:

    u = x · (1/√2)   or  x / √2
    e = Erf(u)
    p = e + 1
    y = (x · ½) · p  or  (x · p) · ½     (either operand order everywhere)

On the lowered instruction lists (before memory planning) this becomes ``y = UNARY(x) [GELU]``,
the same instruction ONNX's Gelu (opset 20) lowers to. The constants must be scalars equal to
1/√2, √2, 1 and ½ (within 1e-6 or the dtype's epsilon, relative); every intermediate must have
exactly one reader, no view and no anchor; and nothing between the first and the last
instruction may write x. Results differ from the five-node form by float rounding only.

>>> from pyipu.compiler.lower import GraphBuilder
>>> fuse_gelu(GraphBuilder(1))
0
"""

from __future__ import annotations

import math

import numpy as np

from pyipu.compiler.ir import Instr
from pyipu.compiler.lower import GraphBuilder
from pyipu.compiler.rewrites import (
    RewriteGraph,
    constant,
    rewrite_programs,
    single_reader,
    writes_any,
)
from pyipu.enums import DType, Op, UnaryFn

_FLOATS = (DType.FLOAT32, DType.FLOAT16)


def fuse_gelu(b: GraphBuilder) -> int:
    """Rewrite every subgraph's program in place; returns the number of instructions removed."""
    return rewrite_programs(b, (_fuse_at,))


def _scalar(b: GraphBuilder, t: int, want: float) -> bool:
    """t is a one-element constant equal to `want` rounded to its dtype."""
    v = constant(b, t)
    if v is None or v.size != 1 or v.dtype.kind != "f":
        return False
    return math.isclose(float(v.reshape(())), want, rel_tol=max(1e-6, float(np.finfo(v.dtype).eps)))


def _other(ins: Instr, t: int) -> int | None:
    """The operand of binary `ins` that is not t (None if both or neither are t)."""
    if len(ins.inputs) != 2 or ins.inputs.count(t) != 1:
        return None
    return ins.inputs[1] if ins.inputs[0] == t else ins.inputs[0]


def _scaled_input(b: GraphBuilder, ins: Instr) -> int | None:
    """x when ins is x · (1/√2) or x / √2, else None."""
    if ins.op == Op.MUL:
        for x, c in (ins.inputs, ins.inputs[::-1]):
            if _scalar(b, c, math.sqrt(0.5)):
                return x
    if ins.op == Op.DIV and _scalar(b, ins.inputs[1], math.sqrt(2.0)):
        return ins.inputs[0]
    return None


def _half_of(b: GraphBuilder, ins: Instr, x: int) -> bool:
    """ins is x · ½ (either order)."""
    c = _other(ins, x)
    return ins.op == Op.MUL and c is not None and _scalar(b, c, 0.5)


def _fuse_at(g: RewriteGraph, prog: list[Instr], stages: list[int], i: int) -> int:
    b = g.b
    x = _scaled_input(b, prog[i])
    if x is None or b.tensors[x].dtype not in _FLOATS:
        return 0
    shape, u = b.tensors[x].shape, prog[i].outputs[0]
    j = single_reader(g, prog, i, u)
    if j is None or prog[j].op != Op.UNARY or prog[j].attrs[:1] != (int(UnaryFn.ERF),):
        return 0
    e = prog[j].outputs[0]
    k = single_reader(g, prog, j, e)
    one = _other(prog[k], e) if k is not None else None
    if k is None or prog[k].op != Op.ADD or one is None or not _scalar(b, one, 1.0):
        return 0
    p = prog[k].outputs[0]
    m = single_reader(g, prog, k, p)
    if m is None or prog[m].op != Op.MUL:
        return 0
    q = _other(prog[m], p)
    if q is None:
        return 0
    chain = [i, j, k, m]
    if q == x:  # (x · p) · ½
        last = single_reader(g, prog, m, prog[m].outputs[0])
        if last is None or not _half_of(b, prog[last], prog[m].outputs[0]):
            return 0
        chain.append(last)
    else:  # (x · ½) · p
        h = next((n for n, ins in enumerate(prog[:m]) if q in ins.outputs), None)
        if h is None or not _half_of(b, prog[h], x) or single_reader(g, prog, h, q) != m:
            return 0
        chain.append(h)
        last = m
    out = prog[last].outputs[0]
    if any(b.tensors[t].shape != shape for t in (u, e, p, out)):
        return 0
    if len({stages[n] for n in chain}) != 1 or writes_any(b, prog, min(chain), last, {b.root(x)}):
        return 0
    if any(b.tensors[t].dtype != b.tensors[x].dtype for t in (u, e, p, out)):
        return 0
    prog[last] = Instr(Op.UNARY, (x,), (out,), (int(UnaryFn.GELU), 0, 0))
    for pos in sorted(set(chain) - {last}, reverse=True):
        del prog[pos]
        del stages[pos]
    return len(chain) - 1
