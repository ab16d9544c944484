"""PopTorch's optimizers (`poptorch.optim.SGD/Adam/AdamW/RMSprop/LAMB`) and the translation of
those and torch.optim's SGD, Adam, AdamW and RMSprop into PopART's optimizer values, which
pyipu's training graph implements (pyipu.training.optimizers, torch's algorithms).

The learning rate is fed at run time (PopART's non-const value), so `setOptimizer` with a new lr
needs no recompile; any other change (momentum, betas, weight decay, loss scaling, ...) recompiles
the training executable and keeps the weights, optimizer state and step count.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch

from pyipu.popart import optimizers as popart
from pyipu.poptorch.errors import UnsupportedFeatureError

_EXTRA = (
    "loss_scaling",
    "velocity_scaling",
    "use_combined_accum",
    "accum_type",
    "first_order_momentum_accum_type",
    "second_order_momentum_accum_type",
    "max_grad_norm",
    "max_weight_norm",
)


class VariableAttributes:
    """Which attributes PopTorch treats as run-time variables (recorded: in pyipu the learning
    rate is always fed at run time and other changes recompile)."""

    def __init__(self, variables: Iterable[str]) -> None:
        self.variables = set(variables)

    def markAsConstant(self, name: str) -> None:  # noqa: N802
        self.variables.discard(name)

    def markAsVariable(self, name: str) -> None:  # noqa: N802
        self.variables.add(name)

    def isConstant(self, name: str) -> bool:  # noqa: N802
        return name not in self.variables


class _Extras:
    """The PopTorch attributes an optimizer takes beyond torch's, and its state on the device:
    `state_dict()` holds it under "ipu_state" (read from the trainingModel training with this
    optimizer), `load_state_dict()` sends it there (now, or when a trainingModel compiles)."""

    _device: Callable[[], Any] | None = None  # weakref to that trainingModel
    _loaded: dict[str, Any] | None = None  # loaded or kept state no trainingModel has taken

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()  # type: ignore[misc]
        executor = self._device() if self._device is not None else None
        if executor is not None and executor.isCompiled():
            out["ipu_state"] = executor.optimizerState()
        elif self._loaded is not None:
            out["ipu_state"] = self._loaded
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        ipu = state_dict.pop("ipu_state", None)
        super().load_state_dict(state_dict)  # type: ignore[misc]
        if ipu is None:
            return
        executor = self._device() if self._device is not None else None
        if executor is not None and executor.isCompiled():
            executor._load_optimizer_state(ipu)
        else:
            self._loaded = ipu

    def _init_extras(self, given: dict[str, Any], **extras: Any) -> None:
        self.loss_scaling = float(extras.pop("loss_scaling", None) or 1.0)
        self.velocity_scaling = float(extras.pop("velocity_scaling", None) or 1.0)
        for k in _EXTRA:
            if k in extras:
                setattr(self, k, extras.pop(k))
        if extras:
            raise TypeError(f"{type(self).__name__}: unexpected arguments {sorted(extras)}")
        self.variable_attrs = VariableAttributes(["lr", *given])


class SGD(_Extras, torch.optim.SGD):
    def __init__(self, params: Any, lr: float = 0.01, momentum: float = 0.0, **kw: Any) -> None:
        extras = {k: kw.pop(k) for k in list(kw) if k in _EXTRA}
        super().__init__(params, lr=lr, momentum=momentum, **kw)
        self._init_extras(kw, **extras)


class Adam(_Extras, torch.optim.Adam):
    def __init__(self, params: Any, lr: float = 0.001, **kw: Any) -> None:
        extras = {k: kw.pop(k) for k in list(kw) if k in _EXTRA}
        super().__init__(params, lr=lr, **kw)
        self._init_extras(kw, **extras)


class AdamW(_Extras, torch.optim.AdamW):
    def __init__(self, params: Any, lr: float = 0.001, **kw: Any) -> None:
        extras = {k: kw.pop(k) for k in list(kw) if k in _EXTRA}
        super().__init__(params, lr=lr, **kw)
        self._init_extras(kw, **extras)


class RMSprop(_Extras, torch.optim.RMSprop):
    def __init__(self, params: Any, lr: float = 0.01, **kw: Any) -> None:
        extras = {k: kw.pop(k) for k in list(kw) if k in _EXTRA}
        super().__init__(params, lr=lr, **kw)
        self._init_extras(kw, **extras)


class LAMB(_Extras, torch.optim.Optimizer):
    """LAMB: the Adam direction plus weight decay, scaled by the trust ratio ‖w‖ / ‖direction‖
    (PopART's Lamb mode; `bias_correction=False` is LambNoBias)."""

    def __init__(
        self,
        params: Any,
        lr: float = 0.001,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        bias_correction: bool = True,
        **kw: Any,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.bias_correction = bool(bias_correction)
        self._init_extras(dict(defaults), **kw)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One LAMB step on the CPU (the same update pyipu's training graph makes)."""
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                g = p.grad / self.loss_scaling
                st["exp_avg"].mul_(b1).add_(g, alpha=1 - b1)
                st["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
                m, v = st["exp_avg"], st["exp_avg_sq"]
                if self.bias_correction:
                    m = m / (1 - b1 ** st["step"])
                    v = v / (1 - b2 ** st["step"])
                d = m / (v.sqrt() + group["eps"])
                if group["weight_decay"]:
                    d = d + group["weight_decay"] * p
                wn, dn = float(p.norm()), float(d.norm())
                trust = wn / dn if wn > 0 and dn > 0 else 1.0
                p.sub_(d, alpha=group["lr"] * trust)
        return loss


def bind(opt: torch.optim.Optimizer, executor: Any) -> None:
    """`executor` trains with `opt` now: a poptorch.optim optimizer reads and writes its state."""
    if isinstance(opt, _Extras):
        opt._device = weakref.ref(executor)


def keep_state(opt: torch.optim.Optimizer | None, state: dict[str, Any]) -> None:
    """The state of a trainingModel released with `opt`, for `state_dict()` and the next one."""
    if isinstance(opt, _Extras):
        opt._loaded = state


def take_loaded_state(opt: torch.optim.Optimizer | None) -> dict[str, Any] | None:
    """State `opt` holds for the next trainingModel (loaded or kept; taken once)."""
    if not isinstance(opt, _Extras) or opt._loaded is None:
        return None
    state, opt._loaded = opt._loaded, None
    return state


def _group(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's hyperparameters, which every param group must share."""
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    for g in groups[1:]:
        if g != groups[0]:
            raise UnsupportedFeatureError(
                "param groups with different hyperparameters are not supported: pyipu applies "
                "one set of optimizer values to every weight",
                "trainingModel",
            )
    return groups[0]


def trained_parameters(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in opt.param_groups for p in g["params"]]


def to_popart(opt: torch.optim.Optimizer) -> popart.Optimizer:
    """The PopART optimizer doing what `opt` does (lr fed at run time, the rest constant)."""
    g = _group(opt)
    ls = float(getattr(opt, "loss_scaling", 1.0))
    if not math.isfinite(ls) or ls <= 0:
        raise UnsupportedFeatureError(f"loss_scaling must be > 0, got {ls}", "optimizer")
    for flag in ("amsgrad", "maximize", "capturable", "differentiable"):
        if g.get(flag):
            raise UnsupportedFeatureError(f"{type(opt).__name__}({flag}=True) is not supported")
    lr = (float(g["lr"]), False)
    if isinstance(opt, torch.optim.SGD):
        return popart.SGD(
            {
                "defaultLearningRate": lr,
                "defaultMomentum": (float(g["momentum"]), True),
                "defaultDampening": (float(g["dampening"]), True),
                "defaultWeightDecay": (float(g["weight_decay"]), True),
                "defaultVelocityScaling": (float(getattr(opt, "velocity_scaling", 1.0)), True),
                "nesterov": (float(bool(g["nesterov"])), True),
                "lossScaling": (ls, True),
            }
        )
    if isinstance(opt, (torch.optim.Adam, torch.optim.AdamW, LAMB)):
        values = {
            "defaultLearningRate": lr,
            "defaultBeta1": (float(g["betas"][0]), True),
            "defaultBeta2": (float(g["betas"][1]), True),
            "defaultEps": (float(g["eps"]), True),
            "defaultWeightDecay": (float(g["weight_decay"]), True),
            "lossScaling": (ls, True),
        }
        if isinstance(opt, LAMB):
            mode = popart.AdamMode.Lamb if opt.bias_correction else popart.AdamMode.LambNoBias
            return popart.Adam(values, mode=mode, weight_decay_mode=popart.WeightDecayMode.Decay)
        decay = (
            popart.WeightDecayMode.Decay
            if isinstance(opt, torch.optim.AdamW)
            else popart.WeightDecayMode.L2Regularization
        )
        return popart.Adam(values, mode=popart.AdamMode.Adam, weight_decay_mode=decay)
    if isinstance(opt, torch.optim.RMSprop):
        rms = popart.AdaptiveMode.CenteredRMSProp if g["centered"] else popart.AdaptiveMode.RMSProp
        return popart.Adaptive(
            {
                "defaultLearningRate": lr,
                "defaultAlpha": (float(g["alpha"]), True),
                "defaultMomentum": (float(g["momentum"]), True),
                "defaultEps": (float(g["eps"]), True),
                "defaultWeightDecay": (float(g["weight_decay"]), True),
                "lossScaling": (ls, True),
            },
            mode=rms,
        )
    raise UnsupportedFeatureError(
        f"optimizer {type(opt).__name__} is not supported: use SGD, Adam, AdamW, RMSprop "
        "(torch.optim or poptorch.optim) or poptorch.optim.LAMB",
        "trainingModel",
    )


def constants(opt: popart.Optimizer) -> tuple[Any, ...]:
    """What of a translated optimizer is compiled in: a change to it recompiles."""
    values = {k: v for k, v in opt.values.items() if k != "defaultLearningRate"}
    return (type(opt), sorted(values.items()), sorted(opt.options.items()))
