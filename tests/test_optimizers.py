"""Optimizer update graphs (pyipu.training.optimizers) against NumPy re-implementations of
torch.optim's algorithms, step by step, through onnx's reference evaluator and through pyipu;
against torch itself when it is installed."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from pyipu.compiler import Compiler
from pyipu.errors import InvalidArgumentError
from pyipu.runtime import Runner
from pyipu.training.nodes import NodeWriter
from pyipu.training.optimizers import SGD, Adagrad, Adam, Optimizer, RMSProp, Variable

SHAPE = (3, 4)
STEPS = 6


def _update_model(opt: Optimizer) -> tuple[onnx.ModelProto, list[str]]:
    """inputs: weight, grad, step and each state slot (and run-time hyperparameters);
    outputs: the new weight, then the new state in slot order."""
    w = NodeWriter(17, "opt")
    state = {s: f"state_{s}" for s in opt.slots()}
    new, new_state = opt.update(w, "weight", "grad", state, "step")
    outs = [w.op("Identity", [new])] + [w.op("Identity", [new_state[s]]) for s in opt.slots()]
    f32 = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("weight", f32, SHAPE),
        helper.make_tensor_value_info("grad", f32, SHAPE),
        helper.make_tensor_value_info("step", f32, []),
        *(helper.make_tensor_value_info(v, f32, SHAPE) for v in state.values()),
        *(helper.make_tensor_value_info(v.name, f32, []) for v in opt.variables()),
    ]
    outputs = [helper.make_tensor_value_info(o, f32, None) for o in outs]
    g = helper.make_graph(w.nodes, "update", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), outs


def _numpy_steps(
    kind: str, cfg: dict[str, Any], w0: np.ndarray, grads: list[np.ndarray]
) -> list[np.ndarray]:
    """torch.optim's algorithms, written out in NumPy (float64)."""
    w = w0.astype(np.float64)
    st: dict[str, Any] = {}
    out = []
    for t, g0 in enumerate(grads, start=1):
        g = g0.astype(np.float64) / cfg.get("loss_scaling", 1.0)
        lr, wd = cfg["lr"], cfg.get("weight_decay", 0.0)
        if kind == "sgd":
            g = g + wd * w
            m = cfg.get("momentum", 0.0)
            if m:
                st["b"] = g.copy() if t == 1 else m * st["b"] + (1 - cfg.get("dampening", 0.0)) * g
                g = g + m * st["b"] if cfg.get("nesterov") else st["b"]
            w = w - lr * g
        elif kind == "adam":
            b1, b2, eps, mode = cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["mode"]
            if mode in ("adam", "adam_no_bias", "adamax"):
                g = g + wd * w
            if mode == "adamw":
                w = w * (1 - lr * wd)
            st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
            if mode == "adamax":
                st["u"] = np.maximum(b2 * st.get("u", 0), np.abs(g) + eps)
                w = w - lr / (1 - b1**t) * st["m"] / st["u"]
            else:
                st["v"] = b2 * st.get("v", 0) + (1 - b2) * g * g
                mh, vh = (
                    (st["m"], st["v"])
                    if mode == "adam_no_bias"
                    else (st["m"] / (1 - b1**t), st["v"] / (1 - b2**t))
                )
                r = mh / (np.sqrt(vh) + eps)
                if mode == "lamb":
                    r = r + wd * w
                    wn, rn = np.linalg.norm(w), np.linalg.norm(r)
                    r = r * (wn / rn if wn > 0 and rn > 0 else 1.0)
                w = w - lr * r
        elif kind == "rmsprop":
            a, eps = cfg["alpha"], cfg["eps"]
            g = g + wd * w
            st["sq"] = a * st.get("sq", 0) + (1 - a) * g * g
            avg = st["sq"]
            if cfg.get("centered"):
                st["ga"] = a * st.get("ga", 0) + (1 - a) * g
                avg = avg - st["ga"] ** 2
            d = g / (np.sqrt(avg) + eps)
            if cfg.get("momentum"):
                st["b"] = cfg["momentum"] * st.get("b", 0) + d
                d = st["b"]
            w = w - lr * d
        elif kind == "adagrad":
            g = g + wd * w
            clr = lr / (1 + (t - 1) * cfg.get("lr_decay", 0.0))
            st["s"] = st.get("s", cfg.get("initial_accumulator_value", 0.0)) + g * g
            w = w - clr * g / (np.sqrt(st["s"]) + cfg["eps"])
        out.append(w.copy())
    return out


CONFIGS = [
    ("sgd", {"lr": 0.1}),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "loss_scaling": 128.0}),
    (
        "adam",
        {
            "lr": 0.01,
            "beta1": 0.9,
            "beta2": 0.999,
            "eps": 1e-8,
            "mode": "adam",
            "weight_decay": 0.01,
        },
    ),
    (
        "adam",
        {
            "lr": 0.01,
            "beta1": 0.8,
            "beta2": 0.99,
            "eps": 1e-6,
            "mode": "adamw",
            "weight_decay": 0.1,
        },
    ),
    ("adam", {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "mode": "adam_no_bias"}),
    (
        "adam",
        {
            "lr": 0.01,
            "beta1": 0.9,
            "beta2": 0.999,
            "eps": 1e-6,
            "mode": "lamb",
            "weight_decay": 0.01,
        },
    ),
    ("adam", {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "mode": "adamax"}),
    ("rmsprop", {"lr": 0.01, "alpha": 0.99, "eps": 1e-8}),
    (
        "rmsprop",
        {
            "lr": 0.01,
            "alpha": 0.9,
            "eps": 1e-8,
            "momentum": 0.5,
            "centered": True,
            "weight_decay": 0.01,
        },
    ),
    ("adagrad", {"lr": 0.1, "eps": 1e-10, "lr_decay": 0.01, "initial_accumulator_value": 0.1}),
]
CLASSES = {"sgd": SGD, "adam": Adam, "rmsprop": RMSProp, "adagrad": Adagrad}


def _optimizer(kind: str, cfg: dict[str, Any]) -> Optimizer:
    return CLASSES[kind](**cfg)


def _run(opt: Optimizer, evaluate, w0: np.ndarray, grads: list[np.ndarray]) -> list[np.ndarray]:
    state = {s: np.full(SHAPE, opt.initial(s), np.float32) for s in opt.slots()}
    w, out = w0, []
    for t, g in enumerate(grads, start=1):
        feeds = {"weight": w, "grad": g, "step": np.array(t, np.float32)}
        feeds.update({f"state_{s}": v for s, v in state.items()})
        feeds.update({v.name: np.array(v.value, np.float32) for v in opt.variables()})
        w, *new = evaluate(feeds)
        state = dict(zip(opt.slots(), new, strict=True))
        out.append(w)
    return out


def _data() -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(SHAPE).astype(np.float32)
    return w0, [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(STEPS)]


@pytest.mark.parametrize(
    ("kind", "cfg"), CONFIGS, ids=lambda c: str(c) if isinstance(c, str) else ""
)
def test_steps_match_the_algorithm(kind: str, cfg: dict[str, Any]) -> None:
    opt = _optimizer(kind, cfg)
    model, _ = _update_model(opt)
    ref = ReferenceEvaluator(model)
    w0, grads = _data()
    got = _run(opt, lambda f: ref.run(None, f), w0, grads)
    want = _numpy_steps(kind, cfg, w0, grads)
    for t, (a, b) in enumerate(zip(got, want, strict=True), start=1):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, err_msg=f"step {t}")
    assert not np.allclose(got[-1], w0)


@pytest.mark.parametrize(
    ("kind", "cfg"), CONFIGS, ids=lambda c: str(c) if isinstance(c, str) else ""
)
def test_pyipu_runs_the_update(kind: str, cfg: dict[str, Any]) -> None:
    opt = _optimizer(kind, cfg)
    model, outs = _update_model(opt)
    w0, grads = _data()
    with Runner(Compiler.compile(model, outs)) as runner:
        got = _run(opt, lambda f: runner.run(outs, f), w0, grads)
    want = _run(opt, lambda f: ReferenceEvaluator(model).run(None, f), w0, grads)
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-5, atol=1e-6)


def test_run_time_hyperparameters() -> None:
    opt = SGD(lr=Variable("lr", 0.1), momentum=0.9)
    model, outs = _update_model(opt)
    assert [v.name for v in opt.variables()] == ["lr"]
    w0, grads = _data()
    ref = ReferenceEvaluator(model)
    feeds = {
        "weight": w0,
        "grad": grads[0],
        "step": np.float32(1),
        "state_momentum": np.zeros(SHAPE, np.float32),
    }
    a = ref.run(None, {**feeds, "lr": np.float32(0.1)})[0]
    b = ref.run(None, {**feeds, "lr": np.float32(0.2)})[0]
    np.testing.assert_allclose(w0 - b, 2 * (w0 - a), rtol=1e-5, atol=1e-6)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="lr must be >= 0"):
        SGD(lr=-1.0)
    with pytest.raises(InvalidArgumentError, match="Nesterov"):
        SGD(nesterov=True)
    with pytest.raises(InvalidArgumentError, match="mode 'adagrad'"):
        Adam(mode="adagrad")


@pytest.mark.parametrize(
    ("kind", "cfg"),
    [c for c in CONFIGS if c[1].get("mode", "") != "lamb" and "loss_scaling" not in c[1]],
    ids=lambda c: str(c) if isinstance(c, str) else "",
)
def test_matches_torch_when_installed(kind: str, cfg: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    mode = cfg.get("mode", "")
    if mode == "adam_no_bias":
        pytest.skip("torch has no Adam without bias correction")
    w0, grads = _data()
    p = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))
    args = {k: v for k, v in cfg.items() if k not in ("mode", "beta1", "beta2")}
    if kind == "adam":
        args["betas"] = (cfg["beta1"], cfg["beta2"])
        cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "adamax": torch.optim.Adamax}[
            mode
        ]
    else:
        cls = {
            "sgd": torch.optim.SGD,
            "rmsprop": torch.optim.RMSprop,
            "adagrad": torch.optim.Adagrad,
        }[kind]
    torch_opt = cls([p], **args)
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float64)
        torch_opt.step()
    np.testing.assert_allclose(
        _numpy_steps(kind, cfg, w0, grads)[-1], p.detach().numpy(), rtol=1e-10, atol=1e-12
    )
