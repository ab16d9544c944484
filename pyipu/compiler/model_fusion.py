"""Model fusion at the ONNX level (PopRT's MFConverter / `model_fusion:` YAML).

The fused model is a disjoint union: every name of model i is prefixed with "graph<i>/", and one
extra graph input `index` (uint32[1]) selects the subgraph at run time. It stays a valid ONNX
model. Metadata key "pyipu.fusion" records each subgraph's inputs and outputs; the compiler reads
it to emit one Main program per subgraph.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import onnx
from onnx import AttributeProto, GraphProto, TensorProto, helper, version_converter

from pyipu.compiler.errors import CompileError
from pyipu.compiler.onnx_import import ModelLike, load_model

FUSION_KEY = "pyipu.fusion"
INDEX_NAME = "index"


@dataclass(frozen=True)
class Subgraph:
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class FusionInfo:
    index: str
    subgraphs: tuple[Subgraph, ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": 1,
                "index": self.index,
                "subgraphs": [
                    {"inputs": list(s.inputs), "outputs": list(s.outputs)} for s in self.subgraphs
                ],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> FusionInfo:
        try:
            d = json.loads(text)
            subs = tuple(Subgraph(tuple(s["inputs"]), tuple(s["outputs"])) for s in d["subgraphs"])
            info = cls(str(d["index"]), subs)
        except (ValueError, KeyError, TypeError) as e:
            raise CompileError(f"bad {FUSION_KEY!r} metadata: {e}") from e
        if not info.subgraphs:
            raise CompileError(f"{FUSION_KEY!r} metadata lists no subgraphs")
        return info


def read_fusion_info(model: onnx.ModelProto) -> FusionInfo | None:
    """The fusion description of a fused model, or None for an ordinary model."""
    for p in model.metadata_props:
        if p.key == FUSION_KEY:
            return FusionInfo.from_json(p.value)
    return None


def prefix_graph(g: GraphProto, prefix: str) -> None:
    """Rename every value, node and initializer of `g` (and of nested graphs) in place."""

    def rn(name: str) -> str:
        return prefix + name if name else name

    for vi in (*g.input, *g.output, *g.value_info):
        vi.name = rn(vi.name)
    for init in g.initializer:
        init.name = rn(init.name)
    for sp in g.sparse_initializer:
        sp.values.name = rn(sp.values.name)
        sp.indices.name = rn(sp.indices.name)
    for node in g.node:
        node.name = rn(node.name)
        node.input[:] = [rn(n) for n in node.input]
        node.output[:] = [rn(n) for n in node.output]
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                prefix_graph(attr.g, prefix)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    prefix_graph(sub, prefix)


def _opsets(models: Sequence[onnx.ModelProto]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in models:
        for o in m.opset_import:
            dom = "" if o.domain == "ai.onnx" else o.domain
            out[dom] = max(out.get(dom, 0), int(o.version))
    return out


def _upgrade(model: onnx.ModelProto, version: int, i: int) -> onnx.ModelProto:
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), version)
    if current == version:
        return model
    try:
        return version_converter.convert_version(model, version)
    except Exception as e:
        raise CompileError(
            f"model {i} uses opset {current}; converting it to opset {version} "
            f"for fusion failed: {e}"
        ) from e


def fuse_models(models: Sequence[ModelLike]) -> onnx.ModelProto:
    """Fuse models into one ONNX model with subgraphs graph0/, graph1/, ... and an `index` input.

    Example:
        >>> fused = fuse_models([model0, model1])  # doctest: +SKIP
        >>> [i.name for i in fused.graph.input]  # doctest: +SKIP
        ['graph0/X', 'graph0/Y', 'graph1/X', 'index']
    """
    protos = [load_model(m) for m in models]
    if len(protos) < 1:
        raise CompileError("fuse_models needs at least one model")
    opsets = _opsets(protos)
    protos = [_upgrade(m, opsets.get("", 1), i) for i, m in enumerate(protos)]

    graph = GraphProto(name="fused")
    subgraphs = []
    functions: dict[tuple[str, str], onnx.FunctionProto] = {}
    for i, src in enumerate(protos):
        g = GraphProto()
        g.CopyFrom(src.graph)
        prefix_graph(g, f"graph{i}/")
        graph.node.extend(g.node)
        graph.initializer.extend(g.initializer)
        graph.sparse_initializer.extend(g.sparse_initializer)
        graph.input.extend(g.input)
        graph.output.extend(g.output)
        graph.value_info.extend(g.value_info)
        inits = {t.name for t in g.initializer}
        subgraphs.append(
            Subgraph(
                tuple(v.name for v in g.input if v.name not in inits),
                tuple(v.name for v in g.output),
            )
        )
        for f in src.functions:
            key = (f.domain, f.name)
            if key in functions and functions[key] != f:
                raise CompileError(f"models define different local functions {key}")
            functions[key] = f
    if any(v.name == INDEX_NAME for v in graph.input):
        raise CompileError(f"a fused model may not already have an input named {INDEX_NAME!r}")
    graph.input.append(helper.make_tensor_value_info(INDEX_NAME, TensorProto.UINT32, [1]))

    fused = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())],
        ir_version=max(m.ir_version for m in protos),
        producer_name="pyipu",
    )
    fused.functions.extend(functions.values())
    info = FusionInfo(INDEX_NAME, tuple(subgraphs))
    helper.set_model_props(fused, {FUSION_KEY: info.to_json()})
    return fused


class MFConverter:
    """poprt.converter.MFConverter: `MFConverter().convert([model0, model1])` → fused model."""

    def convert(self, models: Sequence[ModelLike]) -> onnx.ModelProto:
        return fuse_models(models)
