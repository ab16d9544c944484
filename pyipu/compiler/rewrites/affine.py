"""Fuse chains of element-wise arithmetic with constants into one SCALE_SHIFT (docs/bytecode.md).

A BatchNormalization that does not follow a convolution (DenseNet's pre-activation BN after a
Concat, a BN on a network input) lowers to ``MUL(x, k) → ADD(·, s)``, Caffe-converted models
add a Scale layer (another MUL and ADD), and a ReLU usually follows: up to five passes over the
activations. On the lowered instruction lists (before memory planning) a chain of

    MUL(x, k), ADD(x, k), SUB(x, k), SUB(k, x) or DIV(x, k)   (either order for MUL and ADD)

where every k is a constant that is a scalar or varies along one axis of x only (the same axis
for the whole chain), optionally ended by a RELU, becomes ``y = SCALE_SHIFT(x, S, T)`` with
``y = act(x · S[c] + T[c])``: one pass. S and T are composed in float64 and stored in x's dtype,
so results differ from the unfused chain by float rounding only (as BatchNorm folded into a
convolution). Each intermediate must have exactly one reader, no view and no anchor, all in the
same pipeline stage, and nothing between the first and the last instruction may write x. A chain
of one instruction is left alone (it is one pass already). Runs after conv_epilogue.py, so a
BatchNorm that follows a convolution is folded into its weights first.

>>> from pyipu.compiler.lower import GraphBuilder
>>> fuse_affine_chains(GraphBuilder(1))
0
"""

from __future__ import annotations

import numpy as np

from pyipu.compiler.ir import Instr, np_dtype
from pyipu.compiler.lower import GraphBuilder
from pyipu.compiler.rewrites import (
    RewriteGraph,
    constant,
    rewrite_programs,
    single_reader,
    writes_any,
)
from pyipu.compiler.rewrites.conv_epilogue import ACT_RELU
from pyipu.enums import DType, Op

_ARITH = (Op.MUL, Op.ADD, Op.SUB, Op.DIV)


def fuse_affine_chains(b: GraphBuilder) -> int:
    """Rewrite every subgraph's program in place; returns the number of instructions removed."""
    return rewrite_programs(b, (_fuse_at,))


def _along(shape: tuple[int, ...], kshape: tuple[int, ...]) -> int | None:
    """The axis of x (shape) along which a constant of kshape varies: -1 if it is a scalar (all
    ones), None if it varies along several axes or does not broadcast to x without growing it."""
    if len(kshape) > len(shape):
        return None
    axes = [len(shape) - len(kshape) + d for d, n in enumerate(kshape) if n != 1]
    if not axes:
        return -1
    if len(axes) == 1 and kshape[axes[0] - len(shape) + len(kshape)] == shape[axes[0]]:
        return axes[0]
    return None


class _Chain:
    """y = x · scale + shift so far, per index along `axis` (length-1 arrays while scalar)."""

    def __init__(self, x: int) -> None:
        self.x, self.axis = x, -1
        self.scale, self.shift = np.ones(1), np.zeros(1)

    def step(self, b: GraphBuilder, ins: Instr, t: int) -> bool:
        """Apply ins, which reads t (the chain so far); False if it does not fit."""
        if ins.op not in _ARITH or len(ins.inputs) != 2 or ins.inputs[0] == ins.inputs[1]:
            return False
        x_first = ins.inputs[0] == t
        if ins.op == Op.DIV and not x_first:
            return False  # k / x is not affine in x
        (k,) = [u for u in ins.inputs if u != t]
        value = constant(b, k)
        shape = b.tensors[self.x].shape
        if value is None or b.tensors[ins.outputs[0]].shape != shape:
            return False
        axis = _along(shape, value.shape)
        if axis is None or (axis >= 0 and self.axis >= 0 and axis != self.axis):
            return False
        if axis >= 0:
            self.axis = axis
        k64 = value.astype(np.float64).reshape(-1)
        if ins.op == Op.MUL:
            self.scale, self.shift = self.scale * k64, self.shift * k64
        elif ins.op == Op.ADD:
            self.shift = self.shift + k64
        elif ins.op == Op.SUB and x_first:
            self.shift = self.shift - k64
        elif ins.op == Op.SUB:
            self.scale, self.shift = -self.scale, k64 - self.shift
        else:  # DIV(x, k)
            self.scale, self.shift = self.scale / k64, self.shift / k64
        return True


def _fuse_at(g: RewriteGraph, prog: list[Instr], stages: list[int], i: int) -> int:
    b = g.b
    first = prog[i]
    if first.op not in _ARITH or len(first.inputs) != 2:
        return 0
    for x in first.inputs:
        spec = b.tensors[x]
        if spec.dtype not in (DType.FLOAT32, DType.FLOAT16) or not spec.shape:
            continue
        chain = _Chain(x)
        if constant(b, x) is not None or not chain.step(b, first, x):
            continue
        positions, t, act = [i], first.outputs[0], 0
        while act == 0:
            j = single_reader(g, prog, positions[-1], t)
            if j is None or stages[j] != stages[i]:
                break
            if prog[j].op == Op.RELU:
                act = ACT_RELU
            elif not chain.step(b, prog[j], t):
                break
            positions.append(j)
            t = prog[j].outputs[0]
        if len(positions) < 2 or writes_any(b, prog, i + 1, positions[-1], {b.root(x)}):
            continue
        _emit(b, prog, stages, positions, chain, act)
        return len(positions) - 1
    return 0


def _emit(
    b: GraphBuilder,
    prog: list[Instr],
    stages: list[int],
    positions: list[int],
    chain: _Chain,
    act: int,
) -> None:
    """Replace the chain at `positions` by one SCALE_SHIFT at the last of them."""
    spec = b.tensors[chain.x]
    axis = max(chain.axis, 0)
    npdt = np_dtype(spec.dtype)
    scale = np.broadcast_to(chain.scale, (spec.shape[axis],)).astype(npdt)
    shift = np.broadcast_to(chain.shift, (spec.shape[axis],)).astype(npdt)
    last = positions[-1]
    out = prog[last].outputs
    name, sub = b.tensors[out[0]].name, b.tensors[out[0]].subgraph
    inputs = (chain.x, b.weight(name + ":scale", scale, sub), b.weight(name + ":shift", shift, sub))
    prog[last] = Instr(Op.SCALE_SHIFT, inputs, out, (axis, act))
    for pos in sorted(positions[:-1], reverse=True):
        del prog[pos]
        del stages[pos]
