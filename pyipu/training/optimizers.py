"""Optimizers as ONNX update graphs: for each weight, the nodes computing its new value and its
new optimizer state from its gradient.

`Optimizer.update(w, weight, grad, state, step)` writes the nodes with a NodeWriter `w`;
`state` maps each of `Optimizer.slots()` to the value holding that state now (a graph input,
or wherever the caller keeps it), `step` is the float step count starting at 1. It returns the
new weight and the new state values. The algorithms are PyTorch's (`torch.optim`), which the
tests re-implement in NumPy; PopART's names map onto them (docs/training.md).

A hyperparameter is a Python number, written into the graph as a constant, or a `Variable`
naming a graph input that carries it, so it can change between steps without recompiling
(PopART's non-const optimizer values).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from pyipu.errors import InvalidArgumentError
from pyipu.training.nodes import NodeWriter


@dataclass(frozen=True)
class Variable:
    """A hyperparameter fed at run time through the graph input `name` (a float scalar)."""

    name: str
    value: float  # its value until changed


Number = float | Variable


def _value(w: NodeWriter, v: Number, dtype: Any) -> str:
    return v.name if isinstance(v, Variable) else w.const(np.asarray(v, dtype))


class Optimizer:
    """Base class: `slots()` names the per-weight state, `update` writes one weight's step."""

    loss_scaling: Number = 1.0

    def slots(self) -> tuple[str, ...]:
        return ()

    def initial(self, slot: str) -> float:
        """The value each state slot starts at."""
        return 0.0

    def variables(self) -> list[Variable]:
        """The hyperparameters fed at run time."""
        return [v for f in fields(self) if isinstance(v := getattr(self, f.name), Variable)]  # type: ignore[arg-type]

    def update(
        self,
        w: NodeWriter,
        weight: str,
        grad: str,
        state: dict[str, str],
        step: str,
        dtype: Any = np.float32,
    ) -> tuple[str, dict[str, str]]:
        raise NotImplementedError

    def _grad(self, w: NodeWriter, grad: str, dtype: Any) -> str:
        """The gradient with the loss scaling taken out."""
        if self.loss_scaling == 1.0:
            return grad
        return w.op("Div", [grad, _value(w, self.loss_scaling, dtype)])

    def _check(self, **positive: Number) -> None:
        for name, v in positive.items():
            value = v.value if isinstance(v, Variable) else v
            if not np.isfinite(value) or value < 0:
                raise InvalidArgumentError(
                    f"{type(self).__name__}: {name} must be >= 0, got {value}"
                )


@dataclass
class SGD(Optimizer):
    """torch.optim.SGD: weight decay added to the gradient, momentum with dampening (the first
    step's buffer is the gradient itself), Nesterov."""

    lr: Number = 0.01
    momentum: Number = 0.0
    dampening: Number = 0.0
    weight_decay: Number = 0.0
    nesterov: bool = False
    loss_scaling: Number = 1.0

    def __post_init__(self) -> None:
        self._check(lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        if self.nesterov and (self.momentum == 0.0 or self.dampening != 0.0):
            raise InvalidArgumentError("SGD: Nesterov momentum needs momentum > 0 and no dampening")

    def slots(self) -> tuple[str, ...]:
        return ("momentum",) if self.momentum != 0.0 else ()

    def update(
        self,
        w: NodeWriter,
        weight: str,
        grad: str,
        state: dict[str, str],
        step: str,
        dtype: Any = np.float32,
    ) -> tuple[str, dict[str, str]]:
        g = self._grad(w, grad, dtype)
        if self.weight_decay != 0.0:
            g = w.op("Add", [g, w.op("Mul", [weight, _value(w, self.weight_decay, dtype)])])
        new_state: dict[str, str] = {}
        if self.momentum != 0.0:
            mom = _value(w, self.momentum, dtype)
            # step 1 (Less, not Equal: float Equal needs opset 11) sets the buffer to the
            # gradient: the old buffer weighs 0 then and the gradient 1, not 1 - dampening.
            # Scalar factors picked by the step, so the choice costs no pass over the tensor.
            dt = np.dtype(dtype).str
            first = w.shared(
                ("first", step, dt),
                lambda: w.op("Less", [step, w.const(np.asarray(1.5, dtype))]),
            )
            kept = w.shared(
                ("sgd/kept", self.momentum, step, dt),
                lambda: w.op("Where", [first, w.const(np.asarray(0.0, dtype)), mom]),
            )
            scaled = g
            if self.dampening != 0.0:

                def factor() -> str:
                    damp = _value(w, self.dampening, dtype)
                    one_minus = w.op("Sub", [w.const(np.asarray(1.0, dtype)), damp])
                    return w.op("Where", [first, w.const(np.asarray(1.0, dtype)), one_minus])

                scaled = w.op(
                    "Mul", [g, w.shared(("sgd/factor", self.dampening, step, dt), factor)]
                )
            buf = w.op("Add", [w.op("Mul", [state["momentum"], kept]), scaled])
            new_state["momentum"] = buf
            g = w.op("Add", [g, w.op("Mul", [buf, mom])]) if self.nesterov else buf
        new = w.op("Sub", [weight, w.op("Mul", [g, _value(w, self.lr, dtype)])])
        return new, new_state


@dataclass
class Adam(Optimizer):
    """torch.optim.Adam / AdamW and their relatives, by `mode`:

    - "adam": L2 weight decay added to the gradient (torch.optim.Adam);
    - "adamw": decoupled weight decay, w -= lr·wd·w first (torch.optim.AdamW);
    - "adam_no_bias": Adam without the bias corrections;
    - "lamb": the Adam direction plus wd·w, scaled by the trust ratio ||w|| / ||direction||;
    - "adamax": the infinity-norm variant (torch.optim.Adamax).
    """

    lr: Number = 0.001
    beta1: Number = 0.9
    beta2: Number = 0.999
    eps: Number = 1e-8
    weight_decay: Number = 0.0
    mode: str = "adam"
    loss_scaling: Number = 1.0

    MODES = ("adam", "adamw", "adam_no_bias", "lamb", "adamax")

    def __post_init__(self) -> None:
        if self.mode not in self.MODES:
            raise InvalidArgumentError(f"Adam mode {self.mode!r}: one of {', '.join(self.MODES)}")
        self._check(lr=self.lr, eps=self.eps, weight_decay=self.weight_decay)

    def slots(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_inf" if self.mode == "adamax" else "exp_avg_sq")

    def update(
        self,
        w: NodeWriter,
        weight: str,
        grad: str,
        state: dict[str, str],
        step: str,
        dtype: Any = np.float32,
    ) -> tuple[str, dict[str, str]]:
        one = w.const(np.asarray(1.0, dtype))
        b1, b2 = _value(w, self.beta1, dtype), _value(w, self.beta2, dtype)
        lr, eps = _value(w, self.lr, dtype), _value(w, self.eps, dtype)
        g = self._grad(w, grad, dtype)
        wd = _value(w, self.weight_decay, dtype) if self.weight_decay != 0.0 else None
        if wd is not None and self.mode in ("adam", "adam_no_bias", "adamax"):
            g = w.op("Add", [g, w.op("Mul", [weight, wd])])
        if wd is not None and self.mode == "adamw":
            weight = w.op("Sub", [weight, w.op("Mul", [weight, w.op("Mul", [lr, wd])])])
        m = w.op(
            "Add", [w.op("Mul", [state["exp_avg"], b1]), w.op("Mul", [g, w.op("Sub", [one, b1])])]
        )
        dt = np.dtype(dtype).str

        def correction(beta: str, value: Number) -> str:  # 1 - beta^step, once per step
            return w.shared(
                ("adam/correction", value, step, dt),
                lambda: w.op("Sub", [one, w.op("Pow", [beta, step])]),
            )

        # lr / (1 - beta1^step): torch's step size, once per step
        step_size = w.shared(
            ("adam/step_size", self.lr, self.beta1, step, dt),
            lambda: w.op("Div", [lr, correction(b1, self.beta1)]),
        )
        if self.mode == "adamax":
            u = w.op(
                "Max", [w.op("Mul", [state["exp_inf"], b2]), w.op("Add", [w.op("Abs", [g]), eps])]
            )
            new = w.op("Sub", [weight, w.op("Div", [w.op("Mul", [m, step_size]), u])])
            return new, {"exp_avg": m, "exp_inf": u}
        v = w.op(
            "Add",
            [
                w.op("Mul", [state["exp_avg_sq"], b2]),
                w.op("Mul", [w.op("Mul", [g, g]), w.op("Sub", [one, b2])]),
            ],
        )
        if self.mode in ("adam", "adamw"):  # torch's order: w - step_size·m / (√v / √c2 + ε)
            root = w.shared(
                ("adam/root_correction", self.beta2, step, dt),
                lambda: w.op("Sqrt", [correction(b2, self.beta2)]),
            )
            denom = w.op("Add", [w.op("Div", [w.op("Sqrt", [v]), root]), eps])
            new = w.op("Sub", [weight, w.op("Div", [w.op("Mul", [m, step_size]), denom])])
            return new, {"exp_avg": m, "exp_avg_sq": v}
        mhat, vhat = m, v
        if self.mode != "adam_no_bias":
            mhat = w.op("Div", [m, correction(b1, self.beta1)])
            vhat = w.op("Div", [v, correction(b2, self.beta2)])
        direction = w.op("Div", [mhat, w.op("Add", [w.op("Sqrt", [vhat]), eps])])
        if self.mode == "lamb":
            if wd is not None:
                direction = w.op("Add", [direction, w.op("Mul", [weight, wd])])
            wn = w.op("Sqrt", [w.op("ReduceSumSquare", [weight], keepdims=0)])
            dn = w.op("Sqrt", [w.op("ReduceSumSquare", [direction], keepdims=0)])
            zero = w.const(np.asarray(0.0, dtype))
            both = w.op("And", [w.op("Greater", [wn, zero]), w.op("Greater", [dn, zero])])
            trust = w.op(
                "Where",
                [
                    both,
                    w.op("Div", [wn, w.op("Max", [dn, w.const(np.asarray(1e-30, dtype))])]),
                    one,
                ],
            )
            direction = w.op("Mul", [direction, trust])
        new = w.op("Sub", [weight, w.op("Mul", [direction, lr])])
        return new, {"exp_avg": m, "exp_avg_sq": v}


@dataclass
class RMSProp(Optimizer):
    """torch.optim.RMSprop: squared-gradient average, optional momentum and centring."""

    lr: Number = 0.01
    alpha: Number = 0.99
    eps: Number = 1e-8
    weight_decay: Number = 0.0
    momentum: Number = 0.0
    centered: bool = False
    loss_scaling: Number = 1.0

    def __post_init__(self) -> None:
        self._check(
            lr=self.lr, eps=self.eps, weight_decay=self.weight_decay, momentum=self.momentum
        )

    def slots(self) -> tuple[str, ...]:
        return (
            "square_avg",
            *(("grad_avg",) if self.centered else ()),
            *(("momentum",) if self.momentum != 0.0 else ()),
        )

    def update(
        self,
        w: NodeWriter,
        weight: str,
        grad: str,
        state: dict[str, str],
        step: str,
        dtype: Any = np.float32,
    ) -> tuple[str, dict[str, str]]:
        one = w.const(np.asarray(1.0, dtype))
        alpha, eps, lr = (_value(w, x, dtype) for x in (self.alpha, self.eps, self.lr))
        g = self._grad(w, grad, dtype)
        if self.weight_decay != 0.0:
            g = w.op("Add", [g, w.op("Mul", [weight, _value(w, self.weight_decay, dtype)])])
        rest = w.op("Sub", [one, alpha])
        sq = w.op(
            "Add",
            [w.op("Mul", [state["square_avg"], alpha]), w.op("Mul", [w.op("Mul", [g, g]), rest])],
        )
        new_state = {"square_avg": sq}
        avg = sq
        if self.centered:
            ga = w.op("Add", [w.op("Mul", [state["grad_avg"], alpha]), w.op("Mul", [g, rest])])
            new_state["grad_avg"] = ga
            avg = w.op("Sub", [sq, w.op("Mul", [ga, ga])])
        direction = w.op("Div", [g, w.op("Add", [w.op("Sqrt", [avg]), eps])])
        if self.momentum != 0.0:
            direction = w.op(
                "Add",
                [w.op("Mul", [state["momentum"], _value(w, self.momentum, dtype)]), direction],
            )
            new_state["momentum"] = direction
        return w.op("Sub", [weight, w.op("Mul", [direction, lr])]), new_state


@dataclass
class Adagrad(Optimizer):
    """torch.optim.Adagrad: the sum of squared gradients, with a learning-rate decay."""

    lr: Number = 0.01
    lr_decay: Number = 0.0
    weight_decay: Number = 0.0
    initial_accumulator_value: float = 0.0
    eps: Number = 1e-10
    loss_scaling: Number = 1.0

    def __post_init__(self) -> None:
        self._check(
            lr=self.lr, lr_decay=self.lr_decay, weight_decay=self.weight_decay, eps=self.eps
        )

    def slots(self) -> tuple[str, ...]:
        return ("sum",)

    def initial(self, slot: str) -> float:
        return self.initial_accumulator_value

    def update(
        self,
        w: NodeWriter,
        weight: str,
        grad: str,
        state: dict[str, str],
        step: str,
        dtype: Any = np.float32,
    ) -> tuple[str, dict[str, str]]:
        one = w.const(np.asarray(1.0, dtype))
        g = self._grad(w, grad, dtype)
        if self.weight_decay != 0.0:
            g = w.op("Add", [g, w.op("Mul", [weight, _value(w, self.weight_decay, dtype)])])
        # lr / (1 + (step - 1) · lr_decay)
        decay = w.op("Mul", [w.op("Sub", [step, one]), _value(w, self.lr_decay, dtype)])
        clr = w.op("Div", [_value(w, self.lr, dtype), w.op("Add", [one, decay])])
        total = w.op("Add", [state["sum"], w.op("Mul", [g, g])])
        direction = w.op(
            "Div", [g, w.op("Add", [w.op("Sqrt", [total]), _value(w, self.eps, dtype)])]
        )
        return w.op("Sub", [weight, w.op("Mul", [direction, clr])]), {"sum": total}
