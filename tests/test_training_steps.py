"""TrainingSession steps: gradient accumulation and replication (data parallelism with the
gradients all-reduced) against a NumPy model of PopART's semantics, for Sum and Mean
reductions, with batchesPerStep, and the per-replica anchors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyipu.popart import (
    SGD,
    AnchorReturnType,
    DataFlow,
    DeviceManager,
    PyStepIO,
    PyWeightsIO,
    ReductionType,
    SessionOptions,
    TrainingSession,
)

RNG = np.random.default_rng(5)
B, IN, OUT = 4, 6, 3
LR, MOMENTUM = 0.05, 0.9
W0 = RNG.standard_normal((IN, OUT)).astype(np.float32)


def regression() -> onnx.ModelProto:
    """loss = mean((x W - t)^2)."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["y"]),
        helper.make_node("Sub", ["y", "t"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
    ]
    g = helper.make_graph(
        nodes,
        "regression",
        [
            helper.make_tensor_value_info("x", f, [B, IN]),
            helper.make_tensor_value_info("t", f, [B, OUT]),
        ],
        [helper.make_tensor_value_info("loss", f, [])],
        [numpy_helper.from_array(W0, "W")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def numpy_training(
    xs: np.ndarray, ts: np.ndarray, acc: int, reps: int, mean: bool
) -> tuple[np.ndarray, np.ndarray]:
    """PopART's order: micro-batches [steps, acc, reps]; one update per (acc × reps) group,
    SGD with momentum (torch's rule, no dampening). Returns the final weights and the loss of
    every micro-batch."""
    w, v = W0.astype(np.float64), None
    losses = np.zeros(xs.shape[:3])
    for s in range(xs.shape[0]):
        g = np.zeros_like(w)
        for a in range(acc):
            for r in range(reps):
                x, t = xs[s, a, r].astype(np.float64), ts[s, a, r].astype(np.float64)
                d = x @ w - t
                losses[s, a, r] = np.mean(d * d)
                g += 2 * x.T @ d / d.size
        if mean:
            g /= acc * reps
        v = g if v is None else MOMENTUM * v + g
        w = w - LR * v
    return w, losses


@pytest.mark.parametrize(
    ("bps", "acc", "reps", "mean"),
    [(3, 4, 1, False), (2, 3, 1, True), (3, 1, 2, False), (2, 1, 4, True), (2, 3, 2, True)],
)
def test_accumulation_and_replication_match_numpy(bps: int, acc: int, reps: int, mean: bool):
    opts = SessionOptions()
    if acc > 1:
        opts.enableGradientAccumulation, opts.accumulationFactor = True, acc
    if reps > 1:
        opts.enableReplicatedGraphs, opts.replicatedGraphCount = True, reps
    if mean:
        opts.accumulationAndReplicationReductionType = ReductionType.Mean
    session = TrainingSession(
        regression().SerializeToString(),
        DataFlow(bps, {"loss": AnchorReturnType("ALL")}),
        "loss",
        SGD({"defaultLearningRate": (LR, False), "defaultMomentum": (MOMENTUM, True)}),
        DeviceManager().acquireAvailableDevice(reps),
        userOptions=opts,
    )
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    steps = 2
    xs = RNG.standard_normal((steps * bps, acc, reps, B, IN)).astype(np.float32)
    ts = RNG.standard_normal((steps * bps, acc, reps, B, OUT)).astype(np.float32)
    got_losses = []
    lead = tuple(d for d in (bps, acc, reps) if d != 1)
    for k in range(steps):
        part = slice(k * bps, (k + 1) * bps)
        feed = {
            "x": xs[part].reshape(lead + (B, IN)),
            "t": ts[part].reshape(lead + (B, OUT)),
        }
        session.run(PyStepIO(feed, anchors))
        got_losses.append(anchors["loss"].reshape(bps, acc, reps).copy())
    want_w, want_losses = numpy_training(xs, ts, acc, reps, mean)
    np.testing.assert_allclose(np.concatenate(got_losses), want_losses, rtol=1e-4, atol=1e-6)
    session.weightsToHost()
    w = np.zeros_like(W0)
    session.readWeights(PyWeightsIO({"W": w}))
    np.testing.assert_allclose(w, want_w, rtol=1e-4, atol=1e-5)
    assert session.steps == steps * bps * acc  # executions: replicas run together
