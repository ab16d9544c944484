"""Linear layers as one GEMM: a MatMul by a 2-D matrix followed by the Add of its bias.

PyTorch exports `nn.Linear` on a tensor of more than two dims (a transformer's [batch, tokens,
features], ConvNeXt's channels-last blocks) as MatMul + Add, so the products are written, read
back and written again:

    y = MATMUL(a[..., K], w[K, N])
    z = ADD(y, c)        (either operand order)

becomes ``z = GEMM(a, w, c)`` (transA 0, transB 0, alpha 1, beta 1), which adds c to each block
of sums while they are in cache, and whose activation the epilogue rewrite (conv_epilogue.py)
can then take over as well (Linear → GELU / ReLU). c may be the bias row (shape [N] or
[1, ..., 1, N]), a scalar, a tensor of z's own shape (a residual connection) or, for 2-D z, a
column [M, 1]. y must have
exactly one reader, no view and no anchor; z must have y's shape; a, w and c float32 or float16;
nothing between the two instructions may write a, w or c. The sums are the MATMUL's, the addend
added once to each, so float32 results equal the two-instruction form; float16 ones are rounded
to half once, after the addend, instead of before it too.

>>> from pyipu.compiler.lower import GraphBuilder
>>> fuse_linear(GraphBuilder(1))
0
"""

from __future__ import annotations

import math

from pyipu.compiler.ir import Instr, f64_bits
from pyipu.compiler.lower import GraphBuilder
from pyipu.compiler.rewrites import RewriteGraph, rewrite_programs, single_reader, writes_any
from pyipu.enums import DType, Op

_FLOATS = (DType.FLOAT32, DType.FLOAT16)
_ONE = f64_bits(1.0)


def fuse_linear(b: GraphBuilder) -> int:
    """Rewrite every subgraph's program in place; returns the number of instructions removed."""
    return rewrite_programs(b, (_fuse_at,))


def _addend_fits(c: tuple[int, ...], z: tuple[int, ...]) -> bool:
    """Does GEMM take an addend of shape c for an output of shape z (docs/bytecode.md)?"""
    if c == z or (len(z) == 2 and c == (z[0], 1)):  # z itself, a 2-D column
        return True
    return len(c) <= len(z) and math.prod(c[:-1]) == 1 and (not c or c[-1] in (1, z[-1]))


def _fuse_at(g: RewriteGraph, prog: list[Instr], stages: list[int], i: int) -> int:
    b, mm = g.b, prog[i]
    if mm.op != Op.MATMUL:
        return 0
    a, w = mm.inputs
    (y,) = mm.outputs
    ys = b.tensors[y]
    if ys.dtype not in _FLOATS or len(b.tensors[w].shape) != 2 or len(b.tensors[a].shape) < 2:
        return 0
    j = single_reader(g, prog, i, y)
    if j is None or stages[j] != stages[i] or prog[j].op != Op.ADD:
        return 0
    add = prog[j]
    others = [t for t in add.inputs if t != y]
    if len(others) != 1:
        return 0
    (c,) = others
    (z,) = add.outputs
    if b.tensors[z].shape != ys.shape or not _addend_fits(b.tensors[c].shape, ys.shape):
        return 0
    if writes_any(b, prog, i + 1, j, {b.root(t) for t in (a, w, c)}):
        return 0
    prog[j] = Instr(Op.GEMM, (a, w, c), (z,), (0, 0, _ONE, _ONE))
    del prog[i]
    del stages[i]
    return 1
