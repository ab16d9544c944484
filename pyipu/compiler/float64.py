"""float64 models computed in float32: the IPU has no float64.

`float64_to_float32(model)` rewrites every float64 type in a model (graph inputs, outputs and
value infos, initializers, Constant / ConstantOfShape values, Cast targets, subgraphs) to float32.
The compiler rejects float64; pyipu.backend applies this rewrite with a warning and casts the
results back to float64, so ONNX's float64 test models run with float32 precision.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, TensorProto, numpy_helper

DOUBLE, FLOAT = TensorProto.DOUBLE, TensorProto.FLOAT
_DTYPE_ATTRS = {"to", "dtype", "output_dtype"}  # Cast, EyeLike/Random*, ... target-type attributes


def _tensor(t: TensorProto) -> None:
    if t.data_type == DOUBLE:
        arr = numpy_helper.to_array(t).astype(np.float32)
        t.CopyFrom(numpy_helper.from_array(arr, t.name))


def _value_infos(g: GraphProto) -> None:
    for vi in [*g.input, *g.output, *g.value_info]:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.elem_type == DOUBLE:
            tt.elem_type = FLOAT


def _graph(g: GraphProto) -> None:
    _value_infos(g)
    for t in g.initializer:
        _tensor(t)
    for node in g.node:
        for a in node.attribute:
            if a.type == AttributeProto.TENSOR:
                _tensor(a.t)
            elif a.type == AttributeProto.TENSORS:
                for t in a.tensors:
                    _tensor(t)
            elif a.type == AttributeProto.INT and a.name in _DTYPE_ATTRS and a.i == DOUBLE:
                a.i = FLOAT
            elif a.type == AttributeProto.GRAPH:
                _graph(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _graph(sub)


def uses_float64(model: onnx.ModelProto) -> bool:
    return _has_double(model.graph)


def _has_double(g: GraphProto) -> bool:
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.tensor_type.elem_type == DOUBLE:
            return True
    if any(t.data_type == DOUBLE for t in g.initializer):
        return True
    for node in g.node:
        for a in node.attribute:
            if a.type == AttributeProto.TENSOR and a.t.data_type == DOUBLE:
                return True
            if a.type == AttributeProto.INT and a.name in _DTYPE_ATTRS and a.i == DOUBLE:
                return True
            if a.type == AttributeProto.GRAPH and _has_double(a.g):
                return True
            if a.type == AttributeProto.GRAPHS and any(_has_double(s) for s in a.graphs):
                return True
    return False


def float64_to_float32(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every float64 type and value turned into float32."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _graph(out.graph)
    for f in out.functions:
        for node in f.node:
            for a in node.attribute:
                if a.type == AttributeProto.TENSOR:
                    _tensor(a.t)
    return out
