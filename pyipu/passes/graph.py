"""Graph-editing helpers the built-in passes share (renaming, consumers, types, constants)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, NodeProto, TensorProto, helper, numpy_helper

from pyipu.compiler.folding import outer_refs
from pyipu.compiler.onnx_import import infer_shapes


def subgraphs(node: NodeProto) -> Iterator[GraphProto]:
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs


def default_opset(model: onnx.ModelProto) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def rename_uses(graph: GraphProto, old: str, new: str) -> None:
    """Make every reader of `old` (nodes, nested bodies, graph outputs) read `new` instead."""
    for node in graph.node:
        node.input[:] = [new if n == old else n for n in node.input]
        for body in subgraphs(node):
            _rename_in_body(body, old, new)
    for vi in graph.output:
        if vi.name == old:
            vi.name = new


def _rename_in_body(g: GraphProto, old: str, new: str) -> None:
    if any(v.name == old for v in (*g.input, *g.initializer)) or any(
        old in n.output for n in g.node
    ):
        return  # shadowed: the body defines its own `old`
    rename_uses(g, old, new)


def consumers(graph: GraphProto) -> dict[str, list[tuple[int, int]]]:
    """name → [(node index, input slot)], a body's outer references counted as slot -1.

    Indices, not node objects: protobuf hands out a new wrapper object at each access.
    """
    out: dict[str, list[tuple[int, int]]] = {}
    for i, node in enumerate(graph.node):
        for slot, name in enumerate(node.input):
            if name:
                out.setdefault(name, []).append((i, slot))
        for name in outer_refs(node):
            out.setdefault(name, []).append((i, -1))
    return out


def drop_nodes(graph: GraphProto, indices: set[int]) -> None:
    for i in sorted(indices, reverse=True):
        del graph.node[i]


def used_names(graph: GraphProto) -> set[str]:
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info, *graph.initializer)}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        names.add(node.name)
    return names


class NameGen:
    """Fresh value/node names that do not clash with the graph's."""

    def __init__(self, graph: GraphProto) -> None:
        self.taken = used_names(graph)

    def __call__(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name


Dims = tuple[int | str | None, ...]


_LIGHT_LIMIT = 4096  # initializers with more elements are shape-only inputs for inference


def is_big(init: TensorProto) -> bool:
    return int(np.prod(init.dims)) > _LIGHT_LIMIT


def light_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with big initializers turned into typed inputs: inference need not copy them."""
    g = model.graph
    light = GraphProto(name=g.name)
    light.node.extend(g.node)
    light.output.extend(g.output)
    light.value_info.extend(g.value_info)
    listed = {i.name for i in g.input}
    light.input.extend(g.input)
    for init in g.initializer:
        if not is_big(init):
            light.initializer.append(init)
        elif init.name not in listed:
            light.input.append(helper.make_tensor_value_info(init.name, init.data_type, init.dims))
    out = onnx.ModelProto(ir_version=max(model.ir_version, 4), graph=light)
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    return out


def value_types(model: onnx.ModelProto) -> dict[str, tuple[int, Dims | None]]:
    """name → (ONNX elem type, dims or None) for the main graph, from shape inference."""
    try:
        inferred = infer_shapes(light_copy(model))
    except Exception:  # inference is best effort here: passes only use what it knows
        inferred = model
    g = inferred.graph
    out: dict[str, tuple[int, Dims | None]] = {}
    for vi in (*g.input, *g.value_info, *g.output):
        if not vi.type.HasField("tensor_type"):
            continue
        t = vi.type.tensor_type
        dims = None
        if t.HasField("shape"):
            dims = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in t.shape.dim
            )
        if t.elem_type:
            out[vi.name] = (int(t.elem_type), dims)
    for init in g.initializer:
        out[init.name] = (int(init.data_type), tuple(init.dims))
    return out


def static_shape(dims: Dims | None) -> tuple[int, ...] | None:
    if dims is None or not all(isinstance(d, int) and d > 0 for d in dims):
        return None
    return tuple(int(d) for d in dims)  # type: ignore[arg-type]


def constant_values(graph: GraphProto, max_size: int | None = None) -> dict[str, np.ndarray]:
    """Initializers and Constant(value=...) outputs of the graph (of at most `max_size`
    elements), as arrays."""
    out = {
        i.name: numpy_helper.to_array(i)
        for i in graph.initializer
        if max_size is None or int(np.prod(i.dims)) <= max_size
    }
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "value":
                    out[node.output[0]] = numpy_helper.to_array(attr.t)
                elif attr.name in ("value_float", "value_floats", "value_int", "value_ints"):
                    v = helper.get_attribute_value(attr)
                    dt = np.float32 if "float" in attr.name else np.int64
                    out[node.output[0]] = np.array(v, dtype=dt)
    return out


def remove_unused_constants(graph: GraphProto) -> None:
    """Drop initializers and Constant nodes nothing reads (graph inputs listing them too)."""
    read = {o.name for o in graph.output}
    for node in graph.node:
        read.update(node.input)
        read.update(outer_refs(node))
    keep = [n for n in graph.node if not (n.op_type == "Constant" and n.output[0] not in read)]
    if len(keep) != len(graph.node):
        del graph.node[:]
        graph.node.extend(keep)
    dead = {i.name for i in graph.initializer if i.name not in read}
    for field in (graph.initializer, graph.input):  # in place: weights are not copied
        for i in reversed(range(len(field))):
            if field[i].name in dead:
                del field[i]


class LazyArrays(dict):
    """Initializer arrays by name, each converted on first use (most are never needed)."""

    def __init__(self, graph: GraphProto) -> None:
        super().__init__()
        self._protos = {i.name: i for i in graph.initializer}

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self._protos

    def __missing__(self, name: str) -> np.ndarray:
        value = numpy_helper.to_array(self._protos[name])
        self[name] = value
        return value

    def get(self, name: str, default: np.ndarray | None = None) -> np.ndarray | None:  # type: ignore[override]
        return self[name] if name in self else default  # noqa: SIM401 (this is get)


def make_cast(src: str, dst: str, to: int, name: str) -> NodeProto:
    return helper.make_node("Cast", [src], [dst], name=name, to=to)


def set_elem_type(graph: GraphProto, names: set[str], elem_type: int) -> None:
    for vi in (*graph.input, *graph.output, *graph.value_info):
        if vi.name in names and vi.type.HasField("tensor_type"):
            vi.type.tensor_type.elem_type = elem_type


FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
