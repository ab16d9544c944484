"""Fuse the element-wise tail of a convolution into its CONV2D instruction (docs/bytecode.md).

Patterns, on the lowered instruction lists before memory planning:

* ``CONV2D → MUL(·, k) → ADD(·, s)`` with per-channel constants k, s of shape [M, 1, 1] (a
  BatchNormalization, see ops_nn.py): folded into the weights, w' = w·k[m], bias' = bias·k + s
  (in float64). When the convolution is the weight's only reader its TENSOR_DATA is rewritten in
  place (the anchor keeps its name), else a new weight is added;
* ``CONV2D → RELU``: attrs ``activation = 1``;
* ``CONV2D → UNARY`` of a float function (ReLU6's CLIP, HardSwish, SiLU's SWISH, Sigmoid, GELU,
  LeakyRelu, ...): attrs ``activation = 2`` then the UNARY's own (fn, p0, p1), applied by the
  kernel to each block of sums it stores (bit-identical to the separate instruction);
* ``CONV2D → ADD(·, z) [→ RELU or UNARY]`` with z of the output's shape (a residual
  connection): z becomes the last input, attrs ``residual = 1`` (and the activation);
* ``GEMM → RELU`` or ``GEMM → UNARY`` (Gemm + Relu, an MLP's layers; a Linear layer's GELU): the
  GEMM's optional attrs ``activation`` (1, or 2 followed by the UNARY's fn, p0, p1).

Each intermediate tensor must have exactly one reader, no view, and no anchor. The fused
instruction takes the place of the last instruction it replaces, so every input it reads is
computed by then; nothing in between may write an input of the convolution.

>>> from pyipu.compiler.lower import GraphBuilder
>>> fuse_conv_epilogues(GraphBuilder(1))
0
"""

from __future__ import annotations

from collections import Counter

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
from pyipu.enums import ActFn, Op

ACT_RELU = int(ActFn.RELU)  # the CONV2D / GEMM `activation` attribute (ipu_fns.def)
ACT_UNARY = int(ActFn.UNARY)  # a UNARY function, its attrs last (CONV2D: after `residual`)
CONV_ATTRS = 9  # without the epilogue attrs
GEMM_ATTRS = 4  # without the activation


def fuse_conv_epilogues(b: GraphBuilder) -> int:
    """Rewrite every subgraph's program in place; returns the number of instructions removed."""
    return rewrite_programs(b, (_fold_bn_at, _fuse_at, _fuse_gemm_act_at))


def _channel_const(b: GraphBuilder, ins: Instr, t: int, m: int) -> np.ndarray | None:
    """The [m] values of the other operand of a binary ins when it is a [m, 1, 1] constant."""
    others = [u for u in ins.inputs if u != t]
    if len(others) != 1 or len(ins.inputs) != 2:
        return None
    v = constant(b, others[0])
    if v is None or v.shape != (m, 1, 1):
        return None
    return v.reshape(m).astype(np.float64)


def _fold_bn_at(g: RewriteGraph, prog: list[Instr], stages: list[int], i: int) -> int:
    b, reads = g.b, g.reads
    conv = prog[i]
    j = _epilogue_reader(g, prog, stages, i, Op.CONV2D, CONV_ATTRS)
    if j is None or prog[j].op != Op.MUL:
        return 0
    (y,) = conv.outputs
    spec = b.tensors[y]
    m = spec.shape[1]
    t = prog[j].outputs[0]
    k = single_reader(g, prog, j, t)
    if k is None or prog[k].op != Op.ADD or stages[k] != stages[i]:
        return 0
    scale, shift = _channel_const(b, prog[j], y, m), _channel_const(b, prog[k], t, m)
    w = constant(b, conv.inputs[1])
    bias = constant(b, conv.inputs[2]) if len(conv.inputs) == 3 else np.zeros(m)
    out = prog[k].outputs[0]
    if scale is None or shift is None or w is None or bias is None:
        return 0
    if b.tensors[out].shape != spec.shape or b.tensors[t].shape != spec.shape:
        return 0
    if writes_any(b, prog, i + 1, k, {b.root(u) for u in conv.inputs}):
        return 0
    npdt = np_dtype(spec.dtype)
    w2 = (w.astype(np.float64) * scale.reshape(m, 1, 1, 1)).astype(npdt)
    b2 = (bias.astype(np.float64) * scale + shift).astype(npdt)
    name = b.tensors[out].name
    inputs: tuple[int, ...] = (conv.inputs[0], _new_data(b, conv.inputs[1], w2, reads, name + ":w"))
    if len(conv.inputs) == 3:
        inputs += (_new_data(b, conv.inputs[2], b2, reads, name + ":b"),)
    else:
        inputs += (b.weight(name + ":b", b2, spec.subgraph),)
    prog[k] = Instr(Op.CONV2D, inputs, (out,), conv.attrs)
    for pos in (j, i):
        del prog[pos]
        del stages[pos]
    return 2


def _new_data(b: GraphBuilder, t: int, value: np.ndarray, reads: Counter, name: str) -> int:
    """t with `value` as its data: rewritten in place when this is its only reader."""
    if reads[t] == 1:
        b.tensors[t].data = np.ascontiguousarray(value).tobytes()
        return t
    reads[t] -= 1
    nt = b.weight(name, value, b.tensors[t].subgraph)
    reads[nt] += 1
    return nt


def _epilogue_reader(
    g: RewriteGraph, prog: list[Instr], stages: list[int], i: int, op: Op, n_attrs: int
) -> int | None:
    """For an `op` without epilogue (n_attrs attrs) at i: the one reader of its output, in the
    same stage."""
    ins = prog[i]
    if ins.op != op or len(ins.attrs) != n_attrs:
        return None
    j = single_reader(g, prog, i, ins.outputs[0])
    return j if j is not None and stages[j] == stages[i] else None


def _fuse_at(g: RewriteGraph, prog: list[Instr], stages: list[int], i: int) -> int:
    b = g.b
    conv = prog[i]
    j = _epilogue_reader(g, prog, stages, i, Op.CONV2D, CONV_ATTRS)
    if j is None:
        return 0
    (y,) = conv.outputs
    spec = b.tensors[y]
    nxt = prog[j]
    ins_roots = {b.root(t) for t in conv.inputs}
    inputs, res, last, removed = conv.inputs, 0, j, 1
    out = nxt.outputs
    act = _activation(b, nxt, y)
    if not act:
        if nxt.op != Op.ADD or len(set(nxt.inputs)) != 2:
            return 0
        (z,) = [t for t in nxt.inputs if t != y]
        zs, os = b.tensors[z], b.tensors[out[0]]
        if zs.shape != spec.shape or os.shape != spec.shape or zs.dtype != spec.dtype:
            return 0
        inputs, res = (*conv.inputs, z), 1
        ins_roots.add(b.root(z))
        k = single_reader(g, prog, j, out[0])
        if k is not None and stages[k] == stages[i]:
            act = _activation(b, prog[k], out[0])
            if act:
                last, removed, out = k, 2, prog[k].outputs
    if writes_any(b, prog, i + 1, last, ins_roots):
        return 0
    epilogue = act or (0,)
    prog[last] = Instr(
        Op.CONV2D, tuple(inputs), tuple(out), (*conv.attrs, epilogue[0], res, *epilogue[1:])
    )
    for pos in sorted({i, j, last} - {last}, reverse=True):
        del prog[pos]
        del stages[pos]
    return removed


def _activation(b: GraphBuilder, ins: Instr, y: int) -> tuple[int, ...]:
    """The epilogue activation attrs (activation[, fn, p0, p1]) when `ins` applies one to y
    (same shape and dtype: so a float function, not ISNAN/ISINF's bool), else ()."""
    out = b.tensors[ins.outputs[0]]
    if (out.shape, out.dtype) != (b.tensors[y].shape, b.tensors[y].dtype):
        return ()
    if ins.op == Op.RELU:
        return (ACT_RELU,)
    if ins.op == Op.UNARY:
        return (ACT_UNARY, *ins.attrs)
    return ()


def _fuse_gemm_act_at(g: RewriteGraph, prog: list[Instr], stages: list[int], i: int) -> int:
    j = _epilogue_reader(g, prog, stages, i, Op.GEMM, GEMM_ATTRS)
    if j is None:
        return 0
    gemm = prog[i]
    act = _activation(g.b, prog[j], gemm.outputs[0])
    if not act or writes_any(g.b, prog, i + 1, j, {g.b.root(t) for t in gemm.inputs}):
        return 0
    prog[j] = Instr(Op.GEMM, gemm.inputs, prog[j].outputs, (*gemm.attrs, *act))
    del prog[i]
    del stages[i]
    return 1
