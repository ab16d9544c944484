"""Lowering: ONNX nodes → instructions over a tensor table (before memory planning).

`GraphBuilder` holds the tensor table and one instruction list per subgraph. Tensors are either
roots (their own storage) or views of a root (zero-copy reshapes). `Node` is the handle an op
lowering function in `ops.py` receives: typed access to its inputs (runtime tensors or compile-time
constants), attributes and the means to emit instructions, views and constant outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import onnx
from onnx import TensorProto, helper

from pyipu.compiler.dynamic import Dyn, Sym, lower_dynamic
from pyipu.compiler.errors import (
    CompileError,
    ShapeError,
    UnsupportedAttributeError,
    UnsupportedDTypeError,
    UnsupportedError,
    UnsupportedOpError,
    node_label,
)
from pyipu.compiler.folding import evaluate, fold_node, foldable, outer_refs
from pyipu.compiler.functions import body_opset, expand, function_body, tensor_type
from pyipu.compiler.ir import (
    ALL_DTYPES,
    MAX_ATTRS,
    MAX_DIMS,
    MAX_TENSOR_BYTES,
    NO_INDEX,
    Instr,
    dtype_of,
)
from pyipu.compiler.onnx_import import ImportedGraph, ValueSpec, check_declared_shape
from pyipu.compiler.sources import NO_NODE, SourceNode, Sources, node_name
from pyipu.enums import DType, Op
from pyipu.errors import Error

ARENA, WEIGHT = "arena", "weight"
# the output holding the run-time extent of a graph output with a data-dependent dim
COUNT_SUFFIX = ":count"
DEFAULT_DOMAINS = ("", "ai.onnx")
# op type -> the domain other than ONNX's default its lowering is registered for (ops.register
# fills it: the ai.onnx.preview.training optimizers of ops_training.py)
OP_DOMAINS: dict[str, str] = {}


def domain_supported(domain: str, op_type: str) -> bool:
    """Whether a node of `op_type` in `domain` has a lowering (or a default-domain function)."""
    if domain in DEFAULT_DOMAINS:
        return op_type not in OP_DOMAINS
    return OP_DOMAINS.get(op_type) == domain


class UseFunctionBody(Exception):
    """Raised by a lowering, before it emits anything, for a form of its op that the op's ONNX
    function body covers (LayerNormalization's Mean and InvStdDev outputs, ...)."""


@dataclass
class BuildTensor:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    kind: str  # ARENA or WEIGHT (TENSOR_DATA)
    subgraph: int  # owner subgraph, NO_INDEX for tensors every subgraph uses
    base: int | None = None  # root tensor index when this is a view
    data: bytes | None = None  # WEIGHT roots
    stage: int = 0  # pipeline stage whose node created it (manual sharding)
    offset: int = 0  # bytes into the root (a view of part of it: concat_inplace.py)
    node: int = NO_NODE  # index into GraphBuilder.nodes of the ONNX node that made it

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(_np_name(self.dtype)).itemsize


def check_size(name: str, shape: Sequence[int], itemsize: int) -> None:
    """ShapeError for a tensor larger than MAX_TENSOR_BYTES, before anything is allocated."""
    nbytes = math.prod(int(d) for d in shape) * itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise ShapeError(
            f"tensor {name!r} of shape {[int(d) for d in shape]} would take {nbytes} bytes "
            f"(at most {MAX_TENSOR_BYTES})"
        )


def _np_name(dtype: DType) -> str:
    return DType(dtype).name.lower()


@dataclass
class BuildAnchor:
    name: str
    direction: int  # ir.Direction value
    tensor: int
    subgraph: int
    has_tensor_data: bool = False


@dataclass
class GraphBuilder:
    num_subgraphs: int = 1
    tensors: list[BuildTensor] = field(default_factory=list)
    programs: list[list[Instr]] = field(default_factory=list)
    anchors: list[BuildAnchor] = field(default_factory=list)
    weights: dict[str, int] = field(default_factory=dict)  # constant name → WEIGHT root
    written: set[int] = field(default_factory=set)  # roots some instruction writes
    claimed: set[int] = field(default_factory=set)  # roots owned by an output anchor
    # the model's own constants (initializers, Constant outputs): their anchors carry the model's
    # names, so a Model Runtime session may bind new values to them
    user_weights: set[int] = field(default_factory=set)
    # CompilerOptions.constant_weights: False keeps every user weight as read by the model, so
    # that binding a new value works; the instruction-level fusions then fold none of them
    constant_weights: bool = True
    current_stage: int = 0  # stage of the node being lowered (manual sharding)
    nodes: list[SourceNode] = field(default_factory=list)  # the ONNX nodes lowered, in order
    current_node: int = NO_NODE  # the one being lowered: its tensors record it (sources.py)
    instr_stages: list[list[int]] = field(default_factory=list)  # parallel to programs
    # variables (variables.py): arena root → the weight the Load program copies into it
    variables: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.programs = [[] for _ in range(self.num_subgraphs)]
        self.instr_stages = [[] for _ in range(self.num_subgraphs)]

    def add(
        self,
        name: str,
        dtype: int,
        shape: Sequence[int],
        subgraph: int,
        kind: str = ARENA,
        base: int | None = None,
        data: bytes | None = None,
        offset: int = 0,
    ) -> int:
        try:
            dt = DType(dtype)
        except ValueError:  # an ONNX type the IPU has no counterpart for (bfloat16, float8...)
            onnx_name = (
                TensorProto.DataType.Name(dtype)
                if dtype in TensorProto.DataType.values()
                else dtype
            )
            raise UnsupportedDTypeError(
                f"tensor {name!r} has ONNX type {onnx_name}, which pyipu does not support"
            ) from None
        shape = tuple(int(d) for d in shape)
        if dt not in ALL_DTYPES:
            hint = (
                " (the IPU has no float64: convert the model with "
                "pyipu.compiler.float64_to_float32, as pyipu.backend does)"
                if dt == DType.FLOAT64
                else ""
            )
            raise UnsupportedDTypeError(
                f"tensor {name!r} has dtype {dt.name.lower()}, which pyipu does not support{hint}"
            )
        if len(shape) > MAX_DIMS:
            raise UnsupportedError(f"tensor {name!r} has {len(shape)} dims (at most {MAX_DIMS})")
        if any(d <= 0 for d in shape):
            raise UnsupportedError(f"tensor {name!r} has zero-size shape {list(shape)}")
        check_size(name, shape, np.dtype(_np_name(dt)).itemsize)
        self.tensors.append(
            BuildTensor(
                name,
                dt,
                shape,
                kind,
                subgraph,
                base,
                data,
                self.current_stage,
                offset,
                self.current_node,
            )
        )
        return len(self.tensors) - 1

    def sources(self) -> Sources:
        return Sources(
            tuple(self.nodes),
            tuple(t.name for t in self.tensors),
            tuple(t.node for t in self.tensors),
            tuple(-1 if t.base is None else t.base for t in self.tensors),
        )

    def root(self, t: int) -> int:
        base = self.tensors[t].base
        return t if base is None else base

    def view(self, t: int, shape: Sequence[int], name: str) -> int:
        src = self.tensors[t]
        if math.prod(shape) != math.prod(src.shape):
            raise ShapeError(f"cannot view {src.name!r} {list(src.shape)} as {list(shape)}")
        if tuple(shape) == src.shape and src.name == name:
            return t
        return self.add(
            name, src.dtype, shape, src.subgraph, src.kind, base=self.root(t), offset=src.offset
        )

    def weight(self, name: str, array: np.ndarray, subgraph: int, anchor: str | None = None) -> int:
        """The TENSOR_DATA tensor holding a constant, created (and anchored) on first use.

        The anchor is named after the constant unless `anchor` says otherwise.
        """
        if name not in self.weights:
            try:
                dt = dtype_of(array.dtype)
            except KeyError:
                raise UnsupportedDTypeError(f"constant {name!r} has dtype {array.dtype}") from None
            data = np.ascontiguousarray(array).tobytes()
            t = self.add(name, dt, array.shape, subgraph, WEIGHT, data=data)
            self.weights[name] = t
            self.anchors.append(BuildAnchor(anchor or name, 1, t, subgraph, has_tensor_data=True))
        return self.weights[name]

    def emit(
        self,
        subgraph: int,
        op: Op,
        inputs: Sequence[int],
        outputs: Sequence[int],
        attrs: Sequence[int] = (),
    ) -> None:
        if len(attrs) > MAX_ATTRS:
            raise CompileError(f"{op.name} needs {len(attrs)} attributes (at most {MAX_ATTRS})")
        self.programs[subgraph].append(
            Instr(Op(op), tuple(inputs), tuple(outputs), tuple(int(a) for a in attrs))
        )
        self.instr_stages[subgraph].append(self.current_stage)
        self.written.update(self.root(o) for o in outputs)


class Lowering:
    """State of one subgraph being lowered: ONNX value name → tensor index."""

    def __init__(self, builder: GraphBuilder, graph: ImportedGraph, subgraph: int) -> None:
        self.b = builder
        self.graph = graph
        self.subgraph = subgraph
        self.values: dict[str, int] = {}
        self.output_names: set[str] = set()  # a weight must not take an output's anchor name
        self.expansions = 0  # function bodies expanded so far (unique name prefixes)
        # data-dependent dims (dynamic.py): value → its dynamic axis and run-time length;
        # shapes holding such a length (Shape of those values) → their entries
        self.dyn: dict[str, Dyn] = {}
        self.sym: dict[str, Sym] = {}
        self.sym_scalars: set[str] = set()  # symbolic values of rank 0 (one entry)
        # one tensor per run-time computation of the same inputs (NonZero of one mask, a length
        # times a constant): equal lengths are the same tensor, so values sharing them combine
        self.dyn_cache: dict[tuple[object, ...], int] = {}

    @property
    def constants(self) -> dict[str, np.ndarray]:
        return self.graph.constants

    def tensor(self, name: str) -> int:
        if name in self.values:
            return self.values[name]
        if name in self.constants:
            anchor = f"{name}:weight" if name in self.output_names else name
            t = self.b.weight(name, self.constants[name], self.subgraph, anchor)
            self.b.user_weights.add(t)
            return t
        raise CompileError(f"value {name!r} is used before it is computed")

    def spec(self, name: str) -> tuple[DType, tuple[int, ...]]:
        if name in self.values:
            t = self.b.tensors[self.values[name]]
            return t.dtype, t.shape
        if name in self.constants:
            a = self.constants[name]
            try:
                return dtype_of(a.dtype), tuple(a.shape)
            except KeyError:
                raise UnsupportedDTypeError(f"value {name!r} has dtype {a.dtype}") from None
        raise CompileError(f"value {name!r} is used before it is computed")

    def add_input(self, spec: ValueSpec) -> int:
        t = self.b.add(spec.name, spec.dtype, spec.shape, self.subgraph)
        self.values[spec.name] = t
        self.b.anchors.append(BuildAnchor(spec.name, 1, t, self.subgraph))
        return t

    def lower_node(
        self,
        proto: onnx.NodeProto,
        registry: dict[str, dict[int, Callable]],
        opset: int | None = None,
        fold: bool = True,
    ) -> None:
        """Lower one node at `opset` (the graph's unless it comes from a function body);
        `fold`: compute it now if its inputs are known (folding.py lowers with fold=False)."""
        opset = self.graph.opset if opset is None else opset
        label = node_label(proto.name, proto.op_type, opset)
        if proto.domain not in DEFAULT_DOMAINS:  # named with its own domain's version
            imported = {o.domain: o.version for o in self.graph.model.opset_import}
            label = node_label(
                proto.name, f"{proto.domain}.{proto.op_type}", imported.get(proto.domain, 1)
            )
        if not domain_supported(proto.domain, proto.op_type):
            if proto.domain not in (*DEFAULT_DOMAINS, *OP_DOMAINS.values()):
                raise UnsupportedOpError(f"{label}: domain {proto.domain!r} is not supported")
            raise UnsupportedOpError(
                f"{label}: op {proto.op_type} of domain {proto.domain or 'ai.onnx'!r} is not "
                "supported by pyipu"
            )
        if (self.dyn or self.sym) and lower_dynamic(
            self, proto, lambda: self._lower_registered(proto, registry, opset, label), label
        ):
            return
        if fold and foldable(proto, self.constants):
            # Inputs became known during lowering (Shape of a static tensor...): fold.
            results = fold_node(proto, self.constants, self.graph.model, opset)
            if results is not None:
                self.constants.update(zip([o for o in proto.output if o], results, strict=True))
                return
        self._lower_registered(proto, registry, opset, label)

    def _lower_registered(
        self,
        proto: onnx.NodeProto,
        registry: dict[str, dict[int, Callable]],
        opset: int,
        label: str,
    ) -> None:
        for o in proto.output:  # before the lowering builds tables of that size
            if o in self.graph.inferred and o not in self.dyn:
                itemsize, shape = self.graph.inferred[o]
                check_size(o, shape, itemsize)
        versions = registry.get(proto.op_type, {})
        usable = [v for v in versions if v <= opset]
        if usable:
            try:
                versions[max(usable)](Node(self, proto, opset, label))
            except UseFunctionBody:
                if not self._expand_function(proto, registry, opset):
                    raise UnsupportedOpError(
                        f"{label}: this form of {proto.op_type} is not supported"
                    ) from None
            except Error:
                raise
            except Exception as e:  # a malformed node the lowering did not anticipate
                raise CompileError(f"{label}: cannot be lowered: {type(e).__name__}: {e}") from e
            return
        if self._expand_function(proto, registry, opset):
            return
        if not versions:
            raise UnsupportedOpError(f"{label}: op {proto.op_type} is not supported by pyipu")
        raise UnsupportedOpError(
            f"{label}: {proto.op_type} is supported from opset {min(versions)} only"
        )

    def _expand_function(
        self, proto: onnx.NodeProto, registry: dict[str, dict[int, Callable]], opset: int
    ) -> bool:
        """Lower the node's ONNX function body instead of the node, if its schema has one."""
        types = [tensor_type(*self.spec(i)) if i else onnx.TypeProto() for i in proto.input]
        body = function_body(proto, types, opset)
        if body is None:
            return False
        self.expansions += 1
        prefix = f"{proto.name or proto.op_type}:fn{self.expansions}:"
        inner = body_opset(body, opset)
        for node in expand(proto, body, prefix, opset):
            self.lower_node(node, registry, inner)
        return True

    def add_output(self, name: str) -> int:
        """Make `name` an output anchor; gives it its own storage when it would alias."""
        declared_dtype, declared_shape = self.graph.declared.get(name, (0, None))
        dtype, shape = self.spec(name)
        if declared_dtype and declared_dtype != dtype:
            raise ShapeError(
                f"graph output {name!r} is declared {_dtype_name(declared_dtype)} "
                f"but computes {dtype.name.lower()}"
            )
        if name not in self.dyn:  # a declared extent of a data-dependent dim is a count
            shape = check_declared_shape(name, declared_shape, shape)
        if any(a.name == name and a.direction == 1 for a in self.b.anchors):
            raise CompileError(
                f"graph output {name!r} is also a graph input or weight name; "
                "anchor names must be unique"
            )
        src = self.tensor(name)
        root = self.b.root(src)
        own = (
            self.b.tensors[src].kind == ARENA
            and root in self.b.written  # produced here, not an input anchor
            and root not in self.b.claimed
        )
        if own:
            out = self.b.view(src, shape, name)
            self.b.claimed.add(root)
        else:  # an input, a weight, or storage another output owns: copy
            out = self.b.add(name, dtype, shape, self.subgraph)
            self.b.emit(self.subgraph, Op.COPY, [src], [out])
            self.b.claimed.add(out)
        self.b.anchors.append(BuildAnchor(name, 2, out, self.subgraph))
        if name in self.dyn:  # its run-time extent along the dynamic axis: `<name>:count`
            count_name = f"{name}{COUNT_SUFFIX}"
            if any(a.name == count_name for a in self.b.anchors) or count_name in self.values:
                raise CompileError(
                    f"graph output {name!r} has a data-dependent dim, and {count_name!r}, the "
                    "name of its count output, is taken"
                )
            count = self.b.add(count_name, DType.INT64, (1,), self.subgraph)
            self.b.emit(self.subgraph, Op.COPY, [self.dyn[name].length], [count])
            self.b.claimed.add(count)
            self.b.anchors.append(BuildAnchor(count_name, 2, count, self.subgraph))
        return out


def _dtype_name(value: int) -> str:
    """DType name of an ONNX element type, or the number when pyipu has no such dtype."""
    try:
        return DType(value).name.lower()
    except ValueError:
        return f"element type {value}"


def _attr_type_name(t: int) -> str:
    try:
        return onnx.AttributeProto.AttributeType.Name(int(t))
    except ValueError:
        return str(int(t))


class Node:
    """What an op lowering sees: one ONNX node, its inputs, attributes and emit helpers."""

    def __init__(self, low: Lowering, proto: onnx.NodeProto, opset: int, label: str) -> None:
        self.low = low
        self.proto = proto
        self.opset = opset
        self.label = label
        self.op_type = proto.op_type
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        try:
            schema = onnx.defs.get_schema(self.op_type, opset, proto.domain)
        except onnx.defs.SchemaError:
            schema = None
        self._attrs = {a.name: self._attr_value(a, schema) for a in proto.attribute}
        for name, spec in schema.attributes.items() if schema is not None else ():
            if spec.required and name not in self._attrs:
                self.fail(f"required attribute {name!r} is missing")

    def _attr_value(self, a: onnx.AttributeProto, schema: Any) -> Any:
        """The value of an attribute whose type matches the op's schema (when it has one)."""
        want = schema.attributes.get(a.name) if schema is not None else None
        if want is not None and int(a.type) != int(want.type):
            self.fail(
                f"attribute {a.name!r} has type {_attr_type_name(a.type)}, the schema says "
                f"{_attr_type_name(want.type)}"
            )
        try:
            value = helper.get_attribute_value(a)
        except ValueError:
            value = None
        if value is None:
            self.fail(f"attribute {a.name!r} has no value of a known type")
        return value

    def attr(self, name: str, default: Any = None) -> Any:
        v = self._attrs.get(name, default)
        if not isinstance(v, bytes):
            return v
        try:
            return v.decode()
        except UnicodeDecodeError:
            self.fail(f"attribute {name!r} is not valid UTF-8")

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] != ""

    def input(self, i: int) -> int:
        if not self.has_input(i):
            self.fail(f"input {i} is required")
        return self.low.tensor(self.inputs[i])

    def dtype(self, i: int) -> DType:
        return self.low.spec(self._input_name(i))[0]

    def shape(self, i: int) -> tuple[int, ...]:
        return self.low.spec(self._input_name(i))[1]

    def _input_name(self, i: int) -> str:
        if i >= len(self.inputs):
            raise CompileError(f"{self.label}: input {i} is required ({len(self.inputs)} given)")
        return self.inputs[i]

    def const(self, i: int, what: str) -> np.ndarray:
        """A compile-time constant input (shape, axes...); runtime values are unsupported."""
        name = self._input_name(i)
        if name not in self.low.constants:
            raise UnsupportedAttributeError(
                f"{self.label}: input {i} ({what}) must be a constant, but {name!r} is computed "
                "at run time"
            )
        return self.low.constants[name]

    def const_ints(self, i: int, what: str) -> list[int]:
        """A constant integer input (shape, axes, pads...) flattened to Python ints."""
        v = np.asarray(self.const(i, what))
        if not np.issubdtype(v.dtype, np.integer):
            raise UnsupportedDTypeError(
                f"{self.label}: input {i} ({what}) must hold integers, not {v.dtype}"
            )
        return [int(a) for a in v.reshape(-1)]

    def const_int(self, i: int, what: str) -> int:
        """A constant integer input holding exactly one value (k, axis, a length...)."""
        v = self.const_ints(i, what)
        if len(v) != 1:
            self.shape_error(f"input {i} ({what}) must hold one integer, got {len(v)}")
        return v[0]

    def check_dtype(self, allowed: frozenset[int], *indices: int) -> DType:
        """The common dtype of the given inputs, which must be one of `allowed`."""
        dts = {self.dtype(i) for i in indices}
        if len(dts) != 1:
            raise UnsupportedDTypeError(
                f"{self.label}: inputs have different dtypes {sorted(d.name.lower() for d in dts)}"
            )
        dt = dts.pop()
        if dt not in allowed:
            names = sorted(DType(d).name.lower() for d in allowed)
            raise UnsupportedDTypeError(
                f"{self.label}: dtype {dt.name.lower()} is not supported (supported: {names})"
            )
        return dt

    def check_table(self, entries: int, what: str) -> None:
        """A compile-time table of `entries` int64 values (index maps, masks, DFT matrices)
        must stay within MAX_TENSOR_BYTES: checked before it is built."""
        if entries * 8 > MAX_TENSOR_BYTES:
            self.shape_error(
                f"{what} needs a table of {entries} entries (at most {MAX_TENSOR_BYTES // 8})"
            )

    def fail(self, msg: str) -> NoReturn:
        raise UnsupportedAttributeError(f"{self.label}: {msg}")

    def shape_error(self, msg: str) -> NoReturn:
        raise ShapeError(f"{self.label}: {msg}")

    def axis(self, a: int, rank: int, what: str = "axis") -> int:
        if not -rank <= a < max(rank, 1):
            self.shape_error(f"{what} {a} is out of range for rank {rank}")
        return a + rank if a < 0 else a

    # ---- results
    def emit(
        self,
        op: Op,
        inputs: Sequence[int],
        shape: Sequence[int],
        dtype: int,
        attrs: Sequence[int] = (),
        out: int = 0,
        suffix: str = "",
    ) -> int:
        """A new root tensor for output `out`, written by one instruction."""
        b = self.low.b
        t = b.add(self.outputs[out] + suffix, dtype, shape, self.low.subgraph)
        b.emit(self.low.subgraph, op, inputs, [t], attrs)
        if not suffix:
            self.low.values[self.outputs[out]] = t
        return t

    def emit_temp(
        self,
        op: Op,
        inputs: Sequence[int],
        shape: Sequence[int],
        dtype: int,
        attrs: Sequence[int] = (),
        suffix: str = ":tmp",
    ) -> int:
        return self.emit(op, inputs, shape, dtype, attrs, suffix=suffix)

    def set_view(self, t: int, shape: Sequence[int], out: int = 0) -> None:
        """Output `out` is `t` seen with another shape: zero-copy."""
        self.low.values[self.outputs[out]] = self.low.b.view(t, shape, self.outputs[out])

    def fold(self) -> None:
        """Compute every output at compile time; each input must be a constant."""
        known: dict[str, np.ndarray] = {}
        for i in range(len(self.inputs)):
            if self.has_input(i):
                known[self.inputs[i]] = self.const(i, "input")  # a clear error for a run-time value
        try:
            results = evaluate(self.proto, known, self.low.graph.model, self.opset)
        except CompileError:
            raise
        except Exception as e:  # onnx.reference rejects the node's inputs or attributes
            raise CompileError(f"{self.label}: cannot compute at compile time: {e}") from e
        for i, r in enumerate(results):
            self.set_const(r, i)

    def set_const(self, array: np.ndarray, out: int = 0) -> None:
        if out < len(self.outputs) and self.outputs[out]:
            self.low.constants[self.outputs[out]] = array

    def view(self, t: int, shape: Sequence[int], suffix: str) -> int:
        return self.low.b.view(t, shape, self.inputs[0] + suffix)


def needed_nodes(nodes: Sequence[onnx.NodeProto], outputs: Sequence[str]) -> list[onnx.NodeProto]:
    """The nodes `outputs` depend on, in their original order (dead code dropped)."""
    want = set(outputs)
    keep: list[onnx.NodeProto] = []
    for node in reversed(nodes):
        if any(o in want for o in node.output if o):
            keep.append(node)
            want.update(i for i in [*node.input, *outer_refs(node)] if i)
    keep.reverse()
    return keep


def lower_subgraph(
    builder: GraphBuilder,
    graph: ImportedGraph,
    subgraph: int,
    inputs: Sequence[ValueSpec],
    outputs: Sequence[str],
    registry: dict[str, dict[int, Callable]],
    stage_of: Callable[[onnx.NodeProto], int] | None = None,
    output_stages: Mapping[str, int] | None = None,
) -> None:
    """Lower the nodes `outputs` need. With `stage_of` (manual sharding) every tensor and
    instruction records the stage of the node that made it; an output belongs to its stage in
    `output_stages`, by default the last stage."""
    low = Lowering(builder, graph, subgraph)
    low.output_names = set(outputs)
    for spec in inputs:
        low.add_input(spec)
    produced = {o for n in graph.nodes for o in n.output}
    for name in outputs:
        if name not in produced and name not in graph.constants and name not in low.values:
            raise CompileError(f"requested output {name!r} is not a value of the model")
    nodes = needed_nodes(graph.nodes, outputs)
    last = max((stage_of(n) for n in graph.nodes), default=0) if stage_of else 0
    for proto in nodes:
        if stage_of is not None:
            builder.current_stage = stage_of(proto)
        builder.current_node = len(builder.nodes)
        name = node_name(proto.name, proto.op_type, builder.current_node)
        builder.nodes.append(
            SourceNode(name, proto.op_type, tuple(proto.input), tuple(proto.output))
        )
        low.lower_node(proto, registry)
    made_by = {o: k for k, n in enumerate(builder.nodes) for o in n.outputs}
    for name in outputs:  # a copy into an output's own storage belongs to the node making it
        builder.current_stage = (output_stages or {}).get(name, last)
        builder.current_node = made_by.get(name, NO_NODE)
        low.add_output(name)
    builder.current_node = NO_NODE
    builder.current_stage = 0


def add_index_anchor(builder: GraphBuilder, name: str) -> None:
    """The fused-model selector input: uint32[1], shared by every subgraph."""
    t = builder.add(name, DType.UINT32, (1,), NO_INDEX)
    builder.anchors.append(BuildAnchor(name, 1, t, NO_INDEX))
