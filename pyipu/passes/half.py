"""float_to_half: float32 → float16, keeping the ops in `skip_op_types` in float32.

Everything `pyipu.compiler.precision.convert_to_fp16` converts is converted, except the main-graph
nodes whose op type is in `skip_op_types`: their float inputs are cast to float32 and their float
outputs cast back to float16. Initializers read only by skipped nodes stay float32 (no precision
is lost on their weights).
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx
from onnx import NodeProto, TensorProto

from pyipu.compiler.precision import convert_to_fp16
from pyipu.passes.base import Pass, register
from pyipu.passes.graph import NameGen, consumers, make_cast, value_types


@register("float_to_half")
class FloatToHalf(Pass):
    """Convert float32 to float16; nodes of `skip_op_types` compute in float32 between Casts."""

    def __init__(self, skip_op_types: Iterable[str] | None = None) -> None:
        super().__init__()
        if isinstance(skip_op_types, str):
            skip_op_types = [t for t in skip_op_types.split(",") if t]
        self.skip_op_types = set(skip_op_types or ())

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        g = onnx_model.graph
        skip = {i for i, n in enumerate(g.node) if n.op_type in self.skip_op_types}
        if not skip:
            return convert_to_fp16(onnx_model)
        types = value_types(onnx_model)
        readers = consumers(g)
        outputs = {o.name for o in g.output}
        keep = {
            i.name
            for i in g.initializer
            if i.name not in outputs
            and readers.get(i.name)
            and all(n in skip for n, _ in readers[i.name])
        }
        # outputs read only by other skipped nodes stay float32 too: no Cast pair between them
        for i in skip:
            for o in g.node[i].output:
                read = o and o not in outputs and readers.get(o)
                if read and all(n in skip for n, _ in readers[o]):
                    keep.add(o)
        out = convert_to_fp16(onnx_model, keep=keep, skip_nodes=skip)
        _wrap_in_casts(out.graph, skip, keep, types)
        return out


def _wrap_in_casts(g: onnx.GraphProto, skip: set[int], keep: set[str], types: dict) -> None:
    fresh = NameGen(g)

    def is_float(name: str) -> bool:
        return name in types and types[name][0] == TensorProto.FLOAT

    as_fp32: dict[str, str] = {}
    new_nodes: list[NodeProto] = []
    for i, node in enumerate(g.node):
        if i not in skip:
            new_nodes.append(node)
            continue
        for slot, name in enumerate(node.input):
            if name and is_float(name) and name not in keep:
                if name not in as_fp32:
                    as_fp32[name] = fresh(name + "__fp32")
                    new_nodes.append(
                        make_cast(name, as_fp32[name], TensorProto.FLOAT, fresh(name + "__cast"))
                    )
                node.input[slot] = as_fp32[name]
        new_nodes.append(node)
        for slot, name in enumerate(node.output):
            if name and is_float(name) and name not in keep:
                raw = node.output[slot] = fresh(name + "__fp32")
                new_nodes.append(make_cast(raw, name, TensorProto.FLOAT16, fresh(name + "__cast")))
    del g.node[:]
    g.node.extend(new_nodes)
