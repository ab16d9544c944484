"""PopART's optimizer classes, and the loss classes of its older API, mapped onto
pyipu.training.

`SGD({"defaultLearningRate": (0.01, False), "defaultMomentum": (0.9, True)})`: each value is
`(value, isConst)`; a non-const value is fed at run time, so `updateOptimizerFromHost` can change
it without recompiling. `SGD(learning_rate=0.001)` (the older keyword form) and
`ConstSGD(learning_rate, weight_decay, loss_scaling)` are accepted too.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pyipu.popart.errors import popart_exception
from pyipu.training import optimizers as T


class AdamMode(enum.IntEnum):
    Adam = 0
    AdamNoBias = 1
    AdaMax = 2
    Lamb = 3
    LambNoBias = 4


class WeightDecayMode(enum.IntEnum):
    Decay = 0
    L2Regularization = 1


class AdaptiveMode(enum.IntEnum):
    AdaGrad = 0
    RMSProp = 1
    CenteredRMSProp = 2
    AdaDelta = 3


class Optimizer:
    """Values by PopART name → (value, isConst); `build()` gives the pyipu optimizer."""

    DEFAULTS: dict[str, float] = {}

    def __init__(self, values: Mapping[str, Any] | None = None, **kw: Any) -> None:
        self.values: dict[str, tuple[float, bool]] = {
            k: (v, True) for k, v in self.DEFAULTS.items()
        }
        for k, v in dict(values or {}).items():
            if k not in self.DEFAULTS:
                raise popart_exception(
                    f"{type(self).__name__}: unknown value {k!r} (known: {sorted(self.DEFAULTS)})"
                )
            value, const = v if isinstance(v, tuple) else (v, True)
            self.values[k] = (float(value), bool(const))
        self.options = kw

    def _arg(self, name: str) -> T.Number:
        value, const = self.values[name]
        return value if const else T.Variable(f"optimizer/{name}", value)

    def build(self) -> T.Optimizer:
        raise NotImplementedError

    def update_from(self, other: Optimizer) -> dict[str, float]:
        """The run-time values `other` gives; an error if it changes a const one or the kind."""
        if type(other) is not type(self) or other.options != self.options:
            raise popart_exception(
                "updateOptimizerFromHost: the optimizer's type and modes must stay the same"
            )
        out = {}
        for k, (value, const) in other.values.items():
            old, old_const = self.values[k]
            if old_const and (value != old or not const):
                raise popart_exception(
                    f"updateOptimizerFromHost: {k} is const ({old}); make it non-const "
                    "(value, False) when the session is created to change it"
                )
            if not old_const:
                out[f"optimizer/{k}"] = value
        self.values = dict(other.values)
        return out


class SGD(Optimizer):
    DEFAULTS = {
        "defaultLearningRate": 0.1,
        "defaultWeightDecay": 0.0,
        "defaultMomentum": 0.0,
        "defaultDampening": 0.0,
        "defaultVelocityScaling": 1.0,
        "lossScaling": 1.0,
        "nesterov": 0.0,
    }

    def __init__(self, values: Mapping[str, Any] | None = None, **kw: Any) -> None:
        older = {"learning_rate": "defaultLearningRate", "weight_decay": "defaultWeightDecay"}
        legacy = {older[k]: (kw.pop(k), True) for k in list(kw) if k in older}
        super().__init__({**legacy, **dict(values or {})}, **kw)

    def build(self) -> T.Optimizer:
        return T.SGD(
            lr=self._arg("defaultLearningRate"),
            momentum=self._arg("defaultMomentum"),
            dampening=self._arg("defaultDampening"),
            weight_decay=self._arg("defaultWeightDecay"),
            nesterov=bool(self.values["nesterov"][0]),
            loss_scaling=self._arg("lossScaling"),
        )


class ConstSGD(SGD):
    def __init__(
        self, learning_rate: float, weight_decay: float = 0.0, loss_scaling: float = 1.0
    ) -> None:
        super().__init__(
            {
                "defaultLearningRate": (learning_rate, True),
                "defaultWeightDecay": (weight_decay, True),
                "lossScaling": (loss_scaling, True),
            }
        )


class Adam(Optimizer):
    DEFAULTS = {
        "defaultLearningRate": 0.1,
        "defaultWeightDecay": 0.0,
        "defaultBeta1": 0.9,
        "defaultBeta2": 0.999,
        "defaultEps": 1e-6,
        "lossScaling": 1.0,
        "defaultMaxWeightNorm": 10.0,
    }

    def build(self) -> T.Optimizer:
        mode = AdamMode(self.options.get("mode", AdamMode.Adam))
        decay = WeightDecayMode(self.options.get("weight_decay_mode", WeightDecayMode.Decay))
        if mode in (AdamMode.Lamb, AdamMode.LambNoBias):
            kind = "lamb"
        elif mode == AdamMode.AdaMax:
            kind = "adamax"
        elif mode == AdamMode.AdamNoBias:
            kind = "adam_no_bias"
        else:
            kind = "adamw" if decay == WeightDecayMode.Decay else "adam"
        return T.Adam(
            lr=self._arg("defaultLearningRate"),
            beta1=self._arg("defaultBeta1"),
            beta2=self._arg("defaultBeta2"),
            eps=self._arg("defaultEps"),
            weight_decay=self._arg("defaultWeightDecay"),
            mode=kind,
            loss_scaling=self._arg("lossScaling"),
        )


class Adaptive(Optimizer):
    DEFAULTS = {
        "defaultLearningRate": 0.1,
        "defaultWeightDecay": 0.0,
        "defaultAlpha": 0.99,
        "defaultMomentum": 0.0,
        "defaultEps": 1e-6,
        "lossScaling": 1.0,
    }

    def build(self) -> T.Optimizer:
        mode = AdaptiveMode(self.options.get("mode", AdaptiveMode.RMSProp))
        if mode == AdaptiveMode.AdaGrad:
            return T.Adagrad(
                lr=self._arg("defaultLearningRate"),
                weight_decay=self._arg("defaultWeightDecay"),
                eps=self._arg("defaultEps"),
                loss_scaling=self._arg("lossScaling"),
            )
        if mode == AdaptiveMode.AdaDelta:
            raise popart_exception("Adaptive mode AdaDelta is not supported")
        return T.RMSProp(
            lr=self._arg("defaultLearningRate"),
            alpha=self._arg("defaultAlpha"),
            eps=self._arg("defaultEps"),
            weight_decay=self._arg("defaultWeightDecay"),
            momentum=self._arg("defaultMomentum"),
            centered=mode == AdaptiveMode.CenteredRMSProp,
            loss_scaling=self._arg("lossScaling"),
        )


class Loss:
    """A loss of PopART's older API (`losses=[NllLoss(probs, label, "loss")]`)."""

    def __init__(self, inputs: list[str], output: str, **kw: Any) -> None:
        self.inputs, self.output, self.options = inputs, output, kw


class NllLoss(Loss):
    def __init__(self, probs: str, label: str, output: str, **kw: Any) -> None:
        super().__init__([probs, label], output, **kw)


class L1Loss(Loss):
    def __init__(self, input: str, output: str, lambda_: float = 1.0, **kw: Any) -> None:  # noqa: A002
        super().__init__([input], output, **{"lambda_": lambda_, **kw})


class IdentityLoss(Loss):
    def __init__(self, input: str, output: str, **kw: Any) -> None:  # noqa: A002
        super().__init__([input], output, **kw)
