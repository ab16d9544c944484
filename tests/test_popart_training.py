"""pyipu.popart.TrainingSession: the slide's example, an MLP trained against a NumPy
implementation of the same model and optimizer, weights and optimizer values in and out."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyipu.popart import (
    SGD,
    Adam,
    AnchorReturnType,
    Builder,
    DataFlow,
    DeviceManager,
    NllLoss,
    PyStepIO,
    PyWeightsIO,
    ReductionType,
    SessionOptions,
    TensorInfo,
    TrainingSession,
    popart_exception,
)

RNG = np.random.default_rng(0)


def test_the_training_slide_runs(tmp_path) -> None:
    w = (RNG.standard_normal((8, 10)) * 0.1).astype(np.float32)
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["input", "W"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["output"], axis=1),
        ],
        "model",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, (1, 8))],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, (1, 10))],
        [numpy_helper.from_array(w, "W")],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), tmp_path / "model.onnx"
    )
    # the PopART slide's training example (32 batches of one sample per step)
    builder = Builder(str(tmp_path / "model.onnx"))
    builder.aiOnnx.softmax(["output"])
    label = builder.addInputTensor(TensorInfo("INT32", [1]), "label")
    session = TrainingSession(
        fnModel=builder.getModelProto(),
        dataFeed=DataFlow(32, {"loss": AnchorReturnType("ALL")}),
        losses=[NllLoss("output", label, "loss")],
        optimizer=SGD(learning_rate=0.5),
        deviceInfo=DeviceManager().acquireAvailableDevice(numIpus=1),
    )
    anchors = session.initAnchorArrays()
    session.prepareDevice()
    session.weightsFromHost()
    session.optimizerFromHost()
    x = RNG.standard_normal((32, 1, 8)).astype(np.float32)
    y = (np.arange(32) % 10).reshape(32, 1).astype(np.int32)
    losses = []
    for _ in range(8):
        session.run(PyStepIO({"input": x, "label": y}, anchors))
        losses.append(float(anchors["loss"].mean()))
    assert anchors["loss"].shape == (32,) and losses[-1] < losses[0] - 0.5
    session.modelToHost(str(tmp_path / "trained_model.onnx"))
    trained = {
        i.name: numpy_helper.to_array(i)
        for i in onnx.load(tmp_path / "trained_model.onnx").graph.initializer
    }
    assert not np.allclose(trained["W"], w)
    session.close()


def _mlp() -> tuple[Builder, dict[str, str], dict[str, np.ndarray]]:
    w = {
        "W1": (RNG.standard_normal((6, 16)) * 0.5).astype(np.float32),
        "b1": np.zeros(16, np.float32),
        "W2": (RNG.standard_normal((16, 4)) * 0.5).astype(np.float32),
    }
    b = Builder()
    x = b.addInputTensor(TensorInfo("FLOAT", [8, 6]), "x")
    label = b.addInputTensor(TensorInfo("INT32", [8]), "label")
    ids = {k: b.addInitializedInputTensor(v, k) for k, v in w.items()}
    h = b.aiOnnx.relu([b.aiOnnx.add([b.aiOnnx.matmul([x, ids["W1"]]), ids["b1"]])])
    logp = b.aiOnnx.logsoftmax([b.aiOnnx.matmul([h, ids["W2"]])], 1)
    loss = b.aiGraphcore.nllloss([logp, label], ReductionType.Mean, inputIsLogProbability=True)
    return b, {"x": x, "label": label, "loss": loss}, w


def _numpy_sgd(
    w: dict[str, np.ndarray], xs, ys, lr: float, momentum: float
) -> tuple[list[float], dict]:
    """The same MLP trained in float64 by hand: softmax cross-entropy, torch.optim.SGD."""
    p = {k: v.astype(np.float64) for k, v in w.items()}
    buf: dict[str, np.ndarray] = {}
    losses = []
    for x, y in zip(xs, ys, strict=True):
        pre = x @ p["W1"] + p["b1"]
        h = np.maximum(pre, 0)
        logits = h @ p["W2"]
        z = logits - logits.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        losses.append(-logp[np.arange(len(y)), y].mean())
        d = np.exp(logp)
        d[np.arange(len(y)), y] -= 1
        d /= len(y)
        grads = {"W2": h.T @ d}
        dh = (d @ p["W2"].T) * (pre > 0)
        grads["W1"], grads["b1"] = x.T @ dh, dh.sum(0)
        for k, gk in grads.items():
            buf[k] = gk if k not in buf else momentum * buf[k] + gk
            p[k] = p[k] - lr * buf[k]
    return losses, p


def test_mlp_follows_the_numpy_trajectory(tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    b, ids, w = _mlp()
    bps = 4
    session = TrainingSession(
        b.getModelProto(),
        DataFlow(bps, {ids["loss"]: AnchorReturnType("ALL")}),
        ids["loss"],
        SGD({"defaultLearningRate": (0.2, False), "defaultMomentum": (0.9, True)}),
        DeviceManager().createCpuDevice(),
    )
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    xs = RNG.standard_normal((5 * bps, 8, 6)).astype(np.float32)
    ys = RNG.integers(0, 4, (5 * bps, 8)).astype(np.int32)
    got: list[float] = []
    for step in range(5):
        sl = slice(step * bps, (step + 1) * bps)
        session.run(PyStepIO({ids["x"]: xs[sl], ids["label"]: ys[sl]}, anchors))
        got += anchors[ids["loss"]].tolist()
    want, trained = _numpy_sgd(w, xs.astype(np.float64), ys, 0.2, 0.9)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert want[-1] < want[0]
    read = {k: np.zeros_like(v) for k, v in w.items()}
    session.weightsToHost()
    session.readWeights(PyWeightsIO(read))
    for k in w:
        np.testing.assert_allclose(read[k], trained[k], rtol=1e-4, atol=1e-5)
    # the trained model, as ONNX Runtime runs it
    session.modelToHost(str(tmp_path / "trained.onnx"))
    m = onnx.load(tmp_path / "trained.onnx")
    m.ir_version = min(m.ir_version, 10)
    m.graph.output.append(onnx.ValueInfoProto(name=ids["loss"]))
    (loss,) = ort.InferenceSession(m.SerializeToString()).run(
        [ids["loss"]], {ids["x"]: xs[0], ids["label"]: ys[0]}
    )
    np.testing.assert_allclose(
        loss, _numpy_sgd(trained, [xs[0].astype(np.float64)], [ys[0]], 0.0, 0.0)[0][0], rtol=1e-4
    )
    session.close()


def test_optimizer_values_change_between_steps() -> None:
    b, ids, w = _mlp()
    opt = Adam({"defaultLearningRate": (0.01, False), "defaultBeta1": (0.9, True)})
    session = TrainingSession(
        b.getModelProto(),
        DataFlow(1, {ids["loss"]: AnchorReturnType("FINAL")}),
        ids["loss"],
        opt,
        DeviceManager().createCpuDevice(),
    )
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    x = RNG.standard_normal((8, 6)).astype(np.float32)
    y = RNG.integers(0, 4, 8).astype(np.int32)
    read = {"W2": np.zeros((16, 4), np.float32)}

    def step() -> np.ndarray:
        session.weightsToHost()
        session.readWeights(PyWeightsIO(read))
        before = read["W2"].copy()
        session.run(PyStepIO({ids["x"]: x, ids["label"]: y}, anchors))
        session.readWeights(PyWeightsIO(read))
        assert np.array_equal(read["W2"], before)  # the host copy waits for weightsToHost
        session.weightsToHost()
        session.readWeights(PyWeightsIO(read))
        return np.abs(read["W2"] - before).max()

    first = step()
    session.updateOptimizerFromHost(
        Adam({"defaultLearningRate": (0.0, False), "defaultBeta1": (0.9, True)})
    )
    assert step() == 0.0 and first > 0  # a zero learning rate: the weights stay
    with pytest.raises(popart_exception, match="defaultBeta1 is const"):
        session.updateOptimizerFromHost(
            Adam({"defaultLearningRate": (0.0, False), "defaultBeta1": (0.5, True)})
        )
    session.writeWeights(PyWeightsIO({"W2": np.zeros((16, 4), np.float32)}))
    session.readWeights(PyWeightsIO(read))
    assert not read["W2"].any()
    session.close()


def test_training_misuse_is_a_typed_error() -> None:
    b, ids, _ = _mlp()
    flow = DataFlow(1, {ids["loss"]: AnchorReturnType("FINAL")})
    dev = DeviceManager().createCpuDevice()
    with pytest.raises(popart_exception, match="needs an optimizer"):
        TrainingSession(b.getModelProto(), flow, ids["loss"], None, dev)
    with pytest.raises(popart_exception, match="not a tensor of the model"):
        TrainingSession(b.getModelProto(), flow, "nope", SGD(), dev)
    opts = SessionOptions()
    opts.enablePipelining = True
    with pytest.raises(popart_exception, match="enablePipelining needs virtualGraphMode Manual"):
        TrainingSession(b.getModelProto(), flow, ids["loss"], SGD(), dev, userOptions=opts)
    bad = Builder()
    x = bad.addInputTensor(TensorInfo("FLOAT", [4]), "x")
    wid = bad.addInitializedInputTensor(np.ones(4, np.float32), "w")
    soft = bad.aiOnnx.softplus([bad.aiOnnx.mul([x, wid])])
    loss = bad.aiGraphcore.identityloss([soft])
    s = TrainingSession(
        bad.getModelProto(), DataFlow(1, {loss: AnchorReturnType("FINAL")}), loss, SGD(), dev
    )
    with pytest.raises(popart_exception, match="no gradient for Softplus"):
        s.prepareDevice()
