"""`TrainingSession`: the model, its loss, the backward pass (pyipu.training.gradients) and an
optimizer's update of every weight compiled into one pyipu executable.

The trainable weights are the model's float initializers. The executable takes them, their
optimizer state and the step count as inputs and writes their new values as outputs; the
session keeps them in its own arrays between steps and runs each step with those arrays as both
the inputs and the outputs (the runtime gives overlapping outputs the out-of-place result), so
nothing is copied through Python. Micro-batches run one after another: each step's weights are
the previous step's result.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import helper

from pyipu.popart.builder import Builder
from pyipu.popart.dataflow import DataFlow
from pyipu.popart.devices import DeviceInfo
from pyipu.popart.errors import popart_exception
from pyipu.popart.optimizers import IdentityLoss, L1Loss, Loss, NllLoss, Optimizer
from pyipu.popart.options import SessionOptions
from pyipu.popart.session import InputShapeInfo, Patterns, _Session
from pyipu.training import gradients
from pyipu.training.nodes import NodeWriter

STEP = "optimizer/step"


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
        if self.options.replicas > 1 or self.options.accumulation > 1:
            raise popart_exception(
                "TrainingSession: replication and gradient accumulation are not supported yet"
            )
        self.trainable = [
            i.name
            for i in self.model.graph.initializer
            if i.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
        ]
        self.state = {
            (w, s): np.full(self.weights[w].shape, self._opt.initial(s), self.weights[w].dtype)
            for w in self.trainable
            for s in self._opt.slots()
        }
        self.hyper = {v.name: v.value for v in self._opt.variables()}
        self.steps = 0

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
        """The model with the weights as inputs, the backward pass and the update; and the
        outputs to compile: computed anchors, then new weights and state."""
        base = onnx.ModelProto()
        base.CopyFrom(self.model)
        keep = [i for i in base.graph.initializer if i.name not in self.trainable]
        trainable = [i for i in base.graph.initializer if i.name in self.trainable]
        del base.graph.initializer[:]
        base.graph.initializer.extend(keep)
        names = {v.name for v in base.graph.input}
        for i in trainable:
            if i.name not in names:
                base.graph.input.append(
                    helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
                )
        try:
            model, grads = gradients(base, self.loss, self.trainable)
        except Exception as e:
            raise popart_exception(f"{self.name}: cannot differentiate the model: {e}") from e
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        w = NodeWriter(opset, "optimizer")
        new_outputs = []
        for name in self.trainable:
            dtype = self.weights[name].dtype
            state = {s: f"{name}/{s}" for s in self._opt.slots()}
            new, new_state = self._opt.update(w, name, grads[name], state, STEP, dtype)
            new_outputs.append(w.op("Identity", [new]))
            new_outputs += [w.op("Identity", [new_state[s]]) for s in self._opt.slots()]
            for slot_input in state.values():
                model.graph.input.append(
                    helper.make_tensor_value_info(
                        slot_input, _onnx(dtype), self.weights[name].shape
                    )
                )
        model.graph.node.extend(w.nodes)
        f32 = onnx.TensorProto.FLOAT
        model.graph.input.append(helper.make_tensor_value_info(STEP, f32, []))
        for var in self._opt.variables():
            model.graph.input.append(helper.make_tensor_value_info(var.name, f32, []))
        self._updated = new_outputs
        return model, [*self._computed_anchors(), *new_outputs]

    # --- steps -----------------------------------------------------------------------------
    def _execute(self, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        outs_desc = {d.name: d for d in self._runner.get_execute_outputs()}
        updated = iter(self._updated)
        writes: dict[str, np.ndarray] = {}
        for name in self.trainable:  # the new values land in the arrays they were read from
            writes[next(updated)] = self.weights[name]
            for s in self._opt.slots():
                writes[next(updated)] = self.state[(name, s)]
        results = []
        for feed in feeds:
            self.steps += 1
            full = dict(feed)
            full.update(self.weights)
            full.update({f"{w}/{s}": a for (w, s), a in self.state.items()})
            full[STEP] = np.array(self.steps, np.float32)
            full.update({k: np.array(v, np.float32) for k, v in self.hyper.items()})
            outs = {
                n: writes[n] if n in writes else np.empty(d.shape, d.numpy_data_type())
                for n, d in outs_desc.items()
            }
            anchored = {
                t: self.weights[t].copy() for t in self.dataFlow.anchors if t in self.weights
            }
            self._runner.execute(full, outs)
            outs.update(anchored)  # an anchored weight: its value this step read
            self._add_fed_anchors(feed, outs)
            results.append(outs)
        return results

    def _input_infos(self) -> dict[str, Any]:
        infos = super()._input_infos()
        fed = {*self.weights, STEP, *self.hyper, *(f"{w}/{s}" for w, s in self.state)}
        return {k: v for k, v in infos.items() if k not in fed}

    # --- weights and the optimizer ---------------------------------------------------------
    def weightsFromHost(self) -> None:  # noqa: N802
        self._check_compiled()

    def _store_weight(self, tid: str, src: np.ndarray, dest: np.ndarray) -> None:
        """Into the array the next step reads: no recompile."""
        np.copyto(dest, src, casting="same_kind")

    def optimizerFromHost(self) -> None:  # noqa: N802
        self._check_compiled()

    def updateOptimizerFromHost(self, optimizer: Optimizer) -> None:  # noqa: N802
        """New values of the optimizer's non-const hyperparameters, from the next step on."""
        self.hyper.update(self.optimizer.update_from(optimizer))


def _onnx(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
