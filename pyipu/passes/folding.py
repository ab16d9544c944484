"""constant_folding and const_input_shape: compute at conversion time what does not depend on
the runtime inputs.

constant_folding evaluates every deterministic node whose inputs are all constants (the same
`fold_node` the compiler uses) and stores the results as initializers; a node it cannot fold,
or whose result is larger than `max_tensor_size` bytes (-1: no limit), stays. Nodes producing graph
outputs stay too. const_input_shape replaces Shape/Size of values whose shape is static by
constants, which constant_folding can then propagate.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import NodeProto, helper, numpy_helper

from pyipu.compiler.folding import fold_node, foldable
from pyipu.passes.base import Pass, register
from pyipu.passes.graph import (
    LazyArrays,
    default_opset,
    remove_unused_constants,
    static_shape,
    value_types,
)


@register("constant_folding")
class ConstantFolding(Pass):
    """Fold constant sub-expressions into initializers of at most `max_tensor_size` bytes."""

    def __init__(self, max_tensor_size: int = -1) -> None:
        super().__init__()
        self.max_tensor_size = int(max_tensor_size)

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        g = onnx_model.graph
        opset = default_opset(onnx_model)
        constants = LazyArrays(g)
        graph_io = {v.name for v in (*g.output, *g.input)} - {i.name for i in g.initializer}
        kept: list[NodeProto] = []
        folded: list[onnx.TensorProto] = []
        for node in g.node:
            outs = [o for o in node.output if o]
            if not outs or graph_io & set(outs) or not foldable(node, constants):
                kept.append(node)
                continue
            values = fold_node(node, constants, onnx_model, opset)
            if values is None or (
                self.max_tensor_size >= 0 and any(v.nbytes > self.max_tensor_size for v in values)
            ):
                kept.append(node)
                continue
            for name, value in zip(outs, values, strict=True):
                constants[name] = value
                folded.append(numpy_helper.from_array(np.asarray(value), name))
        del g.node[:]
        g.node.extend(kept)
        g.initializer.extend(folded)
        remove_unused_constants(g)
        return onnx_model


@register("const_input_shape")
class ConstInputShape(Pass):
    """Replace Shape(x) and Size(x) of statically shaped x by int64 constants."""

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        g = onnx_model.graph
        types = value_types(onnx_model)
        outputs = {o.name for o in g.output}
        const_dims = {i.name: tuple(i.dims) for i in g.initializer}
        kept: list[NodeProto] = []
        for node in g.node:
            shape = None
            if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
                src = node.input[0]
                shape = static_shape(types[src][1]) if src in types else None
                if shape is None and src in const_dims:
                    shape = const_dims[src]
            if shape is None or node.output[0] in outputs:
                kept.append(node)
                continue
            if node.op_type == "Size":
                value = np.array(int(np.prod(shape)), dtype=np.int64)
            else:
                attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                start, end = attrs.get("start", 0), attrs.get("end", len(shape))
                value = np.array(shape[slice(start, end)], dtype=np.int64)
            g.initializer.append(numpy_helper.from_array(value, node.output[0]))
        del g.node[:]
        g.node.extend(kept)
        remove_unused_constants(g)
        return onnx_model
