"""fuse_bn_into_conv and fuse_activation: fewer nodes, the same function.

fuse_bn_into_conv folds an inference BatchNormalization that is the only reader of a Conv whose
weights (and bias) are initializers into that Conv's weights and bias.

fuse_matmul_add_bias_into_gemm (onnxoptimizer's name) turns MatMul(A, B) + C with a 2-D A and
constant B and C into Gemm(A, B, C).

fuse_activation merges activation chains into one standard ONNX op, so the result stays a plain
ONNX model any runtime accepts (the compiler then emits one instruction instead of several):
  - clamps in a row (Relu, Clip with constant bounds, Max/Min with a constant scalar) become one
    Relu or Clip with the intersected bounds;
  - x * HardSigmoid(x) with alpha=1/6, beta=0.5 becomes HardSwish (opset >= 14).
An intermediate result read by anything else, or a graph output, blocks the merge.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import NodeProto, TensorProto, helper, numpy_helper

from pyipu.passes.base import Pass, register
from pyipu.passes.graph import (
    FLOAT_TYPES,
    LazyArrays,
    NameGen,
    constant_values,
    consumers,
    default_opset,
    drop_nodes,
    remove_unused_constants,
    value_types,
)


def _attr(node: NodeProto, name: str, default: float | int) -> float | int:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _sole_reader(readers: dict, outputs: set[str], name: str) -> int | None:
    """The index of the only node reading `name` (not a graph output), else None."""
    uses = readers.get(name, [])
    if name in outputs or len(uses) != 1 or uses[0][1] < 0:
        return None
    return uses[0][0]


@register("fuse_bn_into_conv")
class FuseBnIntoConv(Pass):
    """Conv → BatchNormalization (inference) becomes one Conv with rescaled weights and bias."""

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        g = onnx_model.graph
        inits = LazyArrays(g)
        readers = consumers(g)
        outputs = {o.name for o in g.output}
        fresh = NameGen(g)
        removed: set[int] = set()
        for conv in g.node:
            if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
                continue
            bn_index = _sole_reader(readers, outputs, conv.output[0])
            if bn_index is None or not _fusable(conv, g.node[bn_index], inits):
                continue
            bn = g.node[bn_index]
            w = inits[conv.input[1]].astype(np.float64)
            b = inits[conv.input[2]] if len(conv.input) > 2 and conv.input[2] else 0.0
            scale, bias, mean, var = (inits[n].astype(np.float64) for n in bn.input[1:5])
            factor = scale / np.sqrt(var + float(_attr(bn, "epsilon", 1e-5)))
            dtype = inits[conv.input[1]].dtype
            new_w = (w * factor.reshape(-1, *([1] * (w.ndim - 1)))).astype(dtype)
            new_b = ((np.asarray(b, np.float64) - mean) * factor + bias).astype(dtype)
            w_name, b_name = fresh(conv.input[1] + "_bn"), fresh(bn.output[0] + "_bias")
            g.initializer.extend(
                [numpy_helper.from_array(new_w, w_name), numpy_helper.from_array(new_b, b_name)]
            )
            conv.input[:] = [conv.input[0], w_name, b_name]
            conv.output[0] = bn.output[0]
            removed.add(bn_index)
        drop_nodes(g, removed)
        remove_unused_constants(g)
        return onnx_model


def _fusable(conv: NodeProto, bn: NodeProto, inits: LazyArrays) -> bool:
    if bn.op_type != "BatchNormalization" or bn.input[0] != conv.output[0]:
        return False
    if _attr(bn, "training_mode", 0) or any(o for o in bn.output[1:]):
        return False
    names = [conv.input[1], *(n for n in conv.input[2:3] if n), *bn.input[1:5]]
    if len(bn.input) < 5 or not all(n in inits for n in names):
        return False
    w = inits[conv.input[1]]
    if w.dtype.kind != "f":
        return False
    return all(inits[n].shape == (w.shape[0],) for n in bn.input[1:5])


def _clamp(node: NodeProto, consts: dict[str, np.ndarray], opset: int) -> tuple | None:
    """(input, lo, hi) when the node clamps one runtime input to constant bounds."""
    if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    op = node.op_type
    if op == "Relu":
        return node.input[0], 0.0, math.inf
    if op == "Clip":
        if opset < 11:
            return node.input[0], _attr(node, "min", -math.inf), _attr(node, "max", math.inf)
        bounds = []
        for slot, default in ((1, -math.inf), (2, math.inf)):
            name = node.input[slot] if len(node.input) > slot else ""
            if name and name not in consts:
                return None
            bounds.append(float(consts[name]) if name else default)
        return node.input[0], *bounds
    if op in ("Max", "Min") and len(node.input) == 2:
        x, c = node.input
        if x in consts:
            x, c = c, x
        if x in consts or c not in consts or consts[c].size != 1:
            return None
        v = float(consts[c].reshape(()))
        return (x, v, math.inf) if op == "Max" else (x, -math.inf, v)
    return None


@register("fuse_activation")
class FuseActivation(Pass):
    """Merge clamp chains into one Relu/Clip and x*HardSigmoid(x) into HardSwish."""

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        g = onnx_model.graph
        opset = default_opset(onnx_model)
        consts = constant_values(g, max_size=1)
        types = value_types(onnx_model)
        fresh = NameGen(g)
        outputs = {o.name for o in g.output}
        changed = True
        while changed:  # one merge per round: the reader map changes with each
            changed = False
            readers = consumers(g)
            for i, first in enumerate(g.node):
                j = _sole_reader(readers, outputs, first.output[0]) if first.output else None
                if j is None:
                    continue
                second = g.node[j]
                merged = self._merge_clamps(first, second, consts, opset, types, fresh, g)
                if merged is None and opset >= 14:
                    merged = _hard_swish(first, second)
                if merged is not None:
                    second.CopyFrom(merged)
                    del g.node[i]
                    changed = True
                    break
        remove_unused_constants(g)
        return onnx_model

    @staticmethod
    def _merge_clamps(first, second, consts, opset, types, fresh, g) -> NodeProto | None:
        a, b = _clamp(first, consts, opset), _clamp(second, consts, opset)
        if a is None or b is None or b[0] != first.output[0]:
            return None
        lo, hi = max(a[1], b[1]), min(a[2], b[2])
        if lo > hi:
            return None  # disjoint bounds: the chain is a constant, leave it
        x, out = a[0], second.output[0]
        name = second.name or first.name
        if lo == 0.0 and hi == math.inf:
            return helper.make_node("Relu", [x], [out], name=name)
        if opset < 11:
            return helper.make_node("Clip", [x], [out], name=name, min=lo, max=hi)
        dtype = helper.tensor_dtype_to_np_dtype(types.get(x, (TensorProto.FLOAT, None))[0])
        if dtype.kind != "f" and (math.isinf(lo) or math.isinf(hi)):
            return None
        inputs = [x]
        for tag, v in (("min", lo), ("max", hi)):
            if math.isinf(v) and tag == "max":
                break
            t = fresh(f"{out}_{tag}")
            g.initializer.append(numpy_helper.from_array(np.array(v, dtype=dtype), t))
            inputs.append(t)
        return helper.make_node("Clip", inputs, [out], name=name)


def _hard_swish(first: NodeProto, second: NodeProto) -> NodeProto | None:
    """Mul(x, HardSigmoid(x)) with HardSwish's constants."""
    if first.op_type != "HardSigmoid" or second.op_type != "Mul":
        return None
    if not (
        math.isclose(_attr(first, "alpha", 0.2), 1 / 6, rel_tol=1e-6)
        and math.isclose(_attr(first, "beta", 0.5), 0.5)
    ):
        return None
    x = first.input[0]
    if sorted(second.input) != sorted([x, first.output[0]]):
        return None
    return helper.make_node("HardSwish", [x], [second.output[0]], name=second.name)


@register("fuse_matmul_add_bias_into_gemm")
class FuseMatMulAddIntoGemm(Pass):
    """MatMul(A, B) + C → Gemm(A, B, C) for a 2-D A, constant B [K, N] and C broadcastable to
    [M, N], the MatMul read only by the Add."""

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        g = onnx_model.graph
        if default_opset(onnx_model) < 7:
            return onnx_model  # Gemm's C needs the `broadcast` attribute before opset 7
        types = value_types(onnx_model)
        inits = {i.name: tuple(i.dims) for i in g.initializer}
        readers = consumers(g)
        outputs = {o.name for o in g.output}
        removed: set[int] = set()
        for i, mm in enumerate(g.node):
            if mm.op_type != "MatMul" or mm.domain not in ("", "ai.onnx"):
                continue
            j = _sole_reader(readers, outputs, mm.output[0])
            if j is None or g.node[j].op_type != "Add":
                continue
            add = g.node[j]
            bias = add.input[1] if add.input[0] == mm.output[0] else add.input[0]
            a, b = mm.input
            a_dims = types.get(a, (0, None))[1]
            if a_dims is None or len(a_dims) != 2 or len(inits.get(b, ())) != 2:
                continue
            n = inits[b][1]
            if types.get(a, (0,))[0] not in FLOAT_TYPES or bias not in inits:
                continue
            if inits[bias] not in ((n,), (1, n), (1,), (), (a_dims[0], n)):
                continue  # Gemm's C broadcasts one way only; keep the general Add
            add.CopyFrom(helper.make_node("Gemm", [a, b, bias], [add.output[0]], name=add.name))
            removed.add(i)
        drop_nodes(g, removed)
        return onnx_model
