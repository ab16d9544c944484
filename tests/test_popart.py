"""pyipu.popart: PopART's Builder, DataFlow, InferenceSession and weights I/O on pyipu."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pyipu.popart import (
    AnchorReturnType,
    Builder,
    DataFlow,
    DeviceManager,
    InferenceSession,
    OutOfMemoryException,
    PyStepIO,
    PyStepIOCallback,
    PyWeightsIO,
    ReductionType,
    SessionOptions,
    TensorInfo,
    VirtualGraphMode,
    popart_exception,
    poplar_exception,
)

RNG = np.random.default_rng(0)


def _add_onnx(path) -> str:
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["sum"])],
        "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, (3, 4, 5)) for n in "xy"],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, (3, 4, 5))],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), path)
    return str(path)


def test_the_inference_slide_runs(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _add_onnx(tmp_path / "add.onnx")
    # the PopART slide's example, with its two typos fixed
    from pyipu.popart import AnchorReturnType as AnchorReturnTypes

    session = InferenceSession(
        fnModel="add.onnx",
        dataFeed=DataFlow(1, {"sum": AnchorReturnTypes("FINAL")}),
        deviceInfo=DeviceManager().acquireAvailableDevice(numIpus=1),
    )
    anchors = session.initAnchorArrays()
    session.prepareDevice()
    x = np.random.rand(3, 4, 5).astype(np.float32)
    y = np.random.rand(3, 4, 5).astype(np.float32)
    session.run(PyStepIO({"x": x, "y": y}, anchors))
    np.testing.assert_array_equal(anchors["sum"], x + y)


def _mlp() -> tuple[Builder, str, str, dict[str, np.ndarray]]:
    b = Builder()
    x = b.addInputTensor(TensorInfo("FLOAT", [2, 8]), "x")
    w = RNG.standard_normal((8, 4)).astype(np.float32)
    c = RNG.standard_normal(4).astype(np.float32)
    wid = b.addInitializedInputTensor(w, "w")
    cid = b.addInitializedInputTensor(c, "c")
    y = b.aiOnnx.relu([b.aiOnnx.gemm([x, wid, cid], 1.0, 1.0, 0, 0)])
    b.addOutputTensor(y)
    return b, x, y, {"w": w, "c": c}


def test_builder_ops_attributes_and_ids() -> None:
    b, x, y, _ = _mlp()
    assert b.getInputTensorIds() == [x] and b.getOutputTensorIds() == [y]
    assert b.getTensorShape(y) == [2, 4] and b.getTensorDtypeString(y) == "float"
    a, c2 = b.aiOnnx.split([y], 2, axis=1)  # variable outputs: num_outputs first
    assert b.getTensorShape(a) == [2, 2] and b.getTensorShape(c2) == [2, 2]
    values, idx = b.aiOnnxOpset11().topk([y, b.aiOnnx.constant([], value=_i64([1]))], axis=1)
    assert b.getTensorShape(idx) == [2, 1]
    assert b.aiOnnx.softmax([y], 1).startswith("Softmax")
    assert b.aiOnnx.add([a, c2], debugContext="two").startswith("two/Add:")
    with pytest.raises(AttributeError, match="no op"):
        b.aiOnnx.notanop([x])
    with pytest.raises(popart_exception, match="no tensor 'nope'"):
        b.aiOnnx.relu(["nope"])
    with pytest.raises(popart_exception, match="required attribute"):
        b.aiOnnx.averagepool([x])
    with pytest.raises(popart_exception, match="has no attribute 'bogus'"):
        b.aiOnnx.relu([x], bogus=1)
    with pytest.raises(popart_exception, match="attribute values"):
        b.aiOnnx.relu([x], 1)
    onnx.checker.check_model(onnx.load_model_from_string(b.getModelProto()))


def _i64(v: list[int]) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.array(v, np.int64))


def _session(
    b: Builder, anchors: dict[str, AnchorReturnType], bps: int = 1, **opts
) -> InferenceSession:
    options = SessionOptions()
    for k, v in opts.items():
        setattr(options, k, v)
    ipus = max(options.replicatedGraphCount, 1) * (2 if options.virtualGraphMode else 1)
    s = InferenceSession(
        b.getModelProto(),
        DataFlow(bps, anchors),
        DeviceManager().acquireAvailableDevice(ipus),
        userOptions=options,
    )
    s.prepareDevice()
    return s


def _reference(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    return np.maximum(x @ w["w"] + w["c"], 0)


@pytest.mark.parametrize("replicas", [1, 2])
def test_anchor_return_types_follow_popart(replicas: int) -> None:
    b, x, y, w = _mlp()
    h = b.getModelProto()  # the Gemm output is anchored too: anchors need not be outputs
    gemm = [n.output[0] for n in onnx.load_model_from_string(h).graph.node if n.op_type == "Gemm"][
        0
    ]
    arts = {
        y: AnchorReturnType("ALL"),
        gemm: AnchorReturnType("FINAL"),
        "x": AnchorReturnType("EVERYN", 2),
    }
    opts = {"enableReplicatedGraphs": replicas > 1, "replicatedGraphCount": replicas}
    s = _session(b, arts, bps=4, **opts)
    out = s.initAnchorArrays()
    lead = (4, replicas) if replicas > 1 else (4,)
    assert out[y].shape == (*lead, 2, 4)
    assert out[gemm].shape == ((replicas, 2, 4) if replicas > 1 else (2, 4))
    assert out["x"].shape == ((2, replicas, 2, 8) if replicas > 1 else (2, 2, 8))
    data = RNG.standard_normal((*lead, 2, 8)).astype(np.float32)
    s.run(PyStepIO({x: data}, out))
    np.testing.assert_allclose(out[y], _reference(data, w), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[gemm], (data[-1] @ w["w"] + w["c"]), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out["x"], data[1::2])
    s.close()


def test_sum_anchor_and_callbacks() -> None:
    b, x, y, w = _mlp()
    s = _session(b, {y: AnchorReturnType("SUM")}, bps=3)
    data = RNG.standard_normal((3, 2, 8)).astype(np.float32)
    out = s.initAnchorArrays()
    s.run(PyStepIO({x: data}, out))
    np.testing.assert_allclose(out[y], _reference(data, w).sum(0), rtol=1e-5, atol=1e-5)
    fed, got, done = iter(data), [], []
    s.run(
        PyStepIOCallback(
            lambda tid, prefetch: next(fed),
            lambda tid: done.append(tid),
            lambda tid: got.append(np.empty((2, 4), np.float32)) or got[-1],
            lambda tid: done.append(tid),
        )
    )
    assert done == [x, x, x, y] and len(got) == 1
    np.testing.assert_allclose(got[0], out[y], rtol=1e-6)


def test_misuse_is_a_typed_error() -> None:
    b, x, y, _ = _mlp()
    s = InferenceSession(
        b.getModelProto(),
        DataFlow(2, {y: AnchorReturnType("ALL")}),
        DeviceManager().createCpuDevice(),
    )
    with pytest.raises(poplar_exception, match="prepareDevice"):
        s.run(PyStepIO({}, {}))
    s.prepareDevice()
    out = s.initAnchorArrays()
    good = np.zeros((2, 2, 8), np.float32)
    with pytest.raises(popart_exception, match="no data for input"):
        s.run(PyStepIO({}, out))
    with pytest.raises(popart_exception, match="not inputs of the model"):
        s.run(PyStepIO({x: good, "z": good}, out))
    with pytest.raises(popart_exception, match="dtype float64"):
        s.run(PyStepIO({x: good.astype(np.float64)}, out))
    with pytest.raises(popart_exception, match=r"expected \[2, 2, 8\]"):
        s.run(PyStepIO({x: good[0]}, out))
    with pytest.raises(popart_exception, match="anchor"):
        s.run(PyStepIO({x: good}, {y: np.zeros((3, 2, 4), np.float32)}))
    with pytest.raises(popart_exception, match="not a tensor of the model"):
        InferenceSession(
            b.getModelProto(),
            DataFlow(1, {"nope": AnchorReturnType("ALL")}),
            DeviceManager().createCpuDevice(),
        )
    with pytest.raises(popart_exception, match="EVERYN"):
        DataFlow(3, {y: AnchorReturnType("EVERYN", 2)})
    with pytest.raises(popart_exception, match="FINAL, EVERYN"):
        AnchorReturnType("LAST")
    with pytest.raises(popart_exception, match="no device"):
        InferenceSession(b.getModelProto(), DataFlow(1, {y: AnchorReturnType("ALL")}), None)
    with pytest.raises(AttributeError, match="no option"):
        SessionOptions().replicationFactor = 2  # type: ignore[attr-defined]
    with pytest.raises(popart_exception, match="not an ONNX model"):
        InferenceSession(
            b"\x00garbage",
            DataFlow(1, {y: AnchorReturnType("ALL")}),
            DeviceManager().createCpuDevice(),
        )
    s.close()


def test_weights_in_and_out(tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    b, x, y, w = _mlp()
    s = _session(b, {y: AnchorReturnType("FINAL")})
    read = {"w": np.zeros((8, 4), np.float32), "c": np.zeros(4, np.float32)}
    s.weightsToHost()
    s.readWeights(PyWeightsIO(read))
    np.testing.assert_array_equal(read["w"], w["w"])
    new = {"w": RNG.standard_normal((8, 4)).astype(np.float32), "c": np.ones(4, np.float32)}
    s.writeWeights(PyWeightsIO(new))
    data = RNG.standard_normal((2, 8)).astype(np.float32)
    out = s.initAnchorArrays()
    with pytest.raises(poplar_exception, match="weightsFromHost"):
        s.run(PyStepIO({x: data}, out))
    s.weightsFromHost()
    s.run(PyStepIO({x: data}, out))
    np.testing.assert_allclose(out[y], _reference(data, new), rtol=1e-5, atol=1e-5)
    s.modelToHost(tmp_path / "trained.onnx")
    (ort_y,) = ort.InferenceSession(str(tmp_path / "trained.onnx")).run([y], {x: data})
    np.testing.assert_allclose(ort_y, out[y], rtol=1e-5, atol=1e-5)
    with pytest.raises(popart_exception, match="not a weight"):
        s.readWeights(PyWeightsIO({"x": np.zeros(2)}))
    with pytest.raises(popart_exception, match="the weight"):
        s.writeWeights(PyWeightsIO({"w": np.zeros(2, np.float32)}))
    s.resetHostWeights(b.getModelProto())
    s.weightsFromHost()
    s.run(PyStepIO({x: data}, out))
    np.testing.assert_allclose(out[y], _reference(data, w), rtol=1e-5, atol=1e-5)
    s.compileAndExport(tmp_path / "m.popef")
    from pyipu.runtime import Runner

    Runner(str(tmp_path / "m.popef")).close()
    assert "IPU Model report" in s.getSummaryReport()
    s.close()


@pytest.mark.parametrize("opset", [10, 13])
def test_losses_match_numpy(opset: int) -> None:
    b = Builder(opsets={"ai.onnx": opset, "ai.graphcore": 1})
    p = b.addInputTensor(TensorInfo("FLOAT", [4, 3]), "probs")
    label = b.addInputTensor(TensorInfo("INT32", [4]), "label")
    probs = b.aiOnnx.softmax([p], 1)
    g = b.aiGraphcore
    nll = g.nllloss([probs, label])
    nll_sum = g.nllloss([probs, label], ReductionType.Sum)
    nll_ignore = g.nllloss([probs, label], ignoreIndex=2)
    l1 = g.l1loss([p], 0.5)
    ident = g.identityloss([p], ReductionType.Sum)
    ids = [nll, nll_sum, nll_ignore, l1, ident]
    s = _session(b, {t: AnchorReturnType("FINAL") for t in ids})
    logits = RNG.standard_normal((4, 3)).astype(np.float32)
    lab = np.array([0, 2, 1, 2], np.int32)
    out = s.initAnchorArrays()
    s.run(PyStepIO({p: logits, label: lab}, out))
    sm = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    per = -np.log(sm[np.arange(4), lab])
    np.testing.assert_allclose(out[nll], per.mean(), rtol=1e-5)
    np.testing.assert_allclose(out[nll_sum], per.sum(), rtol=1e-5)
    np.testing.assert_allclose(out[nll_ignore], per[lab != 2].mean(), rtol=1e-5)
    np.testing.assert_allclose(out[l1], 0.5 * np.abs(logits).mean(), rtol=1e-5)
    np.testing.assert_allclose(out[ident], logits.sum(), rtol=1e-5)
    s.close()


def test_manual_virtual_graphs_shard_the_model() -> None:
    b = Builder()
    x = b.addInputTensor(TensorInfo("FLOAT", [4]), "x")
    with b.virtualGraph(0):
        h = b.aiOnnx.relu([x])
    with b.virtualGraph(1):
        y = b.aiOnnx.neg([h])
    b.addOutputTensor(y)
    model = onnx.load_model_from_string(b.getModelProto())
    assert [a.i for n in model.graph.node for a in n.attribute if a.name == "__ipu_number"] == [
        0,
        1,
    ]
    s = _session(b, {y: AnchorReturnType("ALL")}, virtualGraphMode=VirtualGraphMode.Manual)
    assert s.getExecutable().program.num_ipus == 2
    out = s.initAnchorArrays()
    data = np.array([-1, 2, -3, 4], np.float32)
    s.run(PyStepIO({x: data}, out))
    np.testing.assert_array_equal(out[y], -np.maximum(data, 0))
    s.close()


def test_the_pipelining_slide_runs() -> None:
    """The slide places ops with virtualGraph only: each IPU is its own pipeline stage (PopART's
    default), and a step of batchesPerStep batches fills and drains the pipeline."""
    b = Builder()
    o1, o2, o4 = (b.addInputTensor(TensorInfo("FLOAT", [2]), n) for n in ("o1", "o2", "o4"))
    with b.virtualGraph(0):
        o3 = b.aiOnnx.add([o1, o2])
    with b.virtualGraph(1):
        o5 = b.aiOnnx.add([o3, o4])
    b.addOutputTensor(o5)
    s = _session(
        b,
        {o5: AnchorReturnType("ALL")},
        bps=4,
        virtualGraphMode=VirtualGraphMode.Manual,
        enablePipelining=True,
    )
    out = s.initAnchorArrays()
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    s.run(PyStepIO({o1: x, o2: 2 * x, o4: np.ones_like(x)}, out))
    np.testing.assert_array_equal(out[o5], 3 * x + 1)
    assert s._runner.stats()["pipeline_ticks"] == 5
    s.close()


def test_a_model_too_big_for_the_ipu() -> None:
    b = Builder()
    x = b.addInputTensor(TensorInfo("FLOAT", [1]), "x")
    shape = b.aiOnnx.constant([], value=_i64([260_000_000]))
    y = b.aiOnnx.expand([x, shape])  # 1 GB of activations: more than the IPU's 900 MB
    s = InferenceSession(
        b.getModelProto(),
        DataFlow(1, {y: AnchorReturnType("ALL")}),
        DeviceManager().createCpuDevice(),
    )
    with pytest.raises(OutOfMemoryException, match="out of memory"):
        s.prepareDevice()
