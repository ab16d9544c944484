"""model_overview: print (and keep) a summary of the model; the model is returned unchanged."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np
import onnx
from onnx import TensorProto, helper

from pyipu.passes.base import Pass, register


@dataclass
class Overview:
    op_counts: dict[str, int] = field(default_factory=dict)  # nested bodies included
    num_nodes: int = 0
    num_params: int = 0  # elements of all initializers
    param_bytes: int = 0
    inputs: list[tuple[str, str, list[int | str]]] = field(default_factory=list)
    outputs: list[tuple[str, str, list[int | str]]] = field(default_factory=list)
    opsets: dict[str, int] = field(default_factory=dict)

    def format(self) -> str:
        lines = [
            f"nodes: {self.num_nodes}, params: {self.num_params} ({self.param_bytes} bytes), "
            f"opsets: {self.opsets}"
        ]
        lines += [f"input  {n}: {t} {s}" for n, t, s in self.inputs]
        lines += [f"output {n}: {t} {s}" for n, t, s in self.outputs]
        lines += [f"  {op:<24}{count:>6}" for op, count in sorted(self.op_counts.items())]
        return "\n".join(lines)


def _io(vi: onnx.ValueInfoProto) -> tuple[str, str, list[int | str]]:
    t = vi.type.tensor_type
    dtype = TensorProto.DataType.Name(t.elem_type).lower() if t.elem_type else "?"
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
    return vi.name, dtype, dims


def overview(model: onnx.ModelProto) -> Overview:
    counts: Counter[str] = Counter()

    def walk(g: onnx.GraphProto) -> None:
        for node in g.node:
            counts[node.op_type] += 1
            for a in node.attribute:
                for body in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                    walk(body)

    g = model.graph
    walk(g)
    inits = {i.name for i in g.initializer}
    sizes = [
        (int(np.prod(i.dims)), helper.tensor_dtype_to_np_dtype(i.data_type).itemsize)
        for i in g.initializer
    ]
    return Overview(
        op_counts=dict(counts),
        num_nodes=sum(counts.values()),
        num_params=sum(n for n, _ in sizes),
        param_bytes=sum(n * b for n, b in sizes),
        inputs=[_io(v) for v in g.input if v.name not in inits],
        outputs=[_io(v) for v in g.output],
        opsets={o.domain or "ai.onnx": int(o.version) for o in model.opset_import},
    )


@register("model_overview")
class ModelOverview(Pass):
    """Print op counts, parameter count and I/O; `self.overview` keeps the last summary."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self.stream = stream
        self.overview: Overview | None = None

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        self.overview = overview(onnx_model)
        print(self.overview.format(), file=self.stream or sys.stdout)
        return onnx_model
