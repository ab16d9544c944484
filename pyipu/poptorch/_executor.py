"""`PoplarExecutor`: a torch Module wrapped by `inferenceModel` / `trainingModel`, run by pyipu.

The first call lowers the module to ONNX (_lowering.py) and compiles it through PopART's
sessions (pyipu.popart): an `InferenceSession`, or a `TrainingSession` whose executable holds
the forward pass, pyipu's backward pass and the optimizer's update, with the weights and the
optimizer state kept on the device between calls. One call runs deviceIterations ×
replicationFactor (× gradientAccumulation) micro-batches, its inputs' first dimension holding
them all, and returns what `outputMode` asks for. Host weights stay in step as _sync.py says.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
import weakref
from typing import Any

import numpy as np
import onnx
import torch
from onnx import helper

import pyipu
from pyipu.popart import (
    AnchorReturnType,
    DataFlow,
    DeviceManager,
    InferenceSession,
    PyStepIO,
    PyWeightsIO,
    SessionOptions,
    TrainingSession,
    VirtualGraphMode,
)
from pyipu.poptorch import _lowering, _sync, optim
from pyipu.poptorch.enums import OutputMode
from pyipu.poptorch.errors import (
    Error,
    InputDTypeError,
    InputShapeError,
    InvalidStateError,
    OptionError,
)
from pyipu.poptorch.options import Options

BLOB = "poptorch"  # the PopEF opaque blob compileAndExport writes


class PoplarExecutor:
    """What `inferenceModel` and `trainingModel` return; calling it runs the model on pyipu."""

    def __init__(
        self,
        model: torch.nn.Module,
        options: Options | None,
        training: bool,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        if isinstance(model, PoplarExecutor):
            model = model.__dict__["model"]
        if not isinstance(model, torch.nn.Module):
            raise Error(
                f"expected a torch.nn.Module, got {type(model).__name__}",
                type="poptorch_python_error",
                location="PoplarExecutor",
            )
        if options is not None and not isinstance(options, Options):
            raise OptionError(f"options must be poptorch.Options, got {type(options).__name__}")
        self.model = model
        self.options = (options or Options()).clone()
        self.training = training
        self._mode = True if training else model.training  # PopTorch keeps the mode it wraps
        self._sync = _sync.sync_of(model)
        if training:
            live = self._sync.trainer() if self._sync.trainer is not None else None
            if live is not None and live._session is not None:
                raise InvalidStateError(
                    "the model is already wrapped by a trainingModel: call destroy() on that "
                    "wrapper before wrapping it again"
                )
            self._sync.trainer = weakref.ref(self)
            if optimizer is None:
                optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            optim.to_popart(optimizer)  # refuse an unsupported optimizer now
            optim.bind(optimizer, self)
        self._optimizer = optimizer
        self._session: Any = None
        self._lowered: _lowering.Lowered | None = None
        self._host: dict[str, torch.Tensor] = {}
        self._signature: tuple | None = None
        self._example: Any = None
        self._constants: Any = None
        self._version = -1
        self._attached = False
        self._checkpoint: str | None = None
        self._latency: list[float] = []
        self._anchors: tuple[Any, dict[str, np.ndarray], dict[str, list[int]]] | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.model, name)

    # --- compiling ------------------------------------------------------------------------
    def isCompiled(self) -> bool:  # noqa: N802
        return self._session is not None

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Lower and compile for these inputs (the first call does it otherwise)."""
        self.destroy()  # a compiled model compiles again, from the host's weights
        self._sync.pull()
        self._lower(args, kwargs)
        self._session = self._new_session()
        self._session.prepareDevice()
        self._after_load()

    def _lower(self, args: tuple, kwargs: dict) -> None:
        tensors, _, _ = _lowering.flatten_inputs(args, kwargs)
        factor = self.options.batch_factor(self.training)
        self._sync.busy = True
        try:
            low = _lowering.lower(
                self.model,
                args,
                kwargs,
                factor,
                self._mode,
                self.options.execution_strategy,
                with_loss=self.training,
            )
            named = {**dict(self.model.named_parameters()), **dict(self.model.named_buffers())}
        finally:
            self._sync.busy = False
        self._lowered = low
        self._host = {init: named[name] for init, name in low.params.items()}
        self._signature = _signature(args, kwargs)
        self._example = _zeros_like((args, kwargs))
        del tensors

    def _new_session(self) -> Any:
        low = self._lowered
        assert low is not None
        opts = self.options
        so = SessionOptions()
        reps, acc = opts.replication_factor, opts.gradient_accumulation if self.training else 1
        so.enableReplicatedGraphs, so.replicatedGraphCount = reps > 1, reps
        so.enableGradientAccumulation, so.accumulationFactor = acc > 1, acc
        so.accumulationAndReplicationReductionType = int(
            opts.Training.values["accumulation_and_replication_reduction_type"]
        )
        so.numIOTiles = int(opts.TensorLocations.values.get("num_io_tiles", 0))
        if opts._values["cache_path"]:
            so.enableEngineCaching, so.cachePath = True, opts._values["cache_path"]
        ipus = self._ipus(so)
        for k, v in opts._Popart.values.items():
            setattr(so, k, v)
        anchors = {o: self._anchor_type() for o in low.outputs}
        anchors.update({o: AnchorReturnType("ALL") for o, _ in low.prints})  # each batch's
        flow = DataFlow(opts.device_iterations, anchors)
        device = DeviceManager().createIpuModelDevice({"numIPUs": ipus * reps})
        model = low.model
        if not self.training:
            session: Any = InferenceSession(
                model.SerializeToString(), flow, device, userOptions=so, name="inferenceModel"
            )
        else:
            assert self._optimizer is not None and low.loss is not None
            popart_opt = optim.to_popart(self._optimizer)
            model, loss = _training_loss(model, low.loss)
            model, running_var = _unbiased_running_var(model)
            session = TrainingSession(
                model.SerializeToString(),
                flow,
                loss,
                popart_opt,
                device,
                userOptions=so,
                name="trainingModel",
            )
            session.running.update(running_var)
            _restrict_training(session, self._host, self._optimizer)
            self._constants = optim.constants(popart_opt)
            loaded = optim.take_loaded_state(self._optimizer)
            if loaded is not None:
                self._set_optimizer_state(session, loaded)
        if opts.random_seed is not None:
            session.setRandomSeed(opts.random_seed)
        return session

    def _ipus(self, so: SessionOptions) -> int:
        """IPUs per replica, from the blocks; sets virtual graphs and pipelining."""
        assert self._lowered is not None
        placement = self._lowered.placement
        if placement.num_ipus == 0:
            return 1
        n = placement.num_ipus
        if n & (n - 1):
            if not self.options.auto_round_num_ipus:
                raise OptionError(
                    f"the model uses {n} IPUs, not a power of 2: annotate it for a power of 2 "
                    "or set autoRoundNumIPUs(True)"
                )
            n = 1 << (n - 1).bit_length()
        so.virtualGraphMode = VirtualGraphMode.Manual
        so.enablePipelining = placement.pipelined and placement.num_stages > 1
        return n

    def _anchor_type(self) -> AnchorReturnType:
        mode = self.options.output_mode
        if mode == OutputMode.Default:
            mode = OutputMode.Final if self.training else OutputMode.All
        if mode == OutputMode.EveryN:
            return AnchorReturnType("EVERYN", self.options.output_return_period)
        return AnchorReturnType(mode.name.upper())

    def _after_load(self) -> None:
        self._attached = True
        self._version = self._sync.version

    # --- running --------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._session is None:
            self.compile(*args, **kwargs)
        tensors, structure = _flatten(args, kwargs)
        self._check_inputs(tensors, structure)
        if not self._attached:
            self.attachToDevice()
        self._sync_to_device()
        low, session = self._lowered, self._session
        assert low is not None
        lead = self._lead()
        feeds = {
            spec.name: t.detach().cpu().contiguous().numpy().reshape(lead + spec.shape)
            for spec, t in zip(low.inputs, tensors, strict=True)
        }
        cached = self._anchors
        if cached is None or cached[0] is not session:  # reused: outputs are copied out
            shapes = {n: session.getInfo(n).shape() for n in [*low.outputs, *dict(low.prints)]}
            cached = self._anchors = (session, session.initAnchorArrays(), shapes)
        _, anchors, shapes = cached
        start = time.perf_counter()
        session.run(PyStepIO(feeds, anchors))
        self._latency = [*self._latency[-99:], time.perf_counter() - start]
        if self.training:
            self._sync.owner = self
        outs = [_output(anchors[name], shapes[name]) for name in low.outputs]
        for name, fmt in low.prints:  # ipu_print_tensor's, one block per batch run
            for value in np.reshape(anchors[name], (-1, *shapes[name])):
                print(fmt.render(value))
        return _lowering.rebuild(low.out_spec, low.out_leaves, outs)

    def _lead(self) -> tuple[int, ...]:
        o = self.options
        acc = o.gradient_accumulation if self.training else 1
        return tuple(d for d in (o.device_iterations, acc, o.replication_factor) if d != 1)

    def _check_inputs(self, tensors: list[torch.Tensor], structure: Any) -> None:
        want = self._signature
        assert want is not None
        if structure != want[0] or len(tensors) != len(want[1]):
            raise InputShapeError(
                "the inputs' structure differs from the one the model was compiled for "
                f"({len(tensors)} tensors, expected {len(want[1])}): create a new wrapper"
            )
        for k, (t, (wshape, wdtype)) in enumerate(zip(tensors, want[1], strict=True)):
            shape, dtype = tuple(t.shape), t.dtype
            if dtype != wdtype:
                raise InputDTypeError(
                    f"input {k}: dtype {dtype}, the model was compiled for {wdtype}"
                )
            if shape != wshape:
                raise InputShapeError(
                    f"input {k}: shape {list(shape)}, the model was compiled for {list(wshape)} "
                    "(shapes are fixed by the first call; create a new wrapper for others)"
                )

    # --- weights --------------------------------------------------------------------------
    def _sync_to_device(self) -> None:
        owner = self._sync.owner
        if owner is not None and owner is not self:
            self._sync.pull()
        if self._version != self._sync.version:
            self.copyWeightsToDevice()

    def copyWeightsToHost(self) -> None:  # noqa: N802
        """Copy the device's weights (and BatchNorm running statistics) to the host model."""
        if self._session is None:
            return
        session = self._session
        self._sync.busy = True
        try:
            if self._attached:
                session.weightsToHost()
            arrays = {
                n: np.empty(session.weights[n].shape, session.weights[n].dtype)
                for n in self._host
                if n in session.weights
            }
            session.readWeights(PyWeightsIO(arrays))
            with torch.no_grad():
                for n, a in arrays.items():
                    self._host[n].copy_(torch.from_numpy(a))
        finally:
            self._sync.busy = False
        if self._sync.owner is self:
            self._sync.owner = None
        if self.training:
            self._sync.version += 1
            self._version = self._sync.version

    def copyWeightsToDevice(self) -> None:  # noqa: N802
        """Copy the host model's weights to the device (needed after changing them on the host,
        for example by training on the CPU)."""
        if self._session is None:
            return
        session = self._session
        if self.training and self._attached:
            session.weightsToHost()  # its host copies are what the device held when last read
        changed = {}
        for n, t in self._host.items():
            a = t.detach().cpu().numpy()
            if n in session.weights and not np.array_equal(a, session.weights[n]):
                changed[n] = np.array(a)
        if changed:
            session.writeWeights(PyWeightsIO(changed))
            session.weightsFromHost()
        if self._sync.owner is self:
            self._sync.owner = None
        self._version = self._sync.version

    # --- the device -----------------------------------------------------------------------
    def isAttachedToDevice(self) -> bool:  # noqa: N802
        return self._attached

    def detachFromDevice(self) -> None:  # noqa: N802
        """Release the runtime; a training model's weights and optimizer state are kept and
        restored by attachToDevice (a call attaches again by itself)."""
        if not self._attached:
            raise InvalidStateError("the model is not attached to a device")
        if self.training:
            self._session.weightsToHost()  # the host copies copyWeightsToHost reads meanwhile
            fd, path = tempfile.mkstemp(suffix=".popef", prefix="poptorch-detached-")
            os.close(fd)
            self._session.saveCheckpoint(path)
            self._checkpoint = path
        self._session.close()
        self._attached = False

    def attachToDevice(self) -> None:  # noqa: N802
        if self._session is None:
            raise InvalidStateError("the model is not compiled: call it (or compile()) first")
        if self._attached:
            raise InvalidStateError("the model is already attached to a device")
        self._session.loadEngineAndConnectStreams()
        if self._checkpoint is not None:
            self._session.loadCheckpoint(self._checkpoint)
            os.remove(self._checkpoint)
            self._checkpoint = None
        self._attached = True

    def destroy(self) -> None:
        """Release the executable; the next call compiles again (a training model's weights are
        copied to the host first)."""
        if self._session is None:
            return
        if self.training and self._sync.owner is self:
            self.copyWeightsToHost()
        if self.training:  # a poptorch.optim optimizer keeps it (the next trainingModel resumes)
            optim.keep_state(self._optimizer, self.optimizerState())
        if self._attached:
            self._session.close()
        if self._checkpoint is not None:
            os.remove(self._checkpoint)
            self._checkpoint = None
        self._session, self._lowered, self._attached = None, None, False
        self._anchors = None

    def __del__(self) -> None:
        path = getattr(self, "_checkpoint", None)
        if path is not None and os.path.exists(path):
            os.remove(path)

    # --- optimizer ------------------------------------------------------------------------
    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:  # noqa: N802
        """Use `optimizer`'s values from the next call: a new learning rate is fed at run time,
        any other change recompiles, keeping the weights, optimizer state and step count."""
        if not self.training:
            raise InvalidStateError("setOptimizer: this is an inferenceModel")
        new = optim.to_popart(optimizer)
        self._optimizer = optimizer
        optim.bind(optimizer, self)
        if self._session is None:
            return
        if optim.constants(new) == self._constants:
            self._session.updateOptimizerFromHost(new)
            return
        self._recompile()

    def _recompile(self, state: dict[str, Any] | None = None) -> None:
        """A new training session keeping the weights, optimizer state (or `state`, in
        `optimizerState`'s layout) and step count."""
        old = self._session
        if self._attached:
            old.weightsToHost()
        session = self._new_session()
        session.weights.update({k: v for k, v in old.weights.items() if k in session.weights})
        session.state.update({k: v for k, v in old.state.items() if k in session.state})
        session.steps = old.steps
        if state is not None:
            self._set_optimizer_state(session, state)
        if self._attached:
            old.close()
        if self._checkpoint is not None:
            os.remove(self._checkpoint)
            self._checkpoint = None
        self._session = session
        session.prepareDevice()
        self._attached = True

    def optimizerState(self) -> dict[str, Any]:  # noqa: N802
        """The device's optimizer state: {"steps": n, "slots": {"<parameter>/<slot>": tensor}}
        (a poptorch.optim optimizer's `state_dict()["ipu_state"]`)."""
        session, low = self._session, self._lowered
        if not self.training or session is None or low is None:
            raise InvalidStateError("optimizerState: only a compiled trainingModel has one")
        if self._attached:
            session.weightsToHost()
        return {
            "steps": int(session.steps),
            "slots": {
                f"{low.params[w]}/{slot}": torch.from_numpy(np.array(v))
                for (w, slot), v in session.state.items()
            },
        }

    def _set_optimizer_state(self, session: Any, state: dict[str, Any]) -> None:
        """`optimizerState`'s layout into a session that has not loaded yet."""
        assert self._lowered is not None
        init_of = {name: init for init, name in self._lowered.params.items()}
        try:
            steps, slots = int(state["steps"]), dict(state["slots"])
        except (KeyError, TypeError, ValueError) as e:
            raise OptionError(f"optimizer state: not an ipu_state dict ({e!r})") from None
        values = {}
        for key, value in slots.items():
            name, _, slot = str(key).rpartition("/")
            k = (init_of.get(name), slot)
            have = session.state.get(k)
            array = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value)
            if have is None or array.shape != have.shape:
                known = sorted(f"{self._lowered.params[w]}/{s}" for w, s in session.state)
                raise OptionError(
                    f"optimizer state {key!r} does not fit this model and optimizer "
                    f"(its state: {known[:6]})"
                )
            values[k] = array.astype(have.dtype)
        session.state.update(values)
        session.steps = steps

    def _load_optimizer_state(self, state: dict[str, Any]) -> None:
        """A bound optimizer's load_state_dict: the state goes to the device now."""
        if self._session is not None:
            self._recompile(state)

    # --- export ---------------------------------------------------------------------------
    def compileAndExport(
        self, filename: str | os.PathLike, *args: Any, export_model: bool = True, **kwargs: Any
    ) -> None:
        """Compile for these inputs and write a PopEF file holding the executable and what
        `poptorch.load` needs to wrap it again (the pickled model unless export_model=False)."""
        import dataclasses

        from pyipu.compiler.executable import Executable

        if self._session is None or args or kwargs:
            self.destroy()
            self.compile(*args, **kwargs)
        self._sync.pull()
        exe = self._session.getExecutable()
        meta = {
            "pyipu": pyipu.__version__,
            "training": self.training,
            "mode": self._mode,
            "options": self.options,
            "optimizer": self._optimizer if export_model else None,
            "model": self.model if export_model else None,
            "example": self._example,
        }
        blob = (BLOB, pickle.dumps(meta))
        program = dataclasses.replace(exe.program, opaque=(*exe.program.opaque, blob))
        Executable.from_program(program).save(filename)

    def loadExecutable(self, filename: str | os.PathLike) -> None:  # noqa: N802
        """Run the executable of a compileAndExport file instead of compiling."""
        from pyipu.compiler.executable import Executable

        exe = Executable.open(filename)
        meta = _metadata(exe, filename)
        if meta["training"] != self.training:
            kind = "trainingModel" if meta["training"] else "inferenceModel"
            raise InvalidStateError(f"{os.fspath(filename)!r} holds a {kind}'s executable")
        if self._session is not None:
            self.destroy()
        self._mode = meta["mode"]  # the executable's: the modules' modes when it was exported
        args, kwargs = meta["example"]
        self._sync.pull()
        self._lower(args, kwargs)
        self._session = self._new_session()
        self._session.loadExecutable(exe)
        self._after_load()

    def getLatency(self) -> tuple[float, float, float]:  # noqa: N802
        """(min, max, mean) wall time in seconds of the last calls (up to 100) on the device."""
        if not self._latency:
            raise InvalidStateError("getLatency: the model has not run yet")
        lat = self._latency
        return min(lat), max(lat), sum(lat) / len(lat)

    def cycleCount(self) -> int:  # noqa: N802
        """The IPU Model's estimate of the cycles the last call took on one replica (its
        batches through the executable; docs/ipu-model.md). Needs `logCycleCount(True)`, as in
        PopTorch."""
        if not self.options._values.get("log_cycle_count"):
            raise Error(
                "cycleCount: cycle count logging is disabled (Options.logCycleCount(True))",
                type="poptorch_cpp_error",
                location="cycleCount",
            )
        if not self._latency or self._session is None:
            raise InvalidStateError("cycleCount: the model has not run yet")
        report = self._session.getExecutable().report()
        acc = self.options.gradient_accumulation if self.training else 1
        batches = self.options.device_iterations * acc
        return round(report.step_cycles * batches / report.batches_per_step)

    def lossOf(self, output: Any) -> torch.Tensor:  # noqa: N802
        """The training loss among the outputs a trainingModel call returned (a pyipu
        extension: `%ipu train` plots it)."""
        low = self._lowered
        if not self.training or low is None or low.loss_output is None:
            raise InvalidStateError("lossOf: only a trainingModel that ran has a loss")
        tensors, _, _ = _lowering.flatten_inputs((output,), {})
        return tensors[low.loss_output]


def _flatten(args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], Any]:
    """A call's tensors and a key of its structure (non-tensor arguments included)."""
    if not kwargs and all(isinstance(a, torch.Tensor) for a in args):
        return list(args), len(args)  # the common call, without walking a pytree
    tensors, spec, leaves = _lowering.flatten_inputs(args, kwargs)
    return tensors, (str(spec), repr(leaves))


def _signature(args: tuple, kwargs: dict) -> tuple:
    tensors, structure = _flatten(args, kwargs)
    return structure, [(tuple(t.shape), t.dtype) for t in tensors]


def _zeros_like(tree: Any) -> Any:
    from torch.utils import _pytree as pytree

    return pytree.tree_map(
        lambda v: torch.zeros(v.shape, dtype=v.dtype) if isinstance(v, torch.Tensor) else v, tree
    )


def _output(anchor: np.ndarray, shape: list[int]) -> torch.Tensor:
    """An anchor as PopTorch returns it: the batches it holds concatenated along dim 0."""
    a = np.array(anchor)
    if a.ndim > len(shape):
        a = a.reshape(-1, *shape[1:]) if shape else a.reshape(-1)
    return torch.from_numpy(a)


def _training_loss(model: onnx.ModelProto, loss: str) -> tuple[onnx.ModelProto, str]:
    """The value the training graph differentiates: the loss, summed when it is not a scalar
    (identity_loss "none"). The session applies the optimizer's loss scaling."""
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.output
    }
    if shapes.get(loss, []) == []:
        return model, loss
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.node.append(helper.make_node("ReduceSum", [loss], ["poptorch/loss_sum"], keepdims=0))
    return out, "poptorch/loss_sum"


def _unbiased_running_var(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """torch's BatchNorm running variance averages the unbiased batch variance, ONNX's the
    population variance σ²: ONNX's new value v' = m·v + (1-m)·σ² becomes v' + (1-m)·σ²/(n-1),
    n the values per channel (σ² computed again from the input). {running var: new value}."""
    inits = {i.name for i in model.graph.initializer}
    bns = [
        n
        for n in model.graph.node
        if n.op_type == "BatchNormalization" and len(n.output) > 2 and n.input[4] in inits
    ]
    if not bns:
        return model, {}
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*onnx.shape_inference.infer_shapes(model).graph.value_info, *model.graph.input]
    }
    out = onnx.ModelProto()
    out.CopyFrom(model)
    mapping = {}
    for k, bn in enumerate(bns):
        shape = shapes.get(bn.input[0], [])
        if len(shape) < 2 or any(d <= 0 for d in shape) or int(np.prod(shape)) <= shape[1]:
            continue
        n = int(np.prod(shape)) // shape[1]
        axes = [a for a in range(len(shape)) if a != 1]
        attrs = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
        scale = (1.0 - float(attrs.get("momentum", 0.9))) / (n - 1)
        p = f"poptorch/bn{k}/"
        dtype = next(i.data_type for i in model.graph.initializer if i.name == bn.input[4])
        const = helper.make_tensor(p + "scale_value", dtype, [], [scale])
        out.graph.node.extend(
            [
                helper.make_node("ReduceMean", [bn.input[0]], [p + "mean"], axes=axes),
                helper.make_node("Sub", [bn.input[0], p + "mean"], [p + "centred"]),
                helper.make_node("Mul", [p + "centred", p + "centred"], [p + "squares"]),
                helper.make_node("ReduceMean", [p + "squares"], [p + "var"], axes=axes, keepdims=0),
                helper.make_node("Constant", [], [p + "scale"], value=const),
                helper.make_node("Mul", [p + "var", p + "scale"], [p + "extra"]),
                helper.make_node("Add", [bn.output[2], p + "extra"], [p + "running_var"]),
            ]
        )
        mapping[bn.input[4]] = p + "running_var"
    return out, mapping


def _restrict_training(
    session: Any, host: dict[str, torch.Tensor], opt: torch.optim.Optimizer
) -> None:
    """Train only the parameters the optimizer holds that require a gradient."""
    wanted = {id(p) for p in optim.trained_parameters(opt) if p.requires_grad}
    names = {init for init, t in host.items() if id(t) in wanted}
    session.trainable = [t for t in session.trainable if t in names]
    session.state = {k: v for k, v in session.state.items() if k[0] in names}


def _metadata(exe: Any, filename: Any) -> dict[str, Any]:
    for name, payload in exe.program.opaque:
        if name == BLOB:
            meta = pickle.loads(payload)
            if meta.get("pyipu") != pyipu.__version__:
                raise Error(
                    f"{os.fspath(filename)!r} was exported by pyipu {meta.get('pyipu')}, this is "
                    f"{pyipu.__version__}: the versions must match",
                    type="poptorch_python_error",
                    location="load",
                )
            return meta
    raise Error(
        f"{os.fspath(filename)!r} is not a PopTorch export (no {BLOB!r} blob)",
        type="poptorch_python_error",
        location="load",
    )
