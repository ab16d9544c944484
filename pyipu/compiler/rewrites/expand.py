"""Drop an EXPAND whose only reader broadcasts its operands anyway (docs/bytecode.md).

Exporters write ``Expand`` before a MatMul or an element-wise op to make the batch dimensions
explicit (the overlap-I/O seed model expands its [256, 256] input to [4, 4, 256, 256] before
four batched MatMuls). ``MATMUL``, ``ADD``/``SUB``/``MUL``/``DIV``, ``BINARY`` and ``WHERE``
broadcast with numpy's rules, so when reading the unexpanded tensor gives the reader the same
output shape, the EXPAND (a copy as large as the reader's operand) is removed and the reader
reads the original. Results are identical. The expanded tensor must have exactly one reader,
no view and no anchor, in the same pipeline stage, and nothing in between may write the
original.

>>> from pyipu.compiler.lower import GraphBuilder
>>> drop_broadcast_expands(GraphBuilder(1))
0
"""

from __future__ import annotations

import numpy as np

from pyipu.compiler.ir import Instr
from pyipu.compiler.lower import GraphBuilder
from pyipu.compiler.rewrites import RewriteGraph, rewrite_programs, single_reader, writes_any
from pyipu.enums import Op

_BROADCASTING = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.BINARY, Op.WHERE, Op.MATMUL)


def drop_broadcast_expands(b: GraphBuilder) -> int:
    """Rewrite every subgraph's program in place; returns the number of instructions removed."""
    return rewrite_programs(b, (_drop_at,))


def _result_shape(op: Op, shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The reader's output shape for these operand shapes, None if they do not broadcast."""
    try:
        if op != Op.MATMUL:
            return tuple(np.broadcast_shapes(*shapes))
        a, c = shapes
        if len(a) < 2 or len(c) < 2 or a[-1] != c[-2]:
            return None
        return (*np.broadcast_shapes(a[:-2], c[:-2]), a[-2], c[-1])
    except ValueError:
        return None


def _drop_at(g: RewriteGraph, prog: list[Instr], stages: list[int], i: int) -> int:
    b = g.b
    if prog[i].op != Op.EXPAND:
        return 0
    (x,), (t,) = prog[i].inputs, prog[i].outputs
    j = single_reader(g, prog, i, t)
    if j is None or stages[j] != stages[i]:
        return 0
    reader = prog[j]
    if reader.op not in _BROADCASTING or reader.inputs.count(t) != 1:
        return 0
    inputs = tuple(x if u == t else u for u in reader.inputs)
    out_shape = b.tensors[reader.outputs[0]].shape
    if _result_shape(reader.op, [b.tensors[u].shape for u in inputs]) != out_shape:
        return 0
    if writes_any(b, prog, i + 1, j, {b.root(x)}):
        return 0
    prog[j] = Instr(reader.op, inputs, reader.outputs, reader.attrs)
    del prog[i]
    del stages[i]
    return 1
