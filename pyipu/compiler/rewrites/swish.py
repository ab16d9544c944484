"""Recognise SiLU written as x · Sigmoid(x) and emit one UNARY SWISH instruction (alpha 1).

PyTorch exports `nn.SiLU` (EfficientNet, YOLO, LLaMA-style MLPs) as two element-wise nodes, a
Sigmoid and a Mul, so every activation is read twice and written twice:

    s = Sigmoid(x)
    y = x · s      (either operand order)

On the lowered instruction lists this becomes ``y = UNARY(x) [SWISH, 1]``, the instruction ONNX's
Swish (opset 24) lowers to. x, s and y must have one shape and dtype (a squeeze-excite gate,
which broadcasts, is left alone), s must have exactly one reader, no view and no anchor, and
nothing between the two instructions may write x. Results differ from the two-node form by
float rounding only (x / (1 + e^−x) instead of x · (1 / (1 + e^−x))).

>>> from pyipu.compiler.lower import GraphBuilder
>>> fuse_swish(GraphBuilder(1))
0
"""

from __future__ import annotations

from pyipu.compiler.ir import Instr, f64_bits
from pyipu.compiler.lower import GraphBuilder
from pyipu.compiler.rewrites import RewriteGraph, rewrite_programs, single_reader, writes_any
from pyipu.enums import DType, Op, UnaryFn

_FLOATS = (DType.FLOAT32, DType.FLOAT16)


def fuse_swish(b: GraphBuilder) -> int:
    """Rewrite every subgraph's program in place; returns the number of instructions removed."""
    return rewrite_programs(b, (_fuse_at,))


def _fuse_at(g: RewriteGraph, prog: list[Instr], stages: list[int], i: int) -> int:
    b, sig = g.b, prog[i]
    if sig.op != Op.UNARY or sig.attrs[:1] != (int(UnaryFn.SIGMOID),):
        return 0
    x, s = sig.inputs[0], sig.outputs[0]
    j = single_reader(g, prog, i, s)
    if j is None or prog[j].op != Op.MUL or sorted(prog[j].inputs) != sorted((x, s)):
        return 0
    y = prog[j].outputs[0]
    spec = b.tensors[x]
    if spec.dtype not in _FLOATS or any(
        (b.tensors[t].shape, b.tensors[t].dtype) != (spec.shape, spec.dtype) for t in (s, y)
    ):
        return 0
    if stages[i] != stages[j] or writes_any(b, prog, i + 1, j, {b.root(x)}):
        return 0
    prog[j] = Instr(Op.UNARY, (x,), (y,), (int(UnaryFn.SWISH), f64_bits(1.0), 0))
    del prog[i]
    del stages[i]
    g.reads[b.root(x)] -= 1  # read once now, by the SWISH
    return 1
