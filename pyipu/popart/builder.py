"""`Builder`: PopART's way of writing an ONNX model op by op (`builder.aiOnnx.add([a, b])`).

The op methods are not listed here: `aiOnnx.<name>` looks the op up in ONNX's own schemas at the
builder's opset (PopART's lower-case names: `matmul`, `batchnormalization`...), so every ONNX op
of that opset is there with its attributes. Positional attributes follow PopART's generated
signatures: the required attributes, then the optional ones, each group in alphabetical order
(`gemm([a, b, c], 1.0, 1.0, 0, 1)` is alpha, beta, transA, transB); any attribute may also be
given by name. Ops whose output count varies take `num_outputs` first (`split`, `dropout`) and,
like every op with more than one output, return a list of ids.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import defs, helper, numpy_helper, shape_inference

from pyipu.compiler.staging import IPU_ATTR, STAGE_ATTR, set_int_attr
from pyipu.popart.errors import popart_exception
from pyipu.popart.tensorinfo import TensorInfo

DEFAULT_OPSETS = {"ai.onnx": 10, "ai.graphcore": 1}  # PopART's Builder defaults


def _onnx_ops() -> dict[str, str]:
    """PopART method name (lower case) → ONNX op type, for every op of the default domain."""
    ops = {s.name.lower(): s.name for s in defs.get_all_schemas_with_history() if s.domain == ""}
    # Python keywords: PopART spells these logical_*
    ops.update(logical_not="Not", logical_and="And", logical_or="Or", logical_xor="Xor")
    return ops


class OpSet:
    """The ONNX ops at one opset version: `aiOnnx`, `aiOnnxOpset11`..."""

    def __init__(self, builder: Builder, version: int) -> None:
        self._builder = builder
        self._version = version

    def __getattr__(self, name: str) -> Any:
        op_type = _ONNX_OPS.get(name.lower()) if not name.startswith("_") else None
        if op_type is None:
            raise AttributeError(f"aiOnnx has no op {name!r}")
        try:
            schema = defs.get_schema(op_type, self._version, "")
        except defs.SchemaError:
            raise AttributeError(
                f"aiOnnx: {op_type} does not exist at opset {self._version}"
            ) from None
        if schema.deprecated:
            raise AttributeError(f"aiOnnx: {op_type} is deprecated at opset {self._version}")

        def op(args: Sequence[str], *values: Any, **kwargs: Any) -> Any:
            return self._builder._add_node(schema, list(args), values, kwargs)

        op.__name__ = name
        op.__doc__ = f"ONNX {op_type} (opset {schema.since_version}): {(schema.doc or '')[:200]}"
        return op


class Builder:
    """An ONNX model built op by op (PopART `popart.Builder`)."""

    def __init__(
        self,
        modelProtoOrFilename: bytes | str | os.PathLike | None = None,  # noqa: N803
        opsets: dict[str, int] | None = None,
    ) -> None:
        self.opsets = dict(DEFAULT_OPSETS if opsets is None else opsets)
        if modelProtoOrFilename is None:
            self.model = helper.make_model(helper.make_graph([], "BuilderGraph", [], []))
            del self.model.opset_import[:]
        else:
            self.model = _load(modelProtoOrFilename)
            for o in self.model.opset_import:
                if o.domain in ("", "ai.onnx"):
                    self.opsets["ai.onnx"] = max(o.version, self.opsets.get("ai.onnx", 0))
        self._ids: set[str] = {
            *(v.name for v in self.model.graph.input),
            *(i.name for i in self.model.graph.initializer),
            *(o for n in self.model.graph.node for o in n.output),
        }
        self._counter = 0
        self._attrs: dict[str, Any] = {}  # virtualGraph / pipelineStage in force

    # --- op sets ---------------------------------------------------------------------------
    @property
    def aiOnnx(self) -> OpSet:  # noqa: N802
        return OpSet(self, self.opsets["ai.onnx"])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("aiOnnxOpset") and name[11:].isdigit():
            version = int(name[11:])
            return lambda: OpSet(self, version)
        raise AttributeError(f"'Builder' object has no attribute {name!r}")

    @property
    def aiGraphcore(self) -> Any:  # noqa: N802
        from pyipu.popart.losses import AiGraphcore

        return AiGraphcore(self)

    # --- tensors ---------------------------------------------------------------------------
    def addInputTensor(  # noqa: N802
        self,
        tensorInfo: TensorInfo | str,
        *args: Any,
        debugContext: str = "",  # noqa: N803
    ) -> str:
        """A graph input: `(TensorInfo, [settings], [debugContext])` or `(dtype, shape, ...)`."""
        rest = list(args)
        if isinstance(tensorInfo, str):
            if not rest:
                raise popart_exception("addInputTensor(dtype, shape): the shape is missing")
            tensorInfo = TensorInfo(tensorInfo, rest.pop(0))
        if not isinstance(tensorInfo, TensorInfo):
            raise popart_exception(f"addInputTensor needs a TensorInfo, got {tensorInfo!r}")
        for a in rest:  # InputSettings are accepted and have no effect on a CPU
            if isinstance(a, str):
                debugContext = a
        tid = self._new_id(debugContext or "input")
        vi = helper.make_tensor_value_info(tid, tensorInfo.onnx_type, tensorInfo.shape())
        self.model.graph.input.append(vi)
        return tid

    def addInitializedInputTensor(  # noqa: N802
        self,
        array: np.ndarray,
        *args: Any,
        debugContext: str = "",  # noqa: N803
    ) -> str:
        """A weight initialised to `array` (a copy is kept)."""
        for a in args:
            if isinstance(a, str):
                debugContext = a
        tid = self._new_id(debugContext or "init_input")
        self.model.graph.initializer.append(numpy_helper.from_array(np.array(array), tid))
        return tid

    def addOutputTensor(self, tensorId: str) -> None:  # noqa: N803
        self._check_id(tensorId)
        if any(o.name == tensorId for o in self.model.graph.output):
            return
        self.model.graph.output.append(onnx.ValueInfoProto(name=tensorId))

    def getModelProto(self) -> bytes:  # noqa: N802
        """The serialized ONNX model, with output types inferred."""
        return self._inferred().SerializeToString()

    def getInputTensorIds(self) -> list[str]:  # noqa: N802
        weights = {i.name for i in self.model.graph.initializer}
        return [v.name for v in self.model.graph.input if v.name not in weights]

    def getOutputTensorIds(self) -> list[str]:  # noqa: N802
        return [o.name for o in self.model.graph.output]

    def getValueTensorIds(self) -> list[str]:  # noqa: N802
        return [o for n in self.model.graph.node for o in n.output]

    def getTensorShape(self, tensorId: str) -> list[int]:  # noqa: N802
        return TensorInfo.of_value(self._value_info(tensorId)).shape()

    def getTensorDtypeString(self, tensorId: str) -> str:  # noqa: N802
        return TensorInfo.of_value(self._value_info(tensorId)).data_type_lcase()

    def getTensorInfo(self, tensorId: str) -> TensorInfo:  # noqa: N802
        return TensorInfo.of_value(self._value_info(tensorId))

    # --- placement -------------------------------------------------------------------------
    def virtualGraph(self, *args: Any) -> Any:  # noqa: N802
        """`with builder.virtualGraph(i):` places the ops made inside on IPU i;
        `virtualGraph(tensorIds, value)` places the ops making those tensors."""
        return self._placement(IPU_ATTR, args)

    def pipelineStage(self, *args: Any) -> Any:  # noqa: N802
        return self._placement(STAGE_ATTR, args)

    def _placement(self, attr: str, args: tuple[Any, ...]) -> Any:
        if len(args) == 1 and isinstance(args[0], int):
            return self._scope(attr, args[0])
        if not args or len(args) > 2:
            raise popart_exception(f"expected (int) or (tensorIds, value), got {args!r}")
        ids = [args[0]] if isinstance(args[0], str) else list(args[0])
        value = int(args[1]) if len(args) == 2 else 0
        for tid in ids:
            node = self._producer(tid)
            set_int_attr(node, attr, value)
        return None

    @contextlib.contextmanager
    def _scope(self, attr: str, value: int) -> Iterator[None]:
        saved = self._attrs.get(attr)
        self._attrs[attr] = value
        try:
            yield
        finally:
            if saved is None:
                self._attrs.pop(attr)
            else:
                self._attrs[attr] = saved

    # --- internals -------------------------------------------------------------------------
    def _new_id(self, base: str) -> str:
        tid = base
        while tid in self._ids:
            self._counter += 1
            tid = f"{base}:{self._counter}"
        self._ids.add(tid)
        return tid

    def _check_id(self, tid: Any) -> None:
        if not isinstance(tid, str) or tid not in self._ids:
            raise popart_exception(f"no tensor {tid!r} in the model (known: {_some(self._ids)})")

    def _producer(self, tid: str) -> onnx.NodeProto:
        for node in self.model.graph.node:
            if tid in node.output:
                return node
        raise popart_exception(f"no op produces tensor {tid!r}")

    def _use_opset(self, domain: str, version: int) -> None:
        for o in self.model.opset_import:
            if o.domain == domain:
                o.version = max(o.version, version)
                return
        self.model.opset_import.append(helper.make_opsetid(domain, version))

    def _add_node(
        self, schema: Any, args: list[str], values: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        debug = str(kwargs.pop("debugContext", kwargs.pop("debugPrefix", "")) or "")
        for a in args:
            if a != "":
                self._check_id(a)
        variable = schema.min_output != schema.max_output
        values_left = list(values)
        n_out = int(
            kwargs.pop("num_outputs", values_left.pop(0) if variable and values_left else 0)
        )
        if not n_out:
            n_out = schema.min_output if variable else schema.max_output
        required = sorted(a for a, s in schema.attributes.items() if s.required)
        optional = sorted(a for a, s in schema.attributes.items() if not s.required)
        if len(values_left) > len(required) + len(optional):
            raise popart_exception(
                f"{schema.name}: {len(values_left)} attribute values for "
                f"{len(required) + len(optional)} attributes ({', '.join(required + optional)})"
            )
        attrs = dict(zip(required + optional, values_left, strict=False))
        for k, v in kwargs.items():
            if k not in schema.attributes:
                raise popart_exception(
                    f"{schema.name} has no attribute {k!r} (it has {sorted(schema.attributes)})"
                )
            attrs[k] = v
        missing = [a for a in required if a not in attrs]
        if missing:
            raise popart_exception(f"{schema.name}: required attribute(s) {missing} not given")
        attrs = {k: v for k, v in attrs.items() if v is not None and not _empty_list(v)}
        base = f"{debug}/{schema.name}" if debug else schema.name
        outputs = [self._new_id(f"{base}:0") for _ in range(n_out)]
        node = helper.make_node(schema.name, args, outputs, name=outputs[0], **attrs)
        for attr, value in self._attrs.items():
            set_int_attr(node, attr, value)
        self.model.graph.node.append(node)
        self._use_opset("", self.opsets["ai.onnx"])
        return outputs[0] if schema.max_output == 1 else outputs

    def _inferred(self) -> onnx.ModelProto:
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        if not model.opset_import:
            model.opset_import.append(helper.make_opsetid("", self.opsets["ai.onnx"]))
        try:
            inferred = shape_inference.infer_shapes(model)
        except shape_inference.InferenceError as e:
            raise popart_exception(f"the model is not valid: {e}") from None
        known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
        for out in model.graph.output:
            if not out.type.HasField("tensor_type") and out.name in known:
                out.CopyFrom(known[out.name])
        return model

    def _value_info(self, tid: str) -> onnx.ValueInfoProto:
        self._check_id(tid)
        m = self._inferred()
        inferred = shape_inference.infer_shapes(m)
        for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
            if v.name == tid:
                return v
        for init in m.graph.initializer:
            if init.name == tid:
                return helper.make_tensor_value_info(tid, init.data_type, list(init.dims))
        raise popart_exception(f"the shape of {tid!r} cannot be inferred")


_ONNX_OPS = _onnx_ops()


def _load(source: bytes | str | os.PathLike) -> onnx.ModelProto:
    try:
        if isinstance(source, bytes):
            return onnx.load_model_from_string(source)
        return onnx.load(os.fspath(source))
    except (OSError, onnx.checker.ValidationError) as e:
        raise popart_exception(f"cannot load the model {str(source)[:80]!r}: {e}") from None
    except Exception as e:  # protobuf's DecodeError: not an ONNX model
        raise popart_exception(f"not an ONNX model: {type(e).__name__}: {e}") from None


def _empty_list(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and len(v) == 0


def _some(ids: set[str], n: int = 8) -> str:
    names = sorted(ids)
    return ", ".join(names[:n]) + (f", ... ({len(names)} in all)" if len(names) > n else "")
