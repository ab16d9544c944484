"""Instruction-level rewrites of the lowered program (before memory planning), and what
they share (conv_epilogue.py, gelu.py, affine.py, expand.py; concat_inplace.py rewrites
tensors): the graph facts their patterns check, the driver that applies patterns over every
subgraph's program, and the checks every pattern makes.

>>> from pyipu.compiler.lower import GraphBuilder
>>> rewrite_programs(GraphBuilder(1), ())
0
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pyipu.compiler.ir import Instr, np_dtype
from pyipu.compiler.lower import WEIGHT, GraphBuilder


@dataclass
class RewriteGraph:
    """The builder plus what the patterns check: readers, views and anchors per root."""

    b: GraphBuilder
    reads: Counter[int]
    views: Counter[int]
    anchored: set[int]


FuseFn = Callable[[RewriteGraph, list[Instr], list[int], int], int]


def rewrite_programs(b: GraphBuilder, fuses: Sequence[FuseFn]) -> int:
    """Apply each pattern at every position of every subgraph's program, in that order; a
    pattern returns the number of instructions it removed (0: no match)."""
    reads: Counter[int] = Counter()
    for prog in b.programs:
        for ins in prog:
            reads.update(b.root(t) for t in ins.inputs)
    g = RewriteGraph(
        b,
        reads,
        Counter(b.root(i) for i, t in enumerate(b.tensors) if t.base is not None),
        {b.root(a.tensor) for a in b.anchors} | b.claimed,
    )
    removed = 0
    for sg, prog in enumerate(b.programs):
        stages = b.instr_stages[sg]
        for fuse in fuses:
            i = 0
            while i < len(prog):
                fused = fuse(g, prog, stages, i)
                removed += fused
                i += 1 if not fused else 0
    return removed


def constant(b: GraphBuilder, t: int) -> np.ndarray | None:
    """The value of a TENSOR_DATA tensor (not a view), or None; None too for the model's own
    weights when `constant_weights` is off (a session may bind other values to them, so no
    pattern may fold them)."""
    spec = b.tensors[t]
    if spec.kind != WEIGHT or spec.base is not None or spec.data is None:
        return None
    if not b.constant_weights and t in b.user_weights:
        return None
    return np.frombuffer(spec.data, np_dtype(spec.dtype)).reshape(spec.shape)


def single_reader(g: RewriteGraph, prog: list[Instr], start: int, t: int) -> int | None:
    """Index of the one instruction after `start` that reads t, if t is a plain temporary."""
    if t != g.b.root(t) or g.reads[t] != 1 or g.views[t] or t in g.anchored:
        return None
    for j in range(start + 1, len(prog)):
        if t in prog[j].inputs:
            return j
    return None


def writes_any(b: GraphBuilder, prog: list[Instr], lo: int, hi: int, roots: set[int]) -> bool:
    """Does an instruction of prog[lo:hi] write one of `roots` (a fused instruction moves
    past them, so none may change what it reads)?"""
    return any(b.root(o) in roots for ins in prog[lo:hi] for o in ins.outputs)
