"""eliminate_identity, eliminate_dropout: remove nodes that copy their input (inference)."""

from __future__ import annotations

import onnx
from onnx import GraphProto, NodeProto, numpy_helper

from pyipu.passes.base import Pass, register
from pyipu.passes.graph import consumers, drop_nodes, rename_uses


def _bypass(graph: GraphProto, is_copy) -> GraphProto:
    """Remove every node for which `is_copy(node)` holds, rewiring its readers to its input."""
    graph_inputs = {v.name for v in (*graph.input, *graph.initializer)}
    producers = {o: n for n in graph.node for o in n.output if o}
    removed: set[int] = set()
    for index, node in enumerate(graph.node):
        if not is_copy(node):
            continue
        src, dst = node.input[0], node.output[0]
        outputs = {o.name for o in graph.output}
        if dst in outputs:
            # the graph output keeps its name: rename the producer's output instead
            producer = producers.get(src)
            if producer is None or src in outputs or src in graph_inputs:
                continue
            producer.output[:] = [dst if o == src else o for o in producer.output]
            producers[dst] = producer
            rename_uses(graph, src, dst)
        else:
            rename_uses(graph, dst, src)
        removed.add(index)
    drop_nodes(graph, removed)
    return graph


def _replace_graph(model: onnx.ModelProto, graph: GraphProto) -> None:
    if graph is not model.graph:
        model.graph.CopyFrom(graph)


@register("eliminate_identity")
class EliminateIdentity(Pass):
    """Remove Identity nodes (readers use the Identity's input directly)."""

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        def transform(g: GraphProto, is_main_graph: bool) -> GraphProto:
            return _bypass(g, _is_identity)

        _replace_graph(onnx_model, self.traverse_graph(onnx_model.graph, transform))
        return onnx_model


def _is_identity(node: NodeProto) -> bool:
    return node.op_type == "Identity" and node.domain in ("", "ai.onnx") and bool(node.input[0])


def _inference_dropout(g: GraphProto, node: NodeProto) -> bool:
    if node.op_type != "Dropout" or node.domain not in ("", "ai.onnx") or not node.input[0]:
        return False
    mask = node.output[1] if len(node.output) > 1 else ""
    if mask and (consumers(g).get(mask) or mask in {o.name for o in g.output}):
        return False  # the mask is read: keep the node
    if len(node.input) < 3 or not node.input[2]:
        return True  # no training_mode input: inference
    mode = next((i for i in g.initializer if i.name == node.input[2]), None)
    return mode is not None and not bool(numpy_helper.to_array(mode).any())


@register("eliminate_dropout")
class EliminateDropout(Pass):
    """Remove Dropout nodes in inference mode whose mask output is unused."""

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        def transform(g: GraphProto, is_main_graph: bool) -> GraphProto:
            return _bypass(g, lambda n: _inference_dropout(g, n))

        _replace_graph(onnx_model, self.traverse_graph(onnx_model.graph, transform))
        return onnx_model


@register("eliminate_nop_dropout")
class EliminateNopDropout(EliminateDropout):
    """eliminate_dropout under onnxoptimizer's name (PopRT's Optimizer uses those names)."""
