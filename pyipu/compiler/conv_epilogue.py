"""Fuse the element-wise tail of a convolution into its CONV2D instruction (docs/bytecode.md).

Patterns, on the lowered instruction lists before memory planning:

* ``CONV2D → MUL(·, k) → ADD(·, s)`` with per-channel constants k, s of shape [M, 1, 1] (a
  BatchNormalization, see ops_nn.py): folded into the weights, w' = w·k[m], bias' = bias·k + s
  (in float64). When the convolution is the weight's only reader its TENSOR_DATA is rewritten in
  place (the anchor keeps its name), else a new weight is added;
* ``CONV2D → RELU``: attrs ``activation = 1``;
* ``CONV2D → ADD(·, z) [→ RELU]`` with z of the output's shape (a residual connection): z becomes
  the last input, attrs ``residual = 1`` (and ``activation = 1``);
* ``GEMM → RELU`` (Gemm + Relu, an MLP's layers): the GEMM's optional attr ``activation = 1``.

Each intermediate tensor must have exactly one reader, no view, and no anchor. The fused
instruction takes the place of the last instruction it replaces, so every input it reads is
computed by then; nothing in between may write an input of the convolution.

>>> from pyipu.compiler.lower import GraphBuilder
>>> fuse_conv_epilogues(GraphBuilder(1))
0
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pyipu.compiler.ir import Instr, np_dtype
from pyipu.compiler.lower import WEIGHT, GraphBuilder
from pyipu.enums import ActFn, Op

ACT_RELU = int(ActFn.RELU)  # the CONV2D / GEMM `activation` attribute (ipu_fns.def)
CONV_ATTRS = 9  # without the epilogue attrs
GEMM_ATTRS = 4  # without the activation


@dataclass
class _Graph:
    """The builder plus what the patterns check: readers, views and anchors per root."""

    b: GraphBuilder
    reads: Counter[int]
    views: Counter[int]
    anchored: set[int]


def fuse_conv_epilogues(b: GraphBuilder) -> int:
    """Rewrite every subgraph's program in place; returns the number of instructions removed."""
    return rewrite_programs(b, (_fold_bn_at, _fuse_at, _fuse_gemm_relu_at))


FuseFn = Callable[["_Graph", list[Instr], list[int], int], int]


def rewrite_programs(b: GraphBuilder, fuses: Sequence[FuseFn]) -> int:
    """Apply each pattern at every position of every subgraph's program, in that order; a
    pattern returns the number of instructions it removed (0: no match). Shared with the other
    instruction-level fusions (gelu_fusion.py)."""
    reads: Counter[int] = Counter()
    for prog in b.programs:
        for ins in prog:
            reads.update(b.root(t) for t in ins.inputs)
    g = _Graph(
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


def _const(b: GraphBuilder, t: int) -> np.ndarray | None:
    """The value of a TENSOR_DATA tensor (not a view), or None; None too for the model's own
    weights when `constant_weights` is off (a session may bind other values to them, so no
    pattern may fold them)."""
    spec = b.tensors[t]
    if spec.kind != WEIGHT or spec.base is not None or spec.data is None:
        return None
    if not b.constant_weights and t in b.user_weights:
        return None
    return np.frombuffer(spec.data, np_dtype(spec.dtype)).reshape(spec.shape)


def _channel_const(b: GraphBuilder, ins: Instr, t: int, m: int) -> np.ndarray | None:
    """The [m] values of the other operand of a binary ins when it is a [m, 1, 1] constant."""
    others = [u for u in ins.inputs if u != t]
    if len(others) != 1 or len(ins.inputs) != 2:
        return None
    v = _const(b, others[0])
    if v is None or v.shape != (m, 1, 1):
        return None
    return v.reshape(m).astype(np.float64)


def _fold_bn_at(g: _Graph, prog: list[Instr], stages: list[int], i: int) -> int:
    b, reads = g.b, g.reads
    conv = prog[i]
    j = _epilogue_reader(g, prog, stages, i, Op.CONV2D, CONV_ATTRS)
    if j is None or prog[j].op != Op.MUL:
        return 0
    (y,) = conv.outputs
    spec = b.tensors[y]
    m = spec.shape[1]
    t = prog[j].outputs[0]
    k = _single_reader(g, prog, j, t)
    if k is None or prog[k].op != Op.ADD or stages[k] != stages[i]:
        return 0
    scale, shift = _channel_const(b, prog[j], y, m), _channel_const(b, prog[k], t, m)
    w = _const(b, conv.inputs[1])
    bias = _const(b, conv.inputs[2]) if len(conv.inputs) == 3 else np.zeros(m)
    out = prog[k].outputs[0]
    if scale is None or shift is None or w is None or bias is None:
        return 0
    if b.tensors[out].shape != spec.shape or b.tensors[t].shape != spec.shape:
        return 0
    if _writes_any(b, prog, i + 1, k, {b.root(u) for u in conv.inputs}):
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


def _single_reader(g: _Graph, prog: list[Instr], start: int, t: int) -> int | None:
    """Index of the one instruction after `start` that reads t, if t is a plain temporary."""
    if t != g.b.root(t) or g.reads[t] != 1 or g.views[t] or t in g.anchored:
        return None
    for j in range(start + 1, len(prog)):
        if t in prog[j].inputs:
            return j
    return None


def _epilogue_reader(
    g: _Graph, prog: list[Instr], stages: list[int], i: int, op: Op, n_attrs: int
) -> int | None:
    """For an `op` without epilogue (n_attrs attrs) at i: the one reader of its output, in the
    same stage."""
    ins = prog[i]
    if ins.op != op or len(ins.attrs) != n_attrs:
        return None
    j = _single_reader(g, prog, i, ins.outputs[0])
    return j if j is not None and stages[j] == stages[i] else None


def _writes_any(b: GraphBuilder, prog: list[Instr], lo: int, hi: int, roots: set[int]) -> bool:
    return any(b.root(o) in roots for ins in prog[lo:hi] for o in ins.outputs)


def _fuse_at(g: _Graph, prog: list[Instr], stages: list[int], i: int) -> int:
    b = g.b
    conv = prog[i]
    j = _epilogue_reader(g, prog, stages, i, Op.CONV2D, CONV_ATTRS)
    if j is None:
        return 0
    (y,) = conv.outputs
    spec = b.tensors[y]
    nxt = prog[j]
    ins_roots = {b.root(t) for t in conv.inputs}
    inputs, act, res, last, removed = conv.inputs, 0, 0, j, 1
    out = nxt.outputs
    if nxt.op == Op.RELU and b.tensors[out[0]].shape == spec.shape:
        act = ACT_RELU
    elif nxt.op == Op.ADD and len(set(nxt.inputs)) == 2:
        (z,) = [t for t in nxt.inputs if t != y]
        zs, os = b.tensors[z], b.tensors[out[0]]
        if zs.shape != spec.shape or os.shape != spec.shape or zs.dtype != spec.dtype:
            return 0
        inputs, res = (*conv.inputs, z), 1
        ins_roots.add(b.root(z))
        k = _single_reader(g, prog, j, out[0])
        if (
            k is not None
            and stages[k] == stages[i]
            and prog[k].op == Op.RELU
            and b.tensors[prog[k].outputs[0]].shape == spec.shape
        ):
            act, last, removed, out = ACT_RELU, k, 2, prog[k].outputs
    else:
        return 0
    if _writes_any(b, prog, i + 1, last, ins_roots):
        return 0
    prog[last] = Instr(Op.CONV2D, tuple(inputs), tuple(out), (*conv.attrs, act, res))
    for pos in sorted({i, j, last} - {last}, reverse=True):
        del prog[pos]
        del stages[pos]
    return removed


def _fuse_gemm_relu_at(g: _Graph, prog: list[Instr], stages: list[int], i: int) -> int:
    j = _epilogue_reader(g, prog, stages, i, Op.GEMM, GEMM_ATTRS)
    if j is None or prog[j].op != Op.RELU:
        return 0
    gemm = prog[i]
    (y,) = gemm.outputs
    out = prog[j].outputs
    spec, ospec = g.b.tensors[y], g.b.tensors[out[0]]
    if ospec.shape != spec.shape or ospec.dtype != spec.dtype:
        return 0
    if _writes_any(g.b, prog, i + 1, j, {g.b.root(t) for t in gemm.inputs}):
        return 0
    prog[j] = Instr(Op.GEMM, gemm.inputs, out, (*gemm.attrs, ACT_RELU))
    del prog[i]
    del stages[i]
    return 1
