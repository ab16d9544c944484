"""TrainingSession state on the device: BatchNormalization's running statistics, weights written
from the host, checkpoints in PopEF files that resume training (in a new session or in any
pyipu runtime), and the trained ONNX model ONNX Runtime runs."""

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
    TrainingSession,
    popart_exception,
    poplar_exception,
)
from pyipu.runtime import Runner

RNG = np.random.default_rng(11)
N, C, HW, K = 8, 3, 4, 5
MOMENTUM = 0.8


def bn_model() -> onnx.ModelProto:
    """BatchNormalization (training mode) on the input, then Conv, Relu, a mean-square loss."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node(
            "BatchNormalization",
            ["x", "gamma", "beta", "mean", "var"],
            ["xn", "mean_out", "var_out"],
            training_mode=1,
            momentum=MOMENTUM,
            epsilon=1e-5,
        ),
        helper.make_node("Conv", ["xn", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Mul", ["r", "r"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
    ]
    inits = [
        numpy_helper.from_array(RNG.uniform(0.5, 1.5, C).astype(np.float32), "gamma"),
        numpy_helper.from_array(RNG.standard_normal(C).astype(np.float32) * 0.1, "beta"),
        numpy_helper.from_array(np.zeros(C, np.float32), "mean"),
        numpy_helper.from_array(np.ones(C, np.float32), "var"),
        numpy_helper.from_array(RNG.standard_normal((K, C, 3, 3)).astype(np.float32) * 0.3, "w"),
    ]
    g = helper.make_graph(
        nodes,
        "bn",
        [helper.make_tensor_value_info("x", f, [N, C, HW, HW])],
        [helper.make_tensor_value_info("loss", f, [])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])


def session(
    model: onnx.ModelProto, anchors: dict | None = None, loss_scaling: tuple | None = None
) -> TrainingSession:
    values = {"defaultLearningRate": (0.05, False), "defaultMomentum": (0.9, True)}
    if loss_scaling is not None:
        values["lossScaling"] = loss_scaling
    s = TrainingSession(
        model.SerializeToString(),
        DataFlow(1, anchors or {"loss": AnchorReturnType("ALL")}),
        "loss",
        SGD(values),
        DeviceManager().createCpuDevice(),
    )
    s.prepareDevice()
    return s


def batches(n: int) -> list[np.ndarray]:
    return [(RNG.standard_normal((N, C, HW, HW)) * 2 + 1).astype(np.float32) for _ in range(n)]


def train(s: TrainingSession, xs: list[np.ndarray]) -> list[float]:
    anchors = s.initAnchorArrays()
    losses = []
    for x in xs:
        s.run(PyStepIO({"x": x}, anchors))
        losses.append(float(anchors["loss"].reshape(-1)[0]))
    return losses


def test_running_statistics_follow_the_onnx_momentum_rule() -> None:
    s = session(bn_model())
    assert set(s.running) == {"mean", "var"}
    assert "mean" not in s.trainable and "w" in s.trainable
    xs = batches(4)
    train(s, xs)
    mean, var = np.zeros(C), np.ones(C)
    for x in xs:
        mean = mean * MOMENTUM + x.mean(axis=(0, 2, 3)) * (1 - MOMENTUM)
        var = var * MOMENTUM + x.var(axis=(0, 2, 3)) * (1 - MOMENTUM)
    s.weightsToHost()
    got = {"mean": np.zeros(C, np.float32), "var": np.zeros(C, np.float32)}
    s.readWeights(PyWeightsIO(got))
    np.testing.assert_allclose(got["mean"], mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["var"], var, rtol=1e-4, atol=1e-6)


def test_values_computed_from_running_statistics_follow_them() -> None:
    """A node reading a running statistic is computed on the device from its current value
    (nothing built from it is folded with the value it had when compiled)."""
    m = bn_model()
    m.graph.initializer.append(numpy_helper.from_array(np.asarray(2, np.float32), "two"))
    m.graph.node.append(helper.make_node("Mul", ["var", "two"], ["var2"]))
    s = session(m, {"loss": AnchorReturnType("ALL"), "var2": AnchorReturnType("ALL")})
    anchors = s.initAnchorArrays()
    var = np.ones(C)
    for x in batches(3):
        s.run(PyStepIO({"x": x}, anchors))
        np.testing.assert_allclose(anchors["var2"], 2 * var, rtol=1e-5)
        var = var * MOMENTUM + x.var(axis=(0, 2, 3)) * (1 - MOMENTUM)


@pytest.mark.parametrize("scaling", [(64.0, True), (64.0, False)])
def test_loss_scaling_leaves_the_training_unchanged(scaling) -> None:
    """PopART's lossScaling multiplies the loss that is differentiated and the optimizer divides
    it out of the gradients: the same weights (float32 rounding aside), the loss unscaled."""
    xs, m = batches(3), bn_model()
    plain, scaled = session(m), session(m, loss_scaling=scaling)
    np.testing.assert_allclose(train(scaled, xs), train(plain, xs), rtol=1e-5)
    for s in (plain, scaled):
        s.weightsToHost()
    w = {"w": np.zeros((K, C, 3, 3), np.float32)}
    got = {"w": np.zeros((K, C, 3, 3), np.float32)}
    plain.readWeights(PyWeightsIO(w))
    scaled.readWeights(PyWeightsIO(got))
    np.testing.assert_allclose(got["w"], w["w"], rtol=1e-4, atol=1e-6)
    initial = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == "w"))
    assert not np.allclose(w["w"], initial)


def test_weights_written_on_the_host_reach_the_device_at_weights_from_host() -> None:
    s = session(bn_model())
    x = batches(1)[0]
    s.writeWeights(PyWeightsIO({"w": np.zeros((K, C, 3, 3), np.float32)}))
    before = train(s, [x])  # not yet on the device
    s.weightsFromHost()
    assert train(s, [x]) == [0.0] and before[0] > 0  # zero weights: zero output, zero loss
    # a weight that is not trained (a constant of the model) recompiles, keeping the state
    s2 = session(_with_constant_shape(bn_model()))
    train(s2, batches(3))
    s2.weightsToHost()
    w_trained = s2.weights["w"].copy()
    assert "shape" not in s2.trainable
    s2.writeWeights(PyWeightsIO({"shape": np.zeros(0, np.int64)}))
    with pytest.raises(poplar_exception, match="weightsFromHost"):
        train(s2, [x])
    s2.weightsFromHost()
    s2.weightsToHost()
    np.testing.assert_array_equal(s2.weights["w"], w_trained)
    assert s2.steps == 3


def _with_constant_shape(m: onnx.ModelProto) -> onnx.ModelProto:
    """The loss reshaped by an int64 initializer: a weight of the model that is not trained."""
    g = m.graph
    g.node[-1].output[0] = "loss0"
    g.node.append(helper.make_node("Reshape", ["loss0", "shape"], ["loss"]))
    g.initializer.append(numpy_helper.from_array(np.zeros(0, np.int64), "shape"))
    return m


def test_checkpoint_resumes_in_a_new_session_and_in_a_runtime(tmp_path) -> None:
    xs = batches(8)
    s = session(bn_model())
    train(s, xs[:4])
    s.saveCheckpoint(tmp_path / "ckpt.popef")
    rest = train(s, xs[4:])

    resumed = session(bn_model())
    resumed.loadCheckpoint(tmp_path / "ckpt.popef")
    assert resumed.steps == 4
    np.testing.assert_allclose(train(resumed, xs[4:]), rest, rtol=1e-6)

    with Runner(str(tmp_path / "ckpt.popef")) as r:  # the file trains on its own
        losses = [float(r.run(["loss"], {"x": x, **_hyper(s)})[0]) for x in xs[4:]]
    np.testing.assert_allclose(losses, rest, rtol=1e-6)

    other = session(_with_constant_shape(bn_model()))
    with pytest.raises(popart_exception):
        other.loadCheckpoint(tmp_path / "missing.popef")
    (tmp_path / "bad.popef").write_bytes(b"not a popef")
    with pytest.raises(popart_exception, match="loadCheckpoint"):
        other.loadCheckpoint(tmp_path / "bad.popef")


def _hyper(s: TrainingSession) -> dict[str, np.ndarray]:
    return {k: np.array(v, np.float32) for k, v in s.hyper.items()}


def test_trained_model_runs_in_onnx_runtime_with_pyipus_outputs(tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    s = session(bn_model())
    xs = batches(5)
    train(s, xs[:4])
    s.modelToHost(tmp_path / "trained.onnx")
    trained = onnx.load(tmp_path / "trained.onnx")
    inits = {i.name: numpy_helper.to_array(i) for i in trained.graph.initializer}
    s.weightsToHost()
    for name in ("w", "gamma", "mean", "var"):
        np.testing.assert_array_equal(inits[name], s.weights[name])
    (loss,) = ort.InferenceSession(trained.SerializeToString()).run(["loss"], {"x": xs[4]})
    assert train(s, [xs[4]])[0] == pytest.approx(float(loss), rel=1e-4)


def test_optimizer_state_reaches_the_host() -> None:
    s = session(bn_model())
    train(s, batches(2))
    velocity = np.zeros((K, C, 3, 3), np.float32)
    s.readOptimizerState(PyWeightsIO({"w/momentum": velocity}))
    assert not velocity.any()  # the host copy: before weightsToHost
    s.weightsToHost()
    s.readOptimizerState(PyWeightsIO({"w/momentum": velocity}))
    assert velocity.any() and s.steps == 2
    with pytest.raises(popart_exception, match="not optimizer state"):
        s.readOptimizerState(PyWeightsIO({"w/nope": velocity}))
