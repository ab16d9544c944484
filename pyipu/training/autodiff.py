"""Reverse-mode differentiation of an ONNX graph, written as more ONNX nodes.

`gradients(model, loss, wrt)` returns the model with the backward pass appended: for each tensor
of `wrt` (weights or inputs) a value holding d(loss)/d(tensor), computed by standard ONNX ops at
the model's opset, so pyipu's compiler and kernels run the backward pass as they run any model
(and any ONNX runtime can check it). Each op's rule lives in a `rules_*.py` module (registered
in registry.py); an op on the path from `wrt` to the loss without a rule is an
`UnsupportedOpError` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from pyipu.compiler.errors import CompileError, UnsupportedOpError
from pyipu.training.nodes import NodeWriter

MIN_OPSET = 9  # the backward ops used (Where, OneHot, ConstantOfShape, Sign) exist from 9
FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)


class GradGraph(NodeWriter):
    """The backward nodes being written, with the forward graph's static shapes at hand."""

    def __init__(self, model: onnx.ModelProto) -> None:
        super().__init__(
            next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1),
            "grad",
        )
        inferred = shape_inference.infer_shapes(model, strict_mode=True)
        self.types: dict[str, tuple[int, tuple[int, ...]]] = {}
        for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
            t = v.type.tensor_type
            if v.type.HasField("tensor_type") and t.HasField("shape"):
                dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
                self.types[v.name] = (t.elem_type, dims)
        for init in model.graph.initializer:
            self.types[init.name] = (init.data_type, tuple(init.dims))
        self.constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        for n in model.graph.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.constants[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)

    # --- facts about forward values --------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self.types or any(d < 0 for d in self.types[name][1]):
            raise CompileError(f"training needs static shapes: {name!r} has none")
        return self.types[name][1]

    def dtype(self, name: str) -> int:
        return self.types[name][0]

    def constant(self, name: str) -> np.ndarray | None:
        """A compile-time value (an initializer or a Constant's output), else None."""
        return self.constants.get(name)

    # --- writing nodes ---------------------------------------------------------------------
    def const(self, value: Any, like: str | None = None) -> str:
        """A Constant; `like` gives it that value's element type."""
        dtype = helper.tensor_dtype_to_np_dtype(self.dtype(like)) if like is not None else None
        return super().const(value, dtype)

    def unbroadcast(self, grad: str, grad_shape: Sequence[int], target: str) -> str:
        """`grad` (of a broadcast result's shape) summed back to `target`'s shape."""
        want = self.shape(target)
        have = tuple(grad_shape)
        if have == want:
            return grad
        lead = len(have) - len(want)
        axes = [i for i in range(len(have)) if i < lead or (want[i - lead] == 1 and have[i] != 1)]
        out = self.reduce("ReduceSum", grad, axes, keepdims=1) if axes else grad
        return self.reshape(out, want)

    def add_all(self, grads: list[str]) -> str:
        return grads[0] if len(grads) == 1 else self.op("Sum", grads)


def gradients(
    model: onnx.ModelProto,
    loss: str,
    wrt: Sequence[str],
    origin: dict[str, onnx.NodeProto] | None = None,
    changing: Sequence[str] = (),
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """The model with d(loss)/d(t) for each t of `wrt` computed after the forward pass, and the
    name of each gradient value. The loss must be a float tensor (a scalar, usually): the
    gradient of its sum is taken. `origin`, when given, receives the forward node each backward
    node was written for (by name; the seed and the final sums have none). `changing` names
    initializers that are not constants either (state a training step updates, as running
    statistics): nothing computed from them is folded."""
    from pyipu.training import rules_index, rules_math, rules_nn, rules_shape  # noqa: F401
    from pyipu.training.registry import RULES

    model = _static_shapes(model, [*wrt, *changing])
    g = GradGraph(model)
    if g.opset < MIN_OPSET:
        raise CompileError(
            f"training needs opset {MIN_OPSET} or later (the model has {g.opset}): upgrade it "
            "with onnx.version_converter or pyipu.Converter"
        )
    nodes = list(model.graph.node)
    produced = {o: n for n in nodes for o in n.output}
    known = set(g.types) | set(produced)
    for name in [loss, *wrt]:
        if name not in known:
            raise CompileError(f"{name!r} is not a value of the model")
    if g.dtype(loss) not in FLOATS:
        raise CompileError(f"the loss {loss!r} is not a float tensor")
    live, needed = _paths(g, nodes, loss, wrt)
    grads: dict[str, list[str]] = {
        loss: [g.op("ConstantOfShape", [g.ints(g.shape(loss))], value=_one(g.dtype(loss)))]
    }
    for n in reversed(nodes):
        start = len(g.nodes)
        outs = [g.add_all(grads[o]) if o in grads else None for o in n.output]
        if not any(outs):
            continue
        for o, go in zip(n.output, outs, strict=True):  # a gradient has its value's type
            if go is not None and o in g.types:
                g.types.setdefault(go, g.types[o])
        need = [i in live and i in needed and i != "" for i in n.input]
        if not any(need):
            continue
        rule = RULES.get(n.op_type)
        if rule is None:
            raise UnsupportedOpError(
                f"no gradient for {n.op_type} (node {n.name or n.output[0]!r}): the op lies "
                f"between {sorted(set(wrt) & live)[:3]} and the loss {loss!r}"
            )
        for i, gi in enumerate(rule(g, n, outs, need)):
            if gi is not None and need[i]:
                grads.setdefault(n.input[i], []).append(gi)
        if origin is not None:
            origin.update((m.name, n) for m in g.nodes[start:])
    names: dict[str, str] = {}
    for t in wrt:
        if t not in grads:  # the loss does not depend on it: its gradient is zero
            grads[t] = [g.op("ConstantOfShape", [g.ints(g.shape(t))], value=_zero(g.dtype(t)))]
        names[t] = g.add_all(grads[t])
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.node.extend(g.nodes)
    return out, names


def _paths(
    g: GradGraph, nodes: Sequence[onnx.NodeProto], loss: str, wrt: Sequence[str]
) -> tuple[set[str], set[str]]:
    """The values that depend on a `wrt` tensor through float ops, and those the loss depends
    on: a gradient flows through their intersection."""
    live = set(wrt)
    for n in nodes:
        if any(i in live for i in n.input):
            live.update(o for o in n.output if o and g.types.get(o, (0,))[0] in FLOATS)
    needed = {loss}
    for n in reversed(nodes):
        if any(o in needed for o in n.output):
            needed.update(n.input)
    return live, needed


def differentiable(model: onnx.ModelProto, loss: str, candidates: Sequence[str]) -> list[str]:
    """The candidates (weights) the loss depends on through float ops: those a gradient
    reaches, in the candidates' order."""
    folded = _static_shapes(model, candidates)
    live, needed = _paths(GradGraph(folded), list(folded.graph.node), loss, candidates)
    return [c for c in candidates if c in needed and c in live]


def _static_shapes(model: onnx.ModelProto, wrt: Sequence[str]) -> onnx.ModelProto:
    """The model with its shape computations folded (Shape of a statically shaped value, and
    the integer arithmetic on it), as exporters write them for `x.view(b, s, h, d)`: shape
    inference alone leaves those Reshapes' outputs unknown. The `wrt` initializers are held
    out of the folding, so nothing computed from them becomes a constant."""
    from pyipu.passes.folding import ConstantFolding, ConstInputShape

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    held = [i for i in g.initializer if i.name in set(wrt)]
    if held:
        keep = [i for i in g.initializer if i.name not in set(wrt)]
        del g.initializer[:]
        g.initializer.extend(keep)
        declared = {v.name for v in g.input}
        g.input.extend(
            helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
            for i in held
            if i.name not in declared
        )
    while True:
        count = len(g.node)
        out = ConstantFolding().run(ConstInputShape().run(out))
        g = out.graph
        if len(g.node) == count:
            break
    if held:
        names = {i.name for i in held} - {v.name for v in model.graph.input}
        kept_inputs = [v for v in g.input if v.name not in names]
        del g.input[:]
        g.input.extend(kept_inputs)
        g.initializer.extend(held)
    return out


def _one(dtype: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones(1, helper.tensor_dtype_to_np_dtype(dtype)))


def _zero(dtype: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(1, helper.tensor_dtype_to_np_dtype(dtype)))
