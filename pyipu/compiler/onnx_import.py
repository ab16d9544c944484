"""ONNX front end: load, fix input shapes, infer shapes, fold constants.

The result, `ImportedGraph`, is what lowering consumes: runtime inputs with static shapes, the
nodes still to compute, and every value already known at compile time as a NumPy array.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from pyipu.compiler.errors import CompileError, ShapeError, UnsupportedError
from pyipu.compiler.folding import GENERATORS, check_generated_size, fold_node, foldable
from pyipu.compiler.serialize import MAGIC
from pyipu.errors import unknown_name

ModelLike: TypeAlias = bytes | str | os.PathLike | onnx.ModelProto


@dataclass(frozen=True)
class ValueSpec:
    """dtype (ONNX TensorProto number) and static shape of a runtime graph input."""

    name: str
    dtype: int
    shape: tuple[int, ...]


@dataclass
class ImportedGraph:
    model: onnx.ModelProto
    opset: int  # default-domain opset version
    inputs: list[ValueSpec]  # runtime graph inputs (initializers excluded)
    nodes: list[onnx.NodeProto]  # nodes left after folding, in topological order
    constants: dict[str, np.ndarray]  # initializers and folded values
    initializer_names: set[str]
    declared: dict[str, tuple[int, tuple[int, ...] | None]] = field(default_factory=dict)
    graph_outputs: list[str] = field(default_factory=list)
    # value name -> (element size in bytes, static shape) where shape inference found one
    inferred: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)


def load_model(model: ModelLike) -> onnx.ModelProto:
    """An ONNX ModelProto from serialized bytes, a file name or a ModelProto (not copied)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        _not_popef(data[: len(MAGIC)], "model bytes")
        try:
            return onnx.load_from_string(data)
        except Exception as e:  # protobuf raises DecodeError, a plain Exception subclass
            raise CompileError(f"model bytes are not a valid ONNX ModelProto: {e}") from e
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise CompileError(f"ONNX model file {path!r} does not exist")
        try:
            with open(path, "rb") as f:
                _not_popef(f.read(len(MAGIC)), f"file {path!r}")
            return onnx.load(path)
        except CompileError:
            raise
        except Exception as e:  # DecodeError (truncated, not ONNX), OSError, bad external data
            raise CompileError(f"file {path!r} is not a readable ONNX model: {e}") from e
    raise CompileError(
        f"model must be ONNX bytes, a file name or an onnx.ModelProto, got {type(model).__name__}"
    )


def _not_popef(head: bytes, what: str) -> None:
    if head == MAGIC:
        raise CompileError(
            f"{what}: a compiled PopEF executable, not an ONNX model; run it with "
            "pyipu.runtime.Runner or load it with pyipu.compiler.Executable.open"
        )


def _dims(vi: onnx.ValueInfoProto) -> list[int | str | None]:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def set_input_shapes(
    model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]
) -> onnx.ModelProto:
    """A copy of `model` whose named graph inputs have the given static shapes (--input_shape).

    Only dynamic dims may change: a fixed dim that disagrees, a rank change or an unknown input
    name is an error. Value-info of intermediates is dropped so shape inference redoes it.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    by_name = {i.name: i for i in out.graph.input}
    initializers = {t.name for t in out.graph.initializer}
    for name, shape in shapes.items():
        if name not in by_name:
            inputs = [i.name for i in out.graph.input if i.name not in initializers]
            raise ShapeError("input_shape: " + unknown_name("input", name, inputs))
        vi = by_name[name]
        old = _dims(vi)
        new = [int(d) for d in shape]
        if any(d < 1 for d in new):
            raise ShapeError(f"input_shape {name}={new}: dims must be >= 1")
        if vi.type.tensor_type.HasField("shape") and len(old) != len(new):
            raise ShapeError(f"input_shape {name}={new} has rank {len(new)}, model has {old}")
        for i, (o, n) in enumerate(zip(old, new, strict=False)):
            if isinstance(o, int) and o > 0 and o != n:
                raise ShapeError(f"input_shape {name}={new}: dim {i} is fixed to {o} in the model")
        dims = vi.type.tensor_type.shape
        del dims.dim[:]
        for n in new:
            dims.dim.add().dim_value = n
    del out.graph.value_info[:]
    return out


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference, strict when the model allows it (errors surface early)."""
    try:
        return shape_inference.infer_shapes(
            model, check_type=True, strict_mode=True, data_prop=True
        )
    except Exception as strict_error:  # InferenceError, or ops ONNX cannot infer strictly
        try:
            return shape_inference.infer_shapes(model, data_prop=True)
        except Exception:
            raise CompileError(f"ONNX shape inference failed: {strict_error}") from strict_error


def _default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            newest = onnx.defs.onnx_opset_version()
            if not 1 <= o.version <= newest:
                raise UnsupportedError(
                    f"the model imports ai.onnx opset {o.version}; pyipu supports 1..{newest}"
                )
            return int(o.version)
    if model.graph.node and all(n.domain not in ("", "ai.onnx") for n in model.graph.node):
        # no default-domain node to version (a graph of ai.onnx.preview.training optimizers):
        # their lowerings write the ONNX nodes they expand to at an opset of their own
        return onnx.defs.onnx_opset_version()
    raise CompileError("the model imports no default-domain ('ai.onnx') opset")


def _inferred_sizes(graph: onnx.GraphProto) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Element size and static shape of every value shape inference fully determined."""
    out: dict[str, tuple[int, tuple[int, ...]]] = {}
    itemsizes: dict[int, int] = {}  # the onnx helper is slow: once per element type
    for vi in (*graph.value_info, *graph.output):
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
            continue
        dims = _dims(vi)
        if not all(isinstance(d, int) and d > 0 for d in dims):
            continue
        if t.elem_type not in itemsizes:
            try:
                itemsizes[t.elem_type] = helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
            except (KeyError, TypeError, ValueError):
                itemsizes[t.elem_type] = 0
        if itemsizes[t.elem_type]:
            out[vi.name] = (itemsizes[t.elem_type], tuple(dims))  # type: ignore[arg-type]
    return out


def _check_generated_sizes(graph: onnx.GraphProto, opset: int) -> None:
    """Range and the other ops whose output size is an input value, checked before ONNX shape
    inference, which materialises a constant Range's values (data propagation)."""
    known: dict[str, np.ndarray] = {}
    inits: dict[str, onnx.TensorProto] = {}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.output) == 1:
            value = [a for a in node.attribute if a.name == "value" and a.HasField("t")]
            if value:
                known[node.output[0]] = _initializer(value[0].t)
        elif node.op_type in GENERATORS and node.domain in ("", "ai.onnx"):
            inits = inits or {i.name: i for i in graph.initializer}
            known.update((n, _initializer(inits[n])) for n in node.input if n in inits)
            check_generated_size(node, known, opset)


def _static_input(vi: onnx.ValueInfoProto) -> ValueSpec:
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise UnsupportedError(f"graph input {vi.name!r} is not a tensor")
    if not t.HasField("shape"):
        raise ShapeError(
            f"graph input {vi.name!r} has no shape; pass input_shape={{'{vi.name}': [...]}} "
            f"(--input_shape {vi.name}=D0,D1,...)"
        )
    dims = _dims(vi)
    if not all(isinstance(d, int) and d > 0 for d in dims):
        raise ShapeError(
            f"graph input {vi.name!r} has dynamic shape {dims}; IPU graphs are static: "
            f"pass input_shape={{'{vi.name}': [...]}} (--input_shape {vi.name}=D0,D1,...)"
        )
    return ValueSpec(vi.name, int(t.elem_type), tuple(int(d) for d in dims))  # type: ignore[arg-type]


def fold_constants(
    nodes: Sequence[onnx.NodeProto],
    constants: dict[str, np.ndarray],
    model: onnx.ModelProto,
    opset: int,
) -> list[onnx.NodeProto]:
    """Evaluate every node whose inputs are all known (folding.py); returns the nodes left to
    compute.

    `constants` gains the folded values. Nodes are assumed topologically sorted (ONNX requires it).
    """
    remaining: list[onnx.NodeProto] = []
    for node in nodes:
        if not foldable(node, constants):
            remaining.append(node)
            continue
        results = fold_node(node, constants, model, opset)
        if results is None:
            remaining.append(node)
            continue
        for name, value in zip([o for o in node.output if o], results, strict=True):
            constants[name] = value
    return remaining


def _initializer(init: onnx.TensorProto) -> np.ndarray:
    """An initializer's value; a malformed one (data size != shape, unknown element type, bad
    external data reference) is a CompileError, not onnx's ValueError/TypeError/OSError."""
    try:
        value = numpy_helper.to_array(init)
    except (ValueError, TypeError, KeyError, OSError, onnx.checker.ValidationError) as e:
        raise CompileError(f"initializer {init.name!r} is malformed: {e}") from None
    if value.dtype.kind in "cOSUV":  # pyipu has no complex or string tensors
        raise UnsupportedError(f"initializer {init.name!r} has unsupported dtype {value.dtype}")
    return value


MAX_ANCHOR_NAME = 1024  # bytes, ipu_executable.h


def _check_names(graph: onnx.GraphProto) -> None:
    """Protobuf hands out a string field that is not valid UTF-8 as bytes: reject it here,
    values written twice, and names that cannot be anchor names."""
    for node in graph.node:
        fields = [node.op_type, node.domain, node.name, *node.input, *node.output]
        fields += [a.name for a in node.attribute]
        if not all(isinstance(f, str) for f in fields):
            raise CompileError(f"node {node.name!r} ({node.op_type!r}): a name is not valid UTF-8")
    for vi in (*graph.input, *graph.output, *graph.initializer):
        if not isinstance(vi.name, str):
            raise CompileError("a graph input, output or initializer name is not valid UTF-8")
    defined = {vi.name for vi in (*graph.input, *graph.initializer)}
    for node in graph.node:  # ONNX graphs are SSA: a second writer would silently win
        for o in node.output:
            if o in defined:
                raise CompileError(
                    f"node {node.name!r} ({node.op_type}) writes {o!r}, which is already a graph "
                    "input, initializer or another node's output"
                )
            if o:
                defined.add(o)
    for vi in (*graph.input, *graph.output):  # they become anchors (docs/popef.md)
        if not 1 <= len(vi.name.encode()) <= MAX_ANCHOR_NAME:
            raise CompileError(
                f"graph input/output name {vi.name[:80]!r} must be 1..{MAX_ANCHOR_NAME} bytes"
            )


def import_model(
    model: ModelLike, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> ImportedGraph:
    """Load, check static input shapes, infer shapes and fold constants."""
    proto = load_model(model)
    if input_shapes:
        proto = set_input_shapes(proto, input_shapes)
    opset = _default_opset(proto)
    _check_generated_sizes(proto.graph, opset)
    inferred = infer_shapes(proto)
    graph = inferred.graph
    if len(graph.sparse_initializer):
        raise UnsupportedError("sparse initializers are not supported")
    _check_names(graph)
    constants = {init.name: _initializer(init) for init in graph.initializer}
    inputs = [_static_input(vi) for vi in graph.input if vi.name not in constants]
    declared: dict[str, tuple[int, tuple[int, ...] | None]] = {}
    for vi in graph.output:
        dims = _dims(vi)
        static = all(isinstance(d, int) and d > 0 for d in dims)
        has_shape = vi.type.tensor_type.HasField("shape")
        declared[vi.name] = (
            int(vi.type.tensor_type.elem_type),
            tuple(int(d) for d in dims) if has_shape and static else None,  # type: ignore[arg-type]
        )
    nodes = fold_constants(list(graph.node), constants, inferred, opset)
    return ImportedGraph(
        model=inferred,
        opset=opset,
        inputs=inputs,
        nodes=nodes,
        constants=constants,
        initializer_names={init.name for init in graph.initializer},
        declared=declared,
        graph_outputs=[o.name for o in graph.output],
        inferred=_inferred_sizes(graph),
    )


def check_declared_shape(
    name: str, declared: tuple[int, ...] | None, inferred: tuple[int, ...]
) -> tuple[int, ...]:
    """The shape an output anchor gets: the declared one when it only differs by a reshape."""
    if declared is None or declared == inferred:
        return inferred
    if int(np.prod(declared)) != int(np.prod(inferred)):
        raise ShapeError(
            f"graph output {name!r} is declared with shape {list(declared)} but computes "
            f"{list(inferred)} ({int(np.prod(inferred))} elements, not {int(np.prod(declared))})"
        )
    warnings.warn(
        f"graph output {name!r} is declared with shape {list(declared)} but computes "
        f"{list(inferred)}; using the declared shape (same number of elements)",
        stacklevel=4,
    )
    return declared
