"""float32 → float16 model conversion (--precision fp16, fusion YAML `precision: fp16`).

Converts the declared types of graph inputs, outputs and value_info, initializers, Constant and
ConstantOfShape values and Cast(to=FLOAT) targets, in nested graphs too. Everything else (ops,
int tensors) is left alone, so the converted model computes the same graph in half precision.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, TensorProto, helper, numpy_helper


def _half_tensor(t: TensorProto) -> None:
    if t.data_type == TensorProto.FLOAT and t.raw_data and not t.external_data:
        # the common case, converted without building a second TensorProto
        t.raw_data = np.frombuffer(t.raw_data, "<f4").astype("<f2").tobytes()
        t.data_type = TensorProto.FLOAT16
    elif t.data_type == TensorProto.FLOAT:
        half = numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name)
        t.CopyFrom(half)


def _convert_graph(
    g: GraphProto, keep: Collection[str] = (), skip_nodes: Collection[int] = ()
) -> None:
    for vi in (*g.input, *g.output, *g.value_info):
        tt = vi.type.tensor_type
        float32 = vi.type.HasField("tensor_type") and tt.elem_type == TensorProto.FLOAT
        if float32 and vi.name not in keep:
            tt.elem_type = TensorProto.FLOAT16
    for init in g.initializer:
        if init.name not in keep:
            _half_tensor(init)
    for i, node in enumerate(g.node):
        if i in skip_nodes:
            continue
        for attr in list(node.attribute):
            if attr.type == AttributeProto.TENSOR:
                _half_tensor(attr.t)
            elif attr.type == AttributeProto.GRAPH:
                _convert_graph(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    _convert_graph(sub)
        if node.op_type == "Constant":
            _constant_float_attrs(node)
        if node.op_type == "Cast":
            for attr in node.attribute:
                if attr.name == "to" and attr.i == TensorProto.FLOAT:
                    attr.i = TensorProto.FLOAT16


def _constant_float_attrs(node: onnx.NodeProto) -> None:
    """Constant(value_float[s]=...) yields float32: rewrite it as a float16 tensor value."""
    for attr in list(node.attribute):
        if attr.name in ("value_float", "value_floats"):
            v = helper.get_attribute_value(attr)
            arr = np.array(v, dtype=np.float16)
            node.attribute.remove(attr)
            node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(arr)))


def convert_to_fp16(
    model: onnx.ModelProto, keep: Collection[str] = (), skip_nodes: Collection[int] = ()
) -> onnx.ModelProto:
    """A copy of `model` with float32 replaced by float16 (see the module docstring).

    Main-graph values named in `keep` and the nodes at the indices `skip_nodes` are left alone
    (the float_to_half pass puts Casts around such nodes).
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _convert_graph(out.graph, keep, skip_nodes)
    for f in out.functions:
        for node in f.node:
            if node.op_type == "Cast":
                for attr in node.attribute:
                    if attr.name == "to" and attr.i == TensorProto.FLOAT:
                        attr.i = TensorProto.FLOAT16
    return out
