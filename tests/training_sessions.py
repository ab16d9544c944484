"""The pyipu side of the training comparisons with PyTorch: a PopART TrainingSession over an
exported training graph (inputs `x`, `y`, output `loss`) with the optimizer settings torch uses
too. No torch import here, so a process measuring pyipu alone (benchmarks/train_side_by_side.py)
does not pay for it."""

from __future__ import annotations

import numpy as np
import onnx

from pyipu.popart import (
    SGD,
    Adam,
    AnchorReturnType,
    DataFlow,
    DeviceManager,
    PyStepIO,
    PyWeightsIO,
    TrainingSession,
    WeightDecayMode,
)

# lr, momentum and weight decay of SGD; lr and weight decay (L2, torch.optim.Adam) of Adam
OPTIMIZERS: dict[str, dict[str, float]] = {
    "sgd": {"lr": 0.02, "momentum": 0.9, "weight_decay": 1e-4},
    "adam": {"lr": 2e-3, "weight_decay": 1e-4},
}
ADAM_EPS = 1e-8  # torch.optim.Adam's (PopART's default is 1e-6)


def popart_optimizer(kind: str) -> SGD | Adam:
    cfg = OPTIMIZERS[kind]
    if kind == "sgd":
        return SGD(
            {
                "defaultLearningRate": (cfg["lr"], True),
                "defaultMomentum": (cfg["momentum"], True),
                "defaultWeightDecay": (cfg["weight_decay"], True),
            }
        )
    return Adam(
        {
            "defaultLearningRate": (cfg["lr"], True),
            "defaultEps": (ADAM_EPS, True),
            "defaultWeightDecay": (cfg["weight_decay"], True),
        },
        weight_decay_mode=WeightDecayMode.L2Regularization,
    )


class PyipuTrainer:
    """A TrainingSession over `proto`, `batches_per_step` optimizer steps per `run`."""

    def __init__(self, proto: onnx.ModelProto, kind: str, batches_per_step: int = 1) -> None:
        self.proto = proto
        self.bps = batches_per_step
        self.session = TrainingSession(
            proto.SerializeToString(),
            DataFlow(batches_per_step, {"loss": AnchorReturnType("ALL")}),
            "loss",
            popart_optimizer(kind),
            DeviceManager().createCpuDevice(),
        )
        self.session.prepareDevice()
        self.session.weightsFromHost()
        self.session.optimizerFromHost()
        self.anchors = self.session.initAnchorArrays()

    def run(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """`batches_per_step` steps on x[i], y[i]; the loss of each."""
        self.session.run(PyStepIO({"x": x, "y": y}, self.anchors))
        return self.anchors["loss"].reshape(self.bps).copy()

    def parameters(self, names: list[str]) -> dict[str, np.ndarray]:
        """The current values of the weights `names`, read back from the session."""
        shapes = {i.name: tuple(i.dims) for i in self.proto.graph.initializer}
        out = {k: np.zeros(shapes[k], np.float32) for k in names}
        self.session.weightsToHost()
        self.session.readWeights(PyWeightsIO(out))
        return out

    def close(self) -> None:
        self.session.close()
