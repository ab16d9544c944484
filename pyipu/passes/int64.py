"""int64_to_int32: the IPU has no int64, so int64 tensors become int32 (PopRT's pass).

Converted: graph inputs and outputs, initializers, Constant / ConstantOfShape / EyeLike values,
Cast(to=INT64) targets and value_info. The result stays a valid ONNX model: where an op's schema
only accepts int64 (Reshape's shape, Expand, Tile, Pad, TopK's K, ...) a Cast back to int64 is
inserted (constants read only there simply stay int64), and outputs that ONNX fixes to int64
(Shape, Size, ArgMax, NonZero, TopK indices, If/Loop/Scan results, ...) are followed by a Cast to
int32. Nested bodies keep their int64 tensors; outer values they read are cast back for them.

Constants must fit int32 (`Int64OverflowError` names the tensor), except Slice starts/ends,
which are clamped: INT64_MAX means "to the end" and the clamped value means the same.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import NodeProto, TensorProto, defs, helper, numpy_helper

from pyipu.compiler.folding import outer_refs
from pyipu.passes.base import Pass, register
from pyipu.passes.errors import Int64OverflowError
from pyipu.passes.graph import (
    NameGen,
    consumers,
    default_opset,
    make_cast,
    rename_uses,
    set_elem_type,
    subgraphs,
    value_types,
)

I32_MIN, I32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max
_INT32 = "tensor(int32)"
_RETYPED_OUTPUTS = {"Cast", "Constant", "ConstantOfShape", "EyeLike"}


_CAST_OPSET = 13  # imported for the inserted Casts when a model imports no default domain
_BIT_EXACT = {"BitCast"}  # reinterprets the bits: an int32 input would change the result


def _schema(node: NodeProto, opset: int) -> defs.OpSchema | None:
    """The schema of a standard op pyipu may feed int32; None for everything else.

    Ops defined by a function body count as "else": onnxruntime expands the body with the
    types it was written for, and some bodies mix their input type with int64 constants.
    """
    if node.domain not in ("", "ai.onnx") or node.op_type in _BIT_EXACT:
        return None
    if any(True for _ in subgraphs(node)):
        return None
    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except Exception:  # SchemaError: not a standard op
        return None
    # onnx's type stub lacks these two OpSchema properties
    if schema.has_function or schema.has_context_dependent_function:  # type: ignore[attr-defined]
        return None
    return schema


def _allowed(node: NodeProto, slot: int, is_input: bool, opset: int) -> set[str] | None:
    """The type strings a node's input/output slot accepts; None when unknown (custom ops)."""
    schema = _schema(node, opset)
    if schema is None:
        return None
    formal = schema.inputs if is_input else schema.outputs
    if not formal:
        return None
    param = formal[min(slot, len(formal) - 1)]
    by_name = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    return by_name.get(param.type_str, {param.type_str})


# Inputs ONNX types as int32-or-int64 that onnxruntime nevertheless only reads as int64.
_INT64_IN_PRACTICE = {("Pad", 3)}


def _accepts_int32(node: NodeProto, slot: int, is_input: bool, opset: int) -> bool:
    if slot < 0:
        return False  # bodies keep int64, and so what they read from outside
    if is_input and (node.op_type, slot) in _INT64_IN_PRACTICE:
        return False
    allowed = _allowed(node, slot, is_input, opset)
    return allowed is not None and _INT32 in allowed


def _to_int32(arr: np.ndarray, name: str, clamp: bool) -> np.ndarray:
    if arr.size and (arr.min() < I32_MIN or arr.max() > I32_MAX):
        if not clamp:
            bad = arr[(arr < I32_MIN) | (arr > I32_MAX)].flat[0]
            raise Int64OverflowError(
                f"int64_to_int32: constant {name!r} holds {int(bad)}, outside the int32 range"
            )
        arr = np.clip(arr, I32_MIN, I32_MAX)
    return arr.astype(np.int32)


def _tensor_to_int32(t: TensorProto, clamp: bool, label: str) -> None:
    t.CopyFrom(numpy_helper.from_array(_to_int32(numpy_helper.to_array(t), label, clamp), t.name))


@register("int64_to_int32")
class Int64ToInt32(Pass):
    """Convert int64 tensors to int32 (see the module docstring for the exact rules)."""

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        _convert(onnx_model)
        return onnx_model


def _convert(model: onnx.ModelProto) -> None:
    g = model.graph
    opset = default_opset(model)
    types = value_types(model)
    i64 = {n for n, (t, _) in types.items() if t == TensorProto.INT64}
    if not i64:
        return
    readers = consumers(g)
    outputs = {o.name for o in g.output}

    def needs_int64(name: str) -> list[tuple[NodeProto, int]]:
        uses = [(g.node[i], s) for i, s in readers.get(name, [])]
        return [(n, s) for n, s in uses if not _accepts_int32(n, s, True, opset)]

    def slice_bound_only(name: str) -> bool:
        uses = readers.get(name, [])
        return bool(uses) and all(g.node[i].op_type == "Slice" and s in (1, 2) for i, s in uses)

    # constants read only where int64 is required stay int64
    kept = {
        i.name
        for i in g.initializer
        if i.name in i64
        and i.name not in outputs
        and readers.get(i.name)
        and len(needs_int64(i.name)) == len(readers[i.name])
    }
    for init in g.initializer:
        if init.name in i64 and init.name not in kept:
            _tensor_to_int32(init, slice_bound_only(init.name), init.name)

    fresh = NameGen(g)
    raw_int64: dict[str, str] = {}  # converted value → its int64 original, kept under a new name
    for node in g.node:
        if not any(o in i64 for o in node.output):
            continue
        if node.op_type in _RETYPED_OUTPUTS and node.domain in ("", "ai.onnx"):
            _retype(node, slice_bound_only(node.output[0]))
            continue
        for slot, o in enumerate(node.output):
            if o in i64 and not _follows_inputs(node, slot, opset):
                raw_int64[o] = node.output[slot] = fresh(o + "__int64")

    converted = i64 - kept
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("", _CAST_OPSET))  # for the Casts
    int64_form = dict(raw_int64)  # converted value → name of an int64 copy
    new_nodes: list[NodeProto] = []
    for node in g.node:
        wanted = [n for s, n in enumerate(node.input) if not _accepts_int32(node, s, True, opset)]
        for name in [*wanted, *_outer(node)]:
            if name in converted and name not in int64_form:
                int64_form[name] = fresh(name + "__int64")
                new_nodes.append(
                    make_cast(name, int64_form[name], TensorProto.INT64, fresh(name + "__cast"))
                )
        for slot, name in enumerate(node.input):
            if name in converted and not _accepts_int32(node, slot, True, opset):
                node.input[slot] = int64_form[name]
        for name in _outer(node):
            if name in converted:
                for body in subgraphs(node):
                    rename_uses(body, name, int64_form[name])
        new_nodes.append(node)
        for o, raw in raw_int64.items():
            if raw in node.output:
                new_nodes.append(make_cast(raw, o, TensorProto.INT32, fresh(o + "__cast")))
    del g.node[:]
    g.node.extend(new_nodes)
    set_elem_type(g, converted, TensorProto.INT32)


def _follows_inputs(node: NodeProto, slot: int, opset: int) -> bool:
    """Whether an output's type is the type of some input (so int32 inputs give int32)."""
    schema = _schema(node, opset)
    if schema is None or not schema.outputs:
        return False
    param = schema.outputs[min(slot, len(schema.outputs) - 1)].type_str
    return param in {i.type_str for i in schema.inputs} and _accepts_int32(node, slot, False, opset)


def _outer(node: NodeProto) -> list[str]:
    return outer_refs(node) if any(True for _ in subgraphs(node)) else []


def _retype(node: NodeProto, clamp: bool) -> None:
    """Cast/Constant/ConstantOfShape/EyeLike whose int64 result comes from an attribute."""
    label = node.name or node.output[0]
    for attr in node.attribute:
        dtype_attr = (node.op_type, attr.name) in (("Cast", "to"), ("EyeLike", "dtype"))
        if dtype_attr and attr.i == TensorProto.INT64:
            attr.i = TensorProto.INT32
        elif attr.name == "value" and attr.t.data_type == TensorProto.INT64:
            _tensor_to_int32(attr.t, clamp, label)
        elif attr.name in ("value_int", "value_ints"):
            arr = np.array(helper.get_attribute_value(attr), dtype=np.int64)
            node.attribute.remove(attr)
            value = numpy_helper.from_array(_to_int32(arr, label, clamp))
            node.attribute.append(helper.make_attribute("value", value))
            break
    if node.op_type == "EyeLike" and not any(a.name == "dtype" for a in node.attribute):
        node.attribute.append(helper.make_attribute("dtype", TensorProto.INT32))
