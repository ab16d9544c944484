"""`TrainingSession`: the model, its loss, the backward pass (pyipu.training.gradients) and an
optimizer's update of every weight compiled into one pyipu executable.

The trained weights are the float initializers the loss depends on. They, their optimizer state,
the step count and BatchNormalization's running statistics are the executable's variables
(pyipu.compiler.variables): they live on the device, each step updates them in place, and they
reach the host only when asked (`weightsToHost`, `modelToHost`, `saveCheckpoint`). Micro-batches
run one after another: each reads the weights the previous one wrote. Non-const optimizer values
(learning rate, ...) are inputs fed with every micro-batch, so `updateOptimizerFromHost` needs no
recompile.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import onnx
from onnx import helper

from pyipu.compiler.executable import Executable
from pyipu.compiler.variables import initial_values, with_initial_values
from pyipu.errors import Error
from pyipu.popart import training_graph
from pyipu.popart.builder import Builder
from pyipu.popart.dataflow import DataFlow
from pyipu.popart.devices import DeviceInfo
from pyipu.popart.errors import popart_exception
from pyipu.popart.losses import ReductionType
from pyipu.popart.optimizers import IdentityLoss, L1Loss, Loss, NllLoss, Optimizer
from pyipu.popart.options import SessionOptions, VirtualGraphMode
from pyipu.popart.session import InputShapeInfo, Patterns, _Session
from pyipu.popart.stepio import PyWeightsIO
from pyipu.popart.training_graph import replica_name
from pyipu.training.autodiff import differentiable
from pyipu.training.placement import pipeline_stages


class TrainingSession(_Session):
    """`TrainingSession(fnModel, dataFlow, loss, optimizer, deviceInfo, inputShapeInfo=None,
    patterns=None, userOptions=None, name="training")`; the older `dataFeed=` and
    `losses=[NllLoss(...)]` are accepted too."""

    def __init__(
        self,
        fnModel: bytes | str | os.PathLike,  # noqa: N803
        dataFlow: DataFlow | None = None,  # noqa: N803
        loss: str | None = None,
        optimizer: Optimizer | None = None,
        deviceInfo: DeviceInfo | None = None,  # noqa: N803
        inputShapeInfo: InputShapeInfo | None = None,  # noqa: N803
        patterns: Patterns | None = None,
        userOptions: SessionOptions | None = None,  # noqa: N803
        name: str = "training",
        **kw: Any,
    ) -> None:
        dataFlow = kw.pop("dataFeed", dataFlow)
        self._losses: list[Loss] = list(kw.pop("losses", []) or [])
        if kw:
            raise popart_exception(f"TrainingSession: unknown argument(s) {sorted(kw)}")
        if dataFlow is None:
            raise popart_exception("TrainingSession needs a dataFlow")
        if not isinstance(optimizer, Optimizer):
            raise popart_exception("TrainingSession needs an optimizer (SGD, Adam, Adaptive...)")
        if loss is None and len(self._losses) != 1:
            raise popart_exception(
                "TrainingSession needs a loss: loss=<tensor id> (or losses=[one])"
            )
        self.loss = loss if loss is not None else self._losses[0].output
        self.optimizer = optimizer
        self._opt = optimizer.build()
        super().__init__(fnModel, dataFlow, deviceInfo, inputShapeInfo, patterns, userOptions, name)
        if self.loss not in self._values:
            raise popart_exception(f"the loss {self.loss!r} is not a tensor of the model")
        self._sharded = self._check_sharding()
        self.running = _running_statistics(self.model)
        floats = [
            i.name
            for i in self.model.graph.initializer
            if i.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
            and i.name not in self.running
        ]
        self.trainable = differentiable(self.model, self.loss, floats)
        self.state = {
            (w, s): np.full(self.weights[w].shape, self._opt.initial(s), self.weights[w].dtype)
            for w in self.trainable
            for s in training_graph.state_slots(self._opt, self.options.accumulation, self._sharded)
        }
        self.hyper = {v.name: v.value for v in self._opt.variables()}
        self.steps = 0
        self._written: set[str] = set()  # variables written on the host since weightsFromHost
        self._graph: training_graph.TrainingGraph | None = None

    def _check_sharding(self) -> bool:
        """Whether the model is placed on virtual graphs; PopART's rule for pipelining: a
        pipeline of 2S - 1 stages (S forward stages) needs at least that many micro-batches per
        weight update."""
        opts = self.options
        if opts.enablePipelining and opts.virtualGraphMode != VirtualGraphMode.Manual:
            raise popart_exception("enablePipelining needs virtualGraphMode Manual")
        if opts.enablePipelining:
            depth = 2 * pipeline_stages(self.model.graph.node) - 1
            if opts.accumulation < depth:
                raise popart_exception(
                    f"pipelined training runs {depth} stages (forward and backward): it needs "
                    f"enableGradientAccumulation with accumulationFactor >= {depth} (now "
                    f"{opts.accumulation})"
                )
        return opts.virtualGraphMode != VirtualGraphMode.Off

    def _extend_model(self) -> None:
        """The older API's losses, written into the model as builder ops."""
        if not self._losses:
            return
        b = Builder(self.model.SerializeToString())
        for loss in self._losses:
            g = b.aiGraphcore
            opts = dict(loss.options)
            if isinstance(loss, NllLoss):
                out = g.nllloss(loss.inputs, **opts)
            elif isinstance(loss, L1Loss):
                out = g.l1loss(loss.inputs, opts.pop("lambda_"), **opts)
            elif isinstance(loss, IdentityLoss):
                out = g.identityloss(loss.inputs, **opts)
            else:
                raise popart_exception(f"unknown loss {type(loss).__name__}")
            b.model.graph.node.append(helper.make_node("Identity", [out], [loss.output]))
        self.model = b.model

    # --- compile ---------------------------------------------------------------------------
    def _model_to_compile(self) -> tuple[onnx.ModelProto, list[str]]:
        """The training graph (training_graph.py) at the current weights and state, and the
        outputs to compile: the computed anchors of every replica."""
        opts = self.options
        self._graph = training_graph.build(
            self._model_with_weights(),
            self.loss,
            self.trainable,
            self.running,
            self._opt,
            self.state,
            self.steps,
            list(self.dataFlow.anchors),
            replicas=opts.replicas,
            accumulation=opts.accumulation,
            mean_reduction=opts.reduction == ReductionType.Mean,
            sharded=self._sharded,
        )
        return self._graph.model, self._graph.outputs

    def _compiler_options(self) -> Any:
        """One executable holds every replica (and their all-reduce), on all the IPUs; a
        sharded one runs a weight update's micro-batches as one step (its step-end program
        applies the optimizer)."""
        bps = self.options.accumulation if self._sharded else 1
        return dataclasses.replace(
            super()._compiler_options(),
            replication_factor=1,
            num_ipus=self.device.numIpus,
            batches_per_step=bps,
        )

    # --- steps -----------------------------------------------------------------------------
    def _execute(self, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """One execution per group of `replicas` micro-batches (replica fastest, as PopART
        lays them out), each replica's data fed to its own inputs."""
        reps = self.options.replicas
        hyper = {k: np.array(v, np.float32) for k, v in self.hyper.items()}
        grouped = []
        for k in range(0, len(feeds), reps):
            feed = dict(hyper)
            for r in range(reps):
                feed.update({replica_name(t, r): a for t, a in feeds[k + r].items()})
            grouped.append(feed)
        results = []
        for feed, outs in zip(grouped, super()._execute(grouped), strict=True):
            self.steps += 1
            for r in range(reps):
                mine = {
                    t: outs[replica_name(t, r)]
                    for t in self.dataFlow.anchors
                    if replica_name(t, r) in outs
                }
                mine.update({t: outs[v] for t, v in self._compiled_graph.anchors.items()})
                for t in self.dataFlow.anchors:  # a fed input, or a constant weight
                    if t not in mine:
                        fed = feed.get(replica_name(t, r))
                        mine[t] = fed if fed is not None else self.weights[t]
                results.append(mine)
        return results

    @property
    def _compiled_graph(self) -> training_graph.TrainingGraph:
        if self._graph is None:
            raise popart_exception(f"{self.name}: call prepareDevice() first")
        return self._graph

    def _input_infos(self) -> dict[str, Any]:
        data = set(self._compiled_graph.data_inputs)
        return {k: v for k, v in super()._input_infos().items() if k in data}

    # --- weights and the optimizer ---------------------------------------------------------
    def _variables(self) -> set[str]:
        return {*self.trainable, *self.running}

    def _pull(self) -> None:
        """The device's variables into the host copies."""
        if self._runner is None:
            return
        for name, value in self._runner.read_variables().items():
            if name == training_graph.MICRO:
                self.steps = int(value)
            elif name.startswith(training_graph.MICRO):  # a stage's count: the same
                continue
            elif name in self.weights:
                self.weights[name] = value
            else:
                weight, slot = name.rsplit("/", 1)
                self.state[(weight, slot)] = value

    def weightsFromHost(self) -> None:  # noqa: N802
        """Copy the weights written on the host (writeWeights) to the device; a written
        non-trained weight (a constant of the model) recompiles, keeping the trained state."""
        self._check_compiled()
        if self._weights_dirty:
            self._pull()
            self._written.clear()
            super().weightsFromHost()
            return
        if self._runner is not None and self._written:
            self._runner.write_variables({t: self.weights[t] for t in self._written})
        self._written.clear()

    def weightsToHost(self) -> None:  # noqa: N802
        """Copy the device's weights, optimizer state and step count to the host."""
        self._check_compiled()
        self._pull()

    def _store_weight(self, tid: str, src: np.ndarray, dest: np.ndarray) -> None:
        if tid not in self._variables():
            super()._store_weight(tid, src, dest)
            return
        self.weights[tid] = np.array(src, dest.dtype)
        self._written.add(tid)

    def modelToHost(self, fn: str | os.PathLike) -> None:  # noqa: N802
        """Write the ONNX model with the device's current weights."""
        if self._exe is not None:
            self._pull()
        super().modelToHost(fn)

    def optimizerFromHost(self) -> None:  # noqa: N802
        self._check_compiled()

    # --- checkpoints (pyipu extensions) ----------------------------------------------------
    def saveCheckpoint(self, path: str | os.PathLike) -> None:  # noqa: N802
        """Write the executable as a PopEF file whose variables (weights, optimizer state, step
        count, running statistics) start from the device's current values: loadCheckpoint
        resumes from it, and any pyipu runtime loading it continues training from there."""
        self._check_ready()
        ir = with_initial_values(self._exe.program, self._runner.read_variables())
        Executable.from_program(ir).save(path)

    def loadCheckpoint(self, path: str | os.PathLike) -> None:  # noqa: N802
        """Resume from a saveCheckpoint file of the same model and optimizer: its variables'
        values go to the device (and the host copies)."""
        self._check_ready()
        try:
            values = initial_values(Executable.open(path).program)
        except (Error, OSError) as e:
            raise popart_exception(f"loadCheckpoint {os.fspath(path)!r}: {e}") from e
        mine = {d.name for d in self._runner.get_variables()}
        if set(values) != mine:
            raise popart_exception(
                f"loadCheckpoint: the file's variables differ from {self.name}'s "
                f"(missing {sorted(mine - set(values))[:5]}, "
                f"unknown {sorted(set(values) - mine)[:5]})"
            )
        try:  # checks every value's dtype and shape before writing any
            self._runner.write_variables(values)
        except Error as e:
            raise popart_exception(f"loadCheckpoint {os.fspath(path)!r}: {e}") from e
        self._written.clear()
        self._pull()

    def updateOptimizerFromHost(self, optimizer: Optimizer) -> None:  # noqa: N802
        """New values of the optimizer's non-const hyperparameters, from the next step on."""
        self.hyper.update(self.optimizer.update_from(optimizer))

    def readOptimizerState(self, weightsIo: PyWeightsIO) -> None:  # noqa: N802, N803
        """The host copies of optimizer state ("W/velocity", "W/m", ...; after weightsToHost)."""
        for tid, dest in weightsIo.weights.items():
            weight, _, slot = tid.rpartition("/")
            if (weight, slot) not in self.state:
                raise popart_exception(
                    f"{tid!r} is not optimizer state of {self.name} "
                    f"(slots: {', '.join(self._opt.slots()) or 'none'})"
                )
            dest[...] = self.state[(weight, slot)]


def _running_statistics(model: onnx.ModelProto) -> dict[str, str]:
    """{initializer: new value} for the running mean and variance BatchNormalization updates in
    training mode (outputs 1 and 2 in every opset)."""
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for n in model.graph.node:
        if n.op_type != "BatchNormalization" or len(n.output) < 3:
            continue
        for k in (1, 2):
            if n.output[k] and n.input[2 + k] in inits:
                out[n.input[2 + k]] = n.output[k]
    return out
