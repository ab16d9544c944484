"""`InferenceSession`: an ONNX model compiled by pyipu's compiler into a PopEF executable and run
on pyipu's runtime, with PopART's calls (`prepareDevice`, `initAnchorArrays`, `run(stepio)`,
weights in and out).

One `run` processes batchesPerStep × accumulationFactor × replicas micro-batches: the input
arrays hold them all (PopART's layout), the executable runs once per micro-batch (requests in
flight together, spread over the replicas), and each anchor keeps what its AnchorReturnType
asks for.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from pyipu.errors import Error
from pyipu.popart.builder import _load
from pyipu.popart.dataflow import AnchorReturnTypeId, DataFlow, anchor_shape
from pyipu.popart.devices import DeviceInfo
from pyipu.popart.errors import OutOfMemoryException, popart_exception, poplar_exception
from pyipu.popart.options import SessionOptions
from pyipu.popart.stepio import PyStepIO, PyStepIOCallback, PyWeightsIO, split_steps
from pyipu.popart.tensorinfo import TensorInfo


class InputShapeInfo:
    """Shapes for inputs the model leaves dynamic: `InputShapeInfo().add(id, TensorInfo)`."""

    def __init__(self) -> None:
        self.infos: dict[str, TensorInfo] = {}

    def add(self, tensorId: str, info: TensorInfo) -> None:  # noqa: N803
        self.infos[tensorId] = info

    def get(self, tensorId: str) -> TensorInfo:  # noqa: N803
        return self.infos[tensorId]

    def has(self, tensorId: str) -> bool:  # noqa: N803
        return tensorId in self.infos


class Patterns:
    """PopART's graph-rewrite patterns: pyipu's compiler applies its own rewrites; the levels
    and names are accepted and recorded."""

    def __init__(self, level: Any = "Default") -> None:
        self.level = level
        self.settings: dict[str, bool] = {}

    def enablePattern(self, name: str, enabled: bool) -> Patterns:  # noqa: N802
        self.settings[name] = bool(enabled)
        return self


class _Session:
    """What inference and training sessions share: the model, the anchors, the runner."""

    def __init__(
        self,
        fnModel: bytes | str | os.PathLike,  # noqa: N803
        dataFlow: DataFlow,  # noqa: N803
        deviceInfo: DeviceInfo | None,  # noqa: N803
        inputShapeInfo: InputShapeInfo | None,  # noqa: N803
        patterns: Patterns | None,
        userOptions: SessionOptions | None,  # noqa: N803
        name: str,
    ) -> None:
        if not isinstance(dataFlow, DataFlow):
            raise popart_exception(f"dataFlow must be a DataFlow, got {type(dataFlow).__name__}")
        if deviceInfo is None:
            raise popart_exception(
                "no device: pass deviceInfo=DeviceManager().acquireAvailableDevice(1) "
                "(or createCpuDevice())"
            )
        self.name = name
        self.dataFlow = dataFlow
        self.device = deviceInfo
        self.options = userOptions if userOptions is not None else SessionOptions()
        self.patterns = patterns
        self.model = _load(fnModel)
        for tid, info in (inputShapeInfo.infos if inputShapeInfo else {}).items():
            _set_input_shape(self.model, tid, info)
        self._extend_model()
        self.weights = {
            i.name: np.array(numpy_helper.to_array(i)) for i in self.model.graph.initializer
        }
        self._values = _value_names(self.model)
        for tid in dataFlow.anchors:
            if tid not in self._values:
                raise popart_exception(
                    f"anchor {tid!r} is not a tensor of the model (tensors include: "
                    f"{', '.join(sorted(self._values)[:10])}, ...)"
                )
        self.seed = 0
        self._runner: Any = None
        self._io: tuple[dict[str, TensorInfo], list[tuple[str, tuple[int, ...], Any]]] = ({}, [])
        self._exe: Any = None
        self._weights_dirty = False
        self._inferred: dict[str, TensorInfo] | None = None

    def _extend_model(self) -> None:
        """Ops the session adds to the model before anything else reads it (none here)."""

    # --- compile ---------------------------------------------------------------------------
    def prepareDevice(self, loadEngine: bool = True) -> None:  # noqa: N802, N803
        """Compile the model (raises OutOfMemoryException when it does not fit)."""
        self._exe = self._compile()
        if loadEngine:
            self._load_engine()

    def loadEngineAndConnectStreams(self) -> None:  # noqa: N802
        self._check_compiled()
        self._load_engine()

    def loadExecutable(self, executable: Any) -> None:  # noqa: N802
        """Run `executable` (an Executable, or the path of the PopEF file compileAndExport wrote
        for the same model, options and optimizer) instead of compiling: a pyipu extension."""
        from pyipu.compiler.executable import Executable

        if not isinstance(executable, Executable):
            try:
                executable = Executable.open(executable)
            except (Error, OSError) as e:
                raise popart_exception(f"{self.name}: cannot load {executable!r}: {e}") from e
        _, outputs = self._model_to_compile()
        names = {a.name for a in executable.program.anchors}
        missing = sorted(set(outputs) - names)
        if missing:
            raise popart_exception(
                f"{self.name}: the executable does not compute {missing[:5]}: it was compiled "
                "for another model"
            )
        self._exe = executable
        self._load_engine()

    def compileAndExport(self, filename: str | os.PathLike) -> None:  # noqa: N802
        """Compile and write the PopEF file (for Triton / Model Runtime / pyipu.runtime)."""
        self._exe = self._compile()
        self._exe.save(filename)

    def _computed_anchors(self) -> list[str]:
        produced = {o for n in self.model.graph.node for o in n.output}
        return [t for t in self.dataFlow.anchors if t in produced]

    def _model_to_compile(self) -> tuple[onnx.ModelProto, list[str]]:
        """The model the executable runs and its outputs: the anchors it computes."""
        outputs = self._computed_anchors() or [o.name for o in self.model.graph.output]
        return self._model_with_weights(), outputs

    def _compile(self) -> Any:
        from pyipu.compiler import Compiler
        from pyipu.compiler.errors import IPUOutOfMemoryError

        model, outputs = self._model_to_compile()
        options = self._compiler_options()
        try:
            return Compiler.compile(model, outputs, options)
        except IPUOutOfMemoryError as e:
            raise OutOfMemoryException(str(e)) from None
        except Error as e:
            raise popart_exception(f"{self.name}: the model cannot be compiled: {e}") from e

    def _compiler_options(self) -> Any:
        """A pipeline fills and drains once per step: batchesPerStep micro-batches."""
        opts = self.options.compiler_options(self.device.numIpus)
        if opts.enable_pipelining:
            opts = dataclasses.replace(opts, batches_per_step=self.dataFlow.batchesPerStep)
        return opts

    def _load_engine(self) -> None:
        from pyipu.runtime import Runner, RuntimeConfig

        if self._runner is not None:
            self._runner.close()
        self._runner = Runner(self._exe, RuntimeConfig(timeout_ns=0))
        self._weights_dirty = False
        # what every run() validates against, fixed while this engine is loaded
        self._io = (
            {
                d.name: TensorInfo(d.numpy_data_type(), d.shape)
                for d in self._runner.get_execute_inputs()
            },
            [
                (d.name, tuple(d.shape), d.numpy_data_type())
                for d in self._runner.get_execute_outputs()
            ],
        )

    def _model_with_weights(self) -> onnx.ModelProto:
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        for init in model.graph.initializer:
            init.CopyFrom(numpy_helper.from_array(self.weights[init.name], init.name))
        return model

    def _check_compiled(self) -> None:
        if self._exe is None:
            raise poplar_exception(f"{self.name}: call prepareDevice() first")

    def _check_ready(self) -> None:
        self._check_compiled()
        if self._runner is None:
            raise poplar_exception(f"{self.name}: the engine is not loaded (prepareDevice())")

    # --- anchors and runs ------------------------------------------------------------------
    @property
    def _lead(self) -> tuple[int, int, int]:
        return (self.dataFlow.batchesPerStep, self.options.accumulation, self.options.replicas)

    def getInfo(self, tensorId: str) -> TensorInfo:  # noqa: N802, N803
        """dtype and shape of a tensor of the model (an input, weight, anchor or output)."""
        if tensorId in self.weights:
            return TensorInfo(self.weights[tensorId])
        infos = _tensor_infos(self._exe) if self._exe is not None else self._inferred_infos()
        info = infos.get(tensorId)
        if info is None or min(info.shape(), default=0) < 0:
            raise popart_exception(
                f"no known shape for tensor {tensorId!r} in {self.name} (give the inputs' shapes "
                "with inputShapeInfo)"
            )
        return info

    def _inferred_infos(self) -> dict[str, TensorInfo]:
        """Every value's TensorInfo by ONNX shape inference (before anything is compiled)."""
        if self._inferred is None:
            try:
                g = onnx.shape_inference.infer_shapes(self.model).graph
            except Exception as e:  # onnx's InferenceError: an inconsistent model
                raise popart_exception(f"{self.name}: shape inference failed: {e}") from None
            self._inferred = {
                v.name: TensorInfo.of_value(v)
                for v in [*g.input, *g.value_info, *g.output]
                if v.type.HasField("tensor_type")
            }
        return self._inferred

    def initAnchorArrays(self) -> dict[str, np.ndarray]:  # noqa: N802
        """A zeroed array per anchor, shaped as `run` fills it."""
        bps, acc, reps = self._lead
        out = {}
        for tid, art in self.dataFlow.anchors.items():
            info = self.getInfo(tid)
            shape = anchor_shape(art, bps, acc, reps, info.shape())
            out[tid] = np.zeros(shape, info.numpy_dtype())
        return out

    def run(self, stepio: PyStepIO | PyStepIOCallback, debugName: str = "") -> None:  # noqa: N803
        """One step: every micro-batch of the step through the executable."""
        self._check_ready()
        if self._weights_dirty:
            raise poplar_exception(
                f"{self.name}: weights were written on the host; call weightsFromHost() first"
            )
        n = math.prod(self._lead)
        if isinstance(stepio, PyStepIOCallback):
            feeds = [self._callback_inputs(stepio) for _ in range(n)]
        elif isinstance(stepio, PyStepIO):
            feeds = self._split_inputs(stepio.inputs, n)
        else:
            raise popart_exception(f"run() needs a PyStepIO, got {type(stepio).__name__}")
        results = self._execute(feeds)
        if isinstance(stepio, PyStepIOCallback):
            self._callback_outputs(stepio, results)
        else:
            self._fill_anchors(stepio.outputs, results)

    def _input_infos(self) -> dict[str, TensorInfo]:
        return self._io[0]

    def _split_inputs(self, inputs: Mapping[str, Any], n: int) -> list[dict[str, np.ndarray]]:
        infos = self._input_infos()
        unknown = sorted(set(inputs) - set(infos))
        if unknown:
            raise popart_exception(
                f"{unknown} are not inputs of the model (inputs: {sorted(infos)})"
            )
        missing = sorted(set(infos) - set(inputs))
        if missing:
            raise popart_exception(f"no data for input(s) {missing}")
        per: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
        for tid, info in infos.items():
            a = np.asarray(inputs[tid])
            if a.dtype != info.numpy_dtype():
                raise popart_exception(
                    f"input {tid!r}: dtype {a.dtype}, the model wants {info.numpy_dtype()}"
                )
            try:
                steps = split_steps(np.asarray(a, order="C"), self._lead, tuple(info.shape()))
            except ValueError as e:
                raise popart_exception(
                    f"input {tid!r}: {e} (batchesPerStep, accumulation, replicas lead)"
                ) from None
            for i in range(n):
                per[i][tid] = steps[i, ...]  # a 0-d array, not a NumPy scalar, for scalars
        return per

    def _callback_inputs(self, io: PyStepIOCallback) -> dict[str, np.ndarray]:
        feed = {}
        for tid, info in self._input_infos().items():
            a = np.asarray(io.input_cb(tid, False), order="C")  # keeps 0-d arrays 0-d
            if a.dtype != info.numpy_dtype() or list(a.shape) != info.shape():
                raise popart_exception(
                    f"input callback for {tid!r} gave {a.dtype}{list(a.shape)}, the model wants "
                    f"{info.numpy_dtype()}{info.shape()}"
                )
            feed[tid] = a
            io.input_complete_cb(tid)
        return feed

    def _execute(self, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Each micro-batch's anchor values, in micro-batch order."""
        results, pending = [], []
        for feed in feeds:
            outs = {name: np.empty(shape, dtype) for name, shape, dtype in self._io[1]}
            if len(feeds) == 1:  # nothing to overlap: the synchronous call skips a hand-off
                self._runner.execute(feed, outs)
            else:
                pending.append(self._runner.execute_async(feed, outs))
            results.append(outs)
        for p in pending:
            p.wait()
        for feed, outs in zip(feeds, results, strict=True):
            self._add_fed_anchors(feed, outs)
        return results

    def _add_fed_anchors(self, feed: dict[str, np.ndarray], outs: dict[str, np.ndarray]) -> None:
        """Anchors the executable does not compute: an input's fed value, a weight's."""
        for tid in self.dataFlow.anchors:
            if tid not in outs:
                outs[tid] = feed[tid] if tid in feed else self.weights[tid]

    def _per_replica(
        self, results: list[dict[str, np.ndarray]], tid: str
    ) -> list[list[np.ndarray]]:
        """[replica][batch] values of one anchor (accumulated micro-batches in batch order)."""
        bps, acc, reps = self._lead
        return [
            [results[(b * acc + a) * reps + r][tid] for b in range(bps) for a in range(acc)]
            for r in range(reps)
        ]

    def _fill_anchors(
        self, outputs: Mapping[str, np.ndarray], results: list[dict[str, np.ndarray]]
    ) -> None:
        bps, acc, reps = self._lead
        for tid, art in self.dataFlow.anchors.items():
            if tid not in outputs:
                raise popart_exception(f"no output array for anchor {tid!r} (initAnchorArrays())")
            dest = outputs[tid]
            value = results[0][tid]
            want = anchor_shape(art, bps, acc, reps, value.shape)
            if not isinstance(dest, np.ndarray) or dest.shape != want or dest.dtype != value.dtype:
                raise popart_exception(
                    f"anchor {tid!r}: the array is {getattr(dest, 'dtype', '?')}"
                    f"{list(getattr(dest, 'shape', []))}, expected {value.dtype}{list(want)}"
                )
            if len(results) == 1:  # one micro-batch: every return type returns it as it is
                dest[...] = value
                continue
            kept = [_collect(art, per, acc) for per in self._per_replica(results, tid)]
            # kept[r][k]: the k-th value returned for replica r; PopART's layout is [k][r]
            stacked = np.stack([np.stack(k) for k in kept], axis=1)
            dest[...] = stacked.reshape(want)

    def _callback_outputs(self, io: PyStepIOCallback, results: list[dict[str, np.ndarray]]) -> None:
        _, acc, _ = self._lead
        for tid, art in self.dataFlow.anchors.items():
            for per in self._per_replica(results, tid):
                for value in _collect(art, per, acc):
                    dest = io.output_cb(tid)
                    if not isinstance(dest, np.ndarray) or dest.shape != value.shape:
                        raise popart_exception(
                            f"output callback for {tid!r} gave no array of shape "
                            f"{list(value.shape)}"
                        )
                    dest[...] = value
                    io.output_complete_cb(tid)

    # --- weights ---------------------------------------------------------------------------
    def weightsFromHost(self) -> None:  # noqa: N802
        """Copy the host weights to the device (recompiles when they were written)."""
        self._check_compiled()
        if self._weights_dirty:
            self._exe = self._compile()
            self._load_engine()

    def weightsToHost(self) -> None:  # noqa: N802
        """Weights are the host's, except variables the executable updates (a model's state
        kept on the device): their current values are read."""
        self._check_compiled()
        if self._runner is not None:
            for name, value in self._runner.read_variables().items():
                if name in self.weights:
                    self.weights[name] = value

    def readWeights(self, weightsIo: PyWeightsIO) -> None:  # noqa: N802, N803
        for tid, dest in weightsIo.weights.items():
            dest[...] = self._matching_weight(tid, dest, "readWeights")

    def writeWeights(self, weightsIo: PyWeightsIO) -> None:  # noqa: N802, N803
        for tid, src in weightsIo.weights.items():
            self._store_weight(tid, src, self._matching_weight(tid, src, "writeWeights"))

    def _store_weight(self, tid: str, src: np.ndarray, dest: np.ndarray) -> None:
        """A written weight reaches the device at weightsFromHost (a recompile)."""
        self.weights[tid] = np.array(src, dest.dtype)
        self._weights_dirty = True

    def resetHostWeights(
        self,
        modelProtoOrFilename: bytes | str | os.PathLike,  # noqa: N803
        ignoreWeightsInModelWithoutCorrespondingHostWeight: bool = False,  # noqa: N803
    ) -> None:
        """Take the weights of another ONNX model (same names and shapes)."""
        for init in _load(modelProtoOrFilename).graph.initializer:
            if init.name not in self.weights:
                if ignoreWeightsInModelWithoutCorrespondingHostWeight:
                    continue
                raise popart_exception(
                    f"resetHostWeights: {init.name!r} is not a weight of {self.name}"
                )
            self.writeWeights(PyWeightsIO({init.name: numpy_helper.to_array(init)}))

    def modelToHost(self, fn: str | os.PathLike) -> None:  # noqa: N802
        """Write the ONNX model with the current weights."""
        onnx.save(self._model_with_weights(), os.fspath(fn))

    def _weight(self, tid: str) -> np.ndarray:
        if tid not in self.weights:
            raise popart_exception(
                f"{tid!r} is not a weight of {self.name} "
                f"(weights: {', '.join(sorted(self.weights)[:10])})"
            )
        return self.weights[tid]

    def _matching_weight(self, tid: str, array: np.ndarray, what: str) -> np.ndarray:
        """The weight `tid`, which `array` must match in shape."""
        weight = self._weight(tid)
        if array.shape != weight.shape:
            raise popart_exception(
                f"{what} {tid!r}: the array is {list(array.shape)}, the weight {list(weight.shape)}"
            )
        return weight

    # --- reports and the rest --------------------------------------------------------------
    def getSummaryReport(self, resetProfile: bool = True) -> str:  # noqa: N802, N803
        self._check_compiled()
        return str(self._exe.report().summary())

    def getReport(self) -> str:  # noqa: N802
        return self.getSummaryReport()

    def setRandomSeed(self, seedValue: int) -> None:  # noqa: N802, N803
        self.seed = int(seedValue)

    def getExecutable(self) -> Any:  # noqa: N802
        """The pyipu Executable (pyipu extension)."""
        self._check_compiled()
        return self._exe

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InferenceSession(_Session):
    """`InferenceSession(fnModel, dataFlow, deviceInfo, inputShapeInfo=InputShapeInfo(),
    patterns=None, userOptions=SessionOptions(), name="inference")`."""

    def __init__(
        self,
        fnModel: bytes | str | os.PathLike,  # noqa: N803
        dataFlow: DataFlow | None = None,  # noqa: N803
        deviceInfo: DeviceInfo | None = None,  # noqa: N803
        inputShapeInfo: InputShapeInfo | None = None,  # noqa: N803
        patterns: Patterns | None = None,
        userOptions: SessionOptions | None = None,  # noqa: N803
        name: str = "inference",
        **kw: Any,
    ) -> None:
        dataFlow = kw.pop("dataFeed", dataFlow)  # the name older PopART releases used
        if kw:
            raise popart_exception(f"InferenceSession: unknown argument(s) {sorted(kw)}")
        if dataFlow is None:
            raise popart_exception("InferenceSession needs a dataFlow")
        super().__init__(fnModel, dataFlow, deviceInfo, inputShapeInfo, patterns, userOptions, name)

    @classmethod
    def createFromOnnxModel(
        cls, model: bytes, dataFlow: DataFlow, deviceInfo: DeviceInfo, **kw: Any
    ) -> InferenceSession:  # noqa: N802, N803
        return cls(model, dataFlow, deviceInfo, **kw)


def _collect(art: Any, per_batch: list[np.ndarray], acc: int) -> list[np.ndarray]:
    """The values an anchor returns from one replica's micro-batches (ALL / EVERYN keep every
    accumulated micro-batch of the batches they keep)."""
    if art.kind in (AnchorReturnTypeId.All, AnchorReturnTypeId.EveryN) and acc > 1:
        batches = [per_batch[i : i + acc] for i in range(0, len(per_batch), acc)]
        return [v for b in art.collect(batches) for v in b]
    return art.collect(per_batch)


def _value_names(model: onnx.ModelProto) -> set[str]:
    g = model.graph
    return {
        *(v.name for v in g.input),
        *(i.name for i in g.initializer),
        *(o for n in g.node for o in n.output if o),
    }


def _set_input_shape(model: onnx.ModelProto, tid: str, info: TensorInfo) -> None:
    for vi in model.graph.input:
        if vi.name == tid:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in info.shape():
                dims.add().dim_value = d
            return
    raise popart_exception(f"inputShapeInfo: {tid!r} is not an input of the model")


def _tensor_infos(exe: Any) -> dict[str, TensorInfo]:
    from pyipu.compiler.ir import np_dtype

    ir = exe.program
    return {
        a.name: TensorInfo(np_dtype(ir.tensors[a.tensor].dtype), ir.tensors[a.tensor].shape)
        for a in ir.anchors
    }
