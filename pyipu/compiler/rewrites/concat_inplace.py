"""Concatenations without a copy: the inputs of a CONCAT are computed in place in its output.

When the dims before the concatenation axis are all 1 (batch-1 channel concatenations: Inception
blocks, SqueezeNet's fire modules, DenseNet's dense blocks), input i of a CONCAT is one
contiguous byte range of the output. If the output is written only by the CONCAT and is no
anchor, every input is a plain temporary of the same program (an arena root, no anchor, written
only by instructions before the CONCAT) and every range
starts at a multiple of 64 bytes (the container's tensor offset rule), the inputs become views
of the output at their offsets and the CONCAT is dropped: the instructions computing them write
straight into the output. Applied in program order, a chain of concatenations (DenseNet: each
layer's output joins everything before it) ends up as one buffer written once.

Runs after the other instruction-level rewrites, on the lowered programs before memory planning
(memory.py gives a root one lifetime covering every view, so the output's storage is live from
its first input's writer on).

>>> from pyipu.compiler.lower import GraphBuilder
>>> concat_in_place(GraphBuilder(1))
0
"""

from __future__ import annotations

import math

from pyipu.compiler.ir import ALIGN, Instr
from pyipu.compiler.lower import GraphBuilder
from pyipu.enums import Op


def concat_in_place(b: GraphBuilder) -> int:
    """Rewrite every subgraph's program in place; returns the number of CONCATs dropped."""
    anchored = {b.root(a.tensor) for a in b.anchors} | b.claimed
    dropped = 0
    for prog, stages in zip(b.programs, b.instr_stages, strict=True):
        i = 0
        while i < len(prog):
            if prog[i].op == Op.CONCAT and _alias_inputs(b, prog, stages, i, anchored):
                del prog[i]
                del stages[i]
                dropped += 1
            else:
                i += 1
    return dropped


def _alias_inputs(
    b: GraphBuilder, prog: list[Instr], stages: list[int], i: int, anchored: set[int]
) -> bool:
    """Make the inputs of the CONCAT at i views of its output, if that is safe."""
    ins = prog[i]
    (out,) = ins.outputs
    spec = b.tensors[out]
    axis = ins.attrs[0] % len(spec.shape)
    root = b.root(out)
    if math.prod(spec.shape[:axis]) != 1 or len(set(ins.inputs)) != len(ins.inputs):
        return False
    if root in anchored or _writers(b, prog, root) != [i]:
        return False
    offsets, at = [], spec.offset
    for t in ins.inputs:
        writers = _writers(b, prog, t)  # none for inputs, weights and views: they stay
        ok = (
            t not in anchored
            and bool(writers)
            and all(w < i and stages[w] == stages[i] for w in writers)
            and at % ALIGN == 0
        )
        if not ok:
            return False
        offsets.append(at)
        at += b.tensors[t].nbytes
    for t, off in zip(ins.inputs, offsets, strict=True):
        for v in b.tensors:  # views of the input follow it
            if v.base == t:
                v.base, v.offset = root, off + v.offset
        b.tensors[t].base, b.tensors[t].offset = root, off
    return True


def _writers(b: GraphBuilder, prog: list[Instr], root: int) -> list[int]:
    """Positions of the instructions that write root (or a view of it): none if root is not a
    root written by this program."""
    return [j for j, ins in enumerate(prog) if any(b.root(o) == root for o in ins.outputs)]
