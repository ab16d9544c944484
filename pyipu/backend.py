"""ONNX backend API (`onnx.backend.base.Backend`) on top of the compiler and the C runtime.

    import pyipu.backend
    rep = pyipu.backend.prepare(model)          # compiles (lazily for dynamic input dims)
    outputs = rep.run([x, y])                  # graph output order, numpy arrays

Execution always goes through `pyipu.compiler.Compiler.compile` and `pyipu.runtime.Runner` (the
C runtime); the NumPy reference interpreter is never used here.

Choices (see docs/onnx-support.md):

* IPU graphs are static. A model whose graph inputs have dynamic (symbolic, unknown or missing)
  dims is compiled at `run` time with the shapes of the actual inputs, once per input-shape
  signature (the compiled runners are cached on the BackendRep).
* float64 is not an IPU type: a model that uses float64 is computed in float32, with a
  `Float64Warning` at prepare(): float64 inputs are rounded to float32 and float64 outputs are
  float32 results widened back to float64 (`pyipu.compiler.float64_to_float32` is the rewrite).
  The compiler itself rejects float64 models.
* Zero-size tensors (a dim of 0) cannot be IPU anchors: an empty input is compiled in as a
  constant (it has no data, only a shape); a model whose outputs or intermediates are empty is
  rejected with `pyipu.compiler.UnsupportedError`. 0-d (scalar) tensors are supported.
* Devices: "CPU" and "IPU" (the virtual IPU runs on the CPU); "CUDA" is not supported.
* Without `options`, models that would not fit on an IPU compile anyway (Poplar's engine option
  `debug.allowOutOfMemory`): the backend is for running on the CPU. Pass `options` to get the
  IPU Model's `IPUOutOfMemoryError` instead.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

from pyipu.compiler import (
    Compiler,
    CompilerOptions,
    UnsupportedDTypeError,
    UnsupportedError,
)
from pyipu.compiler.float64 import float64_to_float32, uses_float64
from pyipu.compiler.lower import COUNT_SUFFIX
from pyipu.compiler.onnx_import import set_input_shapes
from pyipu.enums import DType
from pyipu.errors import InvalidArgumentError
from pyipu.runtime import Runner, RuntimeConfig

SUPPORTED_DEVICES = ("CPU", "IPU")

# lower.py's error for an operand that must be known at compile time (shape, axes...).
_NEEDS_CONSTANT = re.compile(r"must be a constant, but '([^']+)' is computed at run time")
_MAX_FROZEN_ELEMENTS = 64


class Float64Warning(UserWarning):
    """A float64 model is computed in float32 (the IPU has no float64)."""


def _declared_dtype(infos: Sequence[onnx.ValueInfoProto], name: str) -> str:
    (vi,) = [i for i in infos if i.name == name]
    return TensorProto.DataType.Name(vi.type.tensor_type.elem_type).lower()


def _static_dims(vi: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    """The input's dims when all are fixed and positive, else None (dynamic)."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value") or d.dim_value <= 0:
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


class PyipuBackendRep(BackendRep):
    """A prepared model: `run(inputs)` returns the outputs in graph output order."""

    def __init__(
        self,
        model: onnx.ModelProto,
        device: str = "CPU",
        options: CompilerOptions | None = None,
        num_threads: int | None = None,
    ) -> None:
        graph = model.graph
        self._f64 = {
            vi.name
            for vi in [*graph.input, *graph.output]
            if vi.type.tensor_type.elem_type == TensorProto.DOUBLE
        }
        if uses_float64(model):
            warnings.warn(
                "the model uses float64, which the IPU does not have: computing in float32",
                Float64Warning,
                stacklevel=3,
            )
            model = float64_to_float32(model)
            graph = model.graph
        self.model = model
        self.device = device
        # A conformance backend runs on the CPU: models too big for an IPU compile anyway.
        self._options = options or CompilerOptions(
            engine_options={"debug.allowOutOfMemory": "true"}
        )
        self._num_threads = num_threads
        inits = {i.name for i in graph.initializer} | {i.name for i in graph.sparse_initializer}
        self.input_infos = [vi for vi in graph.input if vi.name not in inits]
        self.input_names = [vi.name for vi in self.input_infos]
        self.output_names = [o.name for o in graph.output]
        for vi in [*self.input_infos, *graph.output]:
            if not vi.type.HasField("tensor_type"):
                raise UnsupportedError(
                    f"graph input/output {vi.name!r} is not a tensor (sequence, map and optional "
                    "values are not supported)"
                )
            elem = vi.type.tensor_type.elem_type
            if elem and elem not in DType._value2member_map_:
                raise UnsupportedDTypeError(
                    f"graph input/output {vi.name!r} has ONNX dtype "
                    f"{TensorProto.DataType.Name(elem)}, which pyipu does not support"
                )
        self._declared = {vi.name: _static_dims(vi) for vi in self.input_infos}
        self._dynamic = any(d is None for d in self._declared.values())
        self._cache: dict[tuple, Runner] = {}
        # Graph inputs the compiler needs as constants (Reshape shape, Squeeze axes...): frozen
        # to their run-time values, one compilation per value (see run()).
        self._frozen: set[str] = set()
        if not self._dynamic:
            # Static model: compile now so that errors surface in prepare().
            try:
                self._runner_for(None)
            except UnsupportedError as e:
                m = _NEEDS_CONSTANT.search(str(e))
                if not m or m.group(1) not in self.input_names:
                    raise  # otherwise run() freezes that input to its value and recompiles

    # -- compilation ----------------------------------------------------------------------------
    def _runner_for(
        self,
        shapes: dict[str, tuple[int, ...]] | None,
        feeds: dict[str, np.ndarray] | None = None,
    ) -> Runner:
        frozen = {n: feeds[n] for n in sorted(self._frozen)} if feeds is not None else {}
        key = (
            None if shapes is None else tuple(shapes[n] for n in self.input_names),
            tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in frozen.items()),
        )
        runner = self._cache.get(key)
        if runner is None:
            model = self.model
            if shapes is not None:
                model = set_input_shapes(
                    model, {n: s for n, s in shapes.items() if n not in frozen}
                )
            if frozen:
                model = _freeze_inputs(model, frozen)
            exe = Compiler.compile(model, self.output_names, self._options)
            config = RuntimeConfig()
            config.num_threads = self._num_threads or 1
            runner = Runner(exe, config)
            self._cache[key] = runner
        return runner

    # -- execution ------------------------------------------------------------------------------
    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, np.ndarray) and len(self.input_names) == 1:
            inputs = [inputs]
        if isinstance(inputs, Mapping):
            unknown = set(inputs) - set(self.input_names)
            if unknown:
                raise InvalidArgumentError(
                    f"unknown inputs {sorted(unknown)}; the model's inputs are {self.input_names}"
                )
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise InvalidArgumentError(f"missing inputs {missing}")
            items = [(n, inputs[n]) for n in self.input_names]
        elif isinstance(inputs, Sequence):
            if len(inputs) != len(self.input_names):
                raise InvalidArgumentError(
                    f"the model takes {len(self.input_names)} inputs {self.input_names}, "
                    f"got {len(inputs)}"
                )
            items = list(zip(self.input_names, inputs, strict=True))
        else:
            raise InvalidArgumentError(
                f"inputs must be a list (graph input order) or a dict, got {type(inputs).__name__}"
            )
        feeds = {}
        for name, value in items:
            if isinstance(value, TensorProto):
                value = onnx.numpy_helper.to_array(value)
            if not isinstance(value, np.ndarray):
                if isinstance(value, (list, dict)) or value is None:
                    raise UnsupportedError(
                        f"input {name!r} is a {type(value).__name__}: sequence, map and optional "
                        "inputs are not supported (tensors only)"
                    )
                value = np.asarray(value)
            declared = self._declared.get(name)
            if declared == () and value.shape == (1,):
                value = value.reshape(())  # a 1-element array fed to a 0-d input
            if value.dtype == np.float64:
                if name not in self._f64:
                    raise UnsupportedDTypeError(
                        f"input {name!r} is float64 but the model declares it "
                        f"{_declared_dtype(self.input_infos, name)}"
                    )
                value = value.astype(np.float32)
            if value.size == 0:
                # An empty tensor carries only its shape: compiled in as a constant (an IPU
                # anchor cannot be empty), like the inputs frozen in run().
                self._frozen.add(name)
            # (np.ascontiguousarray would turn a 0-d array into shape (1,))
            feeds[name] = value if value.flags.c_contiguous else value.copy(order="C")
        return feeds

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        del kwargs
        feeds = self._feeds(inputs)
        shapes = {n: tuple(a.shape) for n, a in feeds.items()} if self._dynamic else None
        while True:
            try:
                runner = self._runner_for(shapes, feeds if self._frozen else None)
                break
            except UnsupportedError as e:
                # An operand the IPU graph needs at compile time is a graph input: freeze it to
                # the value given (small integer tensors only) and recompile.
                m = _NEEDS_CONSTANT.search(str(e))
                name = m.group(1) if m else None
                if (
                    name not in feeds
                    or name in self._frozen
                    or feeds[name].size > _MAX_FROZEN_ELEMENTS
                    or feeds[name].dtype.kind not in "iubf"
                ):
                    raise
                self._frozen.add(name)
        feeds = {n: a for n, a in feeds.items() if n not in self._frozen}
        descs = {d.name: d for d in runner.get_execute_outputs()}
        counted = [n for n in self.output_names if n + COUNT_SUFFIX in descs]
        outputs = {
            n: np.empty(tuple(descs[n].shape), descs[n].numpy_data_type())
            for n in [*self.output_names, *(c + COUNT_SUFFIX for c in counted)]
        }
        runner.execute(feeds, outputs)
        for n in counted:  # a data-dependent dim: ONNX Runtime's result is its first `count`
            outputs[n] = self._valid_part(n, outputs[n], int(outputs[n + COUNT_SUFFIX][0]))
        return namedtupledict("Outputs", self.output_names)(
            *(
                outputs[n].astype(np.float64) if n in self._f64 else outputs[n]
                for n in self.output_names
            )
        )

    def _valid_part(self, name: str, padded: np.ndarray, count: int) -> np.ndarray:
        """The first `count` entries of the padded output's data-dependent dim: the dim the
        model leaves symbolic or declares smaller than the capacity (else the first)."""
        (vi,) = [o for o in self.model.graph.output if o.name == name]
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in vi.type.tensor_type.shape.dim]  # fmt: skip
        axis = next((i for i, d in enumerate(dims) if i < padded.ndim and d != padded.shape[i]), 0)
        return np.take(padded, np.arange(count), axis=axis)

    def close(self) -> None:
        for runner in self._cache.values():
            runner.close()
        self._cache.clear()

    def __del__(self) -> None:
        cache = getattr(self, "_cache", None)
        if cache:
            self.close()


def _freeze_inputs(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` where the named graph inputs are initializers holding `values`."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = [vi for vi in out.graph.input if vi.name not in values]
    del out.graph.input[:]
    out.graph.input.extend(keep)
    out.graph.initializer.extend(
        onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in values.items()
    )
    return out


class PyipuBackend(Backend):
    """pyipu as an ONNX backend (devices "CPU" and "IPU": the virtual IPU on the host)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> PyipuBackendRep:
        """Compile `model` (ModelProto, bytes or path). Keyword arguments: `options`
        (CompilerOptions), `num_threads` (runtime workers, default 1); others (such as the
        test runner's rtol/atol) are ignored."""
        if not cls.supports_device(device):
            raise UnsupportedError(
                f"device {device!r} is not supported; use one of {SUPPORTED_DEVICES}"
            )
        if not isinstance(model, onnx.ModelProto):
            from pyipu.compiler.onnx_import import load_model

            model = load_model(model)
        return PyipuBackendRep(
            model, device, options=kwargs.get("options"), num_threads=kwargs.get("num_threads")
        )

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        rep = cls.prepare(model, device, **kwargs)
        try:
            return rep.run(inputs)
        finally:
            rep.close()

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """Run one node: a one-node model is built from the inputs' dtypes and shapes."""
        opset = kwargs.pop("opset_version", None)
        if isinstance(inputs, Mapping):
            arrays = [np.asarray(inputs[n]) for n in node.input if n]
        else:
            arrays = [np.asarray(a) for a in inputs]
        names = [n for n in node.input if n]
        if len(arrays) != len(names):
            raise InvalidArgumentError(f"node takes {len(names)} inputs, got {len(arrays)}")
        graph_inputs = [
            helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)
            )
            for n, a in zip(names, arrays, strict=True)
        ]
        outs = [o for o in node.output if o]
        if outputs_info is not None:
            graph_outputs = [
                helper.make_tensor_value_info(
                    o, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), list(shape)
                )
                for o, (dt, shape) in zip(outs, outputs_info, strict=False)
            ]
        else:
            graph_outputs = [helper.make_empty_tensor_value_info(o) for o in outs]
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        opsets = [helper.make_opsetid(node.domain or "", opset or onnx.defs.onnx_opset_version())]
        model = helper.make_model(graph, opset_imports=opsets)
        return cls.run_model(model, arrays, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().split(":")[0] in SUPPORTED_DEVICES


prepare = PyipuBackend.prepare
run_model = PyipuBackend.run_model
run_node = PyipuBackend.run_node
supports_device = PyipuBackend.supports_device
is_compatible = PyipuBackend.is_compatible
