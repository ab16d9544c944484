"""ONNX function bodies: ops pyipu has no lowering for, expanded into the ops that define them.

Many standard ops (LayerNormalization, Gelu, Selu, Attention, SoftmaxCrossEntropyLoss...) carry a
function body in their schema, plain or context-dependent (built for the node's attributes and
input types). When the registry lacks an op, the lowering expands the node into that body and
lowers the body's nodes instead; their names get a per-node prefix so they cannot collide.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx
import onnx.defs
from onnx import AttributeProto, FunctionProto, NodeProto, TypeProto, helper


def _schema(op_type: str, opset: int, domain: str = "") -> Any:
    """The onnx.defs.OpSchema, or None; typed Any as onnx's stub lacks its function accessors."""
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None


def _version(versions: Sequence[int], opset: int) -> int | None:
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def has_function(op_type: str, opset: int, domain: str = "") -> bool:
    """True when the op at this opset has a (possibly context-dependent) function body."""
    s = _schema(op_type, opset, domain)
    if s is None or s.deprecated:
        return False
    return (
        _version(s.function_opset_versions, opset) is not None
        or _version(s.context_dependent_function_opset_versions, opset) is not None
    )


def function_body(
    node: NodeProto, input_types: Sequence[TypeProto], opset: int
) -> FunctionProto | None:
    """The function defining `node` at `opset`, or None when the op has none."""
    s = _schema(node.op_type, opset, node.domain)
    if s is None or s.deprecated:
        return None
    f = FunctionProto()
    v = _version(s.function_opset_versions, opset)
    if v is not None:
        f.ParseFromString(s.get_function_with_opset_version(v))
        return f
    v = _version(s.context_dependent_function_opset_versions, opset)
    if v is None:
        return None
    full = NodeProto()
    full.CopyFrom(node)
    given = {a.name for a in node.attribute}
    for name, a in s.attributes.items():  # the body builder reads defaults from the node
        if name not in given and a.default_value.type != AttributeProto.UNDEFINED:
            full.attribute.append(a.default_value)
    data = s.get_context_dependent_function_with_opset_version(
        v, full.SerializeToString(), [t.SerializeToString() for t in input_types]
    )
    f.ParseFromString(data)
    return f


def body_opset(f: FunctionProto, default: int) -> int:
    for o in f.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return default


def expand(node: NodeProto, f: FunctionProto, prefix: str, opset: int) -> list[NodeProto]:
    """The body of `f` instantiated for `node`: formal names bound to the node's actual ones,
    internal values renamed `prefix + name`, attribute references resolved."""
    rename: dict[str, str] = {"": ""}
    for formal, actual in zip(f.input, node.input, strict=False):
        rename[formal] = actual
    for formal in f.input[len(node.input) :]:
        rename[formal] = ""  # optional input not given
    for formal, actual in zip(f.output, node.output, strict=False):
        rename[formal] = actual
    attrs = {a.name: a for a in node.attribute}
    schema = _schema(node.op_type, opset, node.domain)
    defaults = {} if schema is None else {n: a.default_value for n, a in schema.attributes.items()}
    for a in f.attribute_proto:  # function-level defaults
        defaults.setdefault(a.name, a)

    def name_of(v: str) -> str:
        return rename.setdefault(v, prefix + v)

    out: list[NodeProto] = []
    for i, body in enumerate(f.node):
        n = NodeProto()
        n.CopyFrom(body)
        n.name = f"{prefix}{body.name or body.op_type + str(i)}"
        n.input[:] = [name_of(v) for v in body.input]
        n.output[:] = [name_of(v) for v in body.output]
        del n.attribute[:]
        for a in body.attribute:
            if a.ref_attr_name:
                src = attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                if src is None or src.type == AttributeProto.UNDEFINED:
                    continue  # referenced attribute absent: the body op's own default applies
                b = AttributeProto()
                b.CopyFrom(src)
                b.name = a.name
                n.attribute.append(b)
            else:
                n.attribute.append(a)
                if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                    b = n.attribute[-1]
                    for sub in [b.g] if b.type == AttributeProto.GRAPH else b.graphs:
                        rename_outer_refs(sub, rename)
        out.append(n)
    return out


def rename_outer_refs(g: onnx.GraphProto, rename: dict[str, str]) -> None:
    """Rename, in place, the names body `g` (and its nested bodies) reads from outside."""
    bound = {i.name for i in g.input} | {i.name for i in g.initializer}
    for node in g.node:
        node.input[:] = [i if i in bound else rename.get(i, i) for i in node.input]
        for a in node.attribute:
            for sub in [a.g] if a.type == AttributeProto.GRAPH else a.graphs:
                inner = {k: v for k, v in rename.items() if k not in bound}
                rename_outer_refs(sub, inner)
        bound.update(o for o in node.output if o)


def tensor_type(dtype: int, shape: Sequence[int]) -> TypeProto:
    return helper.make_tensor_type_proto(dtype, list(shape))
