"""Training over virtual IPUs: a TrainingSession with manual virtual graphs, sequential or
pipelined, trains exactly as the same model on one IPU does (the same micro-batches, the same
gradient accumulation), its backward pass on the IPUs of the forward pass and its optimizer in
the step-end program."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from pyipu import popart

IN, HID, OUT, BATCH = 8, 16, 5, 4


def _model(ipus: tuple[int, int, int] | None, stages: tuple[int, int, int] | None = None):
    """x → MatMul·Relu (part 0) → MatMul (part 1) → Softmax·NLL (part 2), each part on
    ipus[k] (None: not placed) in pipeline stage stages[k] (None: the IPU's)."""
    rng = np.random.default_rng(0)
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [BATCH, IN]), "x")
    label = b.addInputTensor(popart.TensorInfo("INT32", [BATCH]), "label")
    w1 = b.addInitializedInputTensor(rng.standard_normal((IN, HID)).astype(np.float32) * 0.3, "w1")
    w2 = b.addInitializedInputTensor(rng.standard_normal((HID, OUT)).astype(np.float32) * 0.3, "w2")

    def part(k: int):
        if ipus is None:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(b.virtualGraph(ipus[k]))
        if stages is not None:
            stack.enter_context(b.pipelineStage(stages[k]))
        return stack

    with part(0):
        h = b.aiOnnx.relu([b.aiOnnx.matmul([x, w1])])
    with part(1):
        logits = b.aiOnnx.matmul([h, w2])
    with part(2):
        loss = b.aiGraphcore.nllloss([b.aiOnnx.softmax([logits], axis=1), label])
    return b.getModelProto(), loss


def _optimizer(kind: str):
    if kind == "sgd":
        return popart.SGD({"defaultLearningRate": (0.1, False), "defaultMomentum": (0.9, True)})
    return popart.Adam({"defaultLearningRate": (0.01, False)})


def _session(
    ipus=None,
    stages=None,
    *,
    pipelined=False,
    accumulation=1,
    replicas=1,
    mean=False,
    kind="sgd",
    bps=2,
):
    proto, loss = _model(ipus, stages)
    o = popart.SessionOptions()
    num_ipus = 1
    if ipus is not None:
        o.virtualGraphMode = popart.VirtualGraphMode.Manual
        o.enablePipelining = pipelined
        num_ipus = max(ipus) + 1
    o.enableGradientAccumulation = accumulation > 1
    o.accumulationFactor = accumulation
    o.enableReplicatedGraphs = replicas > 1
    o.replicatedGraphCount = replicas
    if mean:
        o.accumulationAndReplicationReductionType = popart.ReductionType.Mean
    device = popart.DeviceManager().createIpuModelDevice({"numIPUs": num_ipus * replicas})
    flow = popart.DataFlow(bps, {loss: popart.AnchorReturnType("ALL")})
    s = popart.TrainingSession(proto, flow, loss, _optimizer(kind), device, userOptions=o)
    s.prepareDevice()
    return s, loss


def _train(s, loss, steps: int = 3, seed: int = 1):
    """Losses of `steps` runs and the weights after them."""
    bps, acc, reps = s._lead
    lead = [d for d in (bps, acc, reps) if d > 1]
    rng = np.random.default_rng(seed)
    anchors = s.initAnchorArrays()
    losses = []
    for _ in range(steps):
        x = rng.standard_normal((*lead, BATCH, IN)).astype(np.float32)
        label = rng.integers(0, OUT, (*lead, BATCH)).astype(np.int32)
        s.run(popart.PyStepIO({"x": x, "label": label}, anchors))
        losses.append(anchors[loss].copy())
    return np.array(losses), _weights(s)


def _weights(s):
    s.weightsToHost()
    w = {"w1": np.zeros((IN, HID), np.float32), "w2": np.zeros((HID, OUT), np.float32)}
    s.readWeights(popart.PyWeightsIO(w))
    return w


def _assert_same_training(got, want):
    (got_losses, got_w), (want_losses, want_w) = got, want
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5, atol=1e-6)
    for k in want_w:
        np.testing.assert_allclose(got_w[k], want_w[k], rtol=1e-5, atol=1e-6, err_msg=k)


COMBOS = [  # pipelined, accumulation, replicas, mean reduction
    (False, 1, 1, False),
    (False, 3, 1, False),
    (False, 4, 2, True),
    (True, 3, 1, False),
    (True, 4, 2, True),
]


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("pipelined,accumulation,replicas,mean", COMBOS)
def test_sharded_training_matches_one_ipu(kind, pipelined, accumulation, replicas, mean):
    one = _session(accumulation=accumulation, replicas=replicas, mean=mean, kind=kind)
    want = _train(*one)
    assert not np.allclose(want[1]["w1"], _initial_w1())  # it trained
    s, loss = _session(
        (0, 1, 1),
        pipelined=pipelined,
        accumulation=accumulation,
        replicas=replicas,
        mean=mean,
        kind=kind,
    )
    _assert_same_training(_train(s, loss), want)
    prog = s._exe.program
    assert prog.step_end_program is not None and len(prog.stages) == 3  # 2 forward, 1 back
    assert [st.ipu for st in prog.stages] == [0, 1, 0]
    stats = s._runner.stats()
    if pipelined:
        # every step fills and drains the 3-stage pipeline once: A + 2 ticks
        assert stats["pipeline_ticks"] == 3 * 2 * (accumulation + 2)
    assert stats["steps"] == 3 * 2


def _initial_w1() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((IN, HID)).astype(np.float32) * 0.3


def test_explicit_pipeline_stages_may_return_to_an_ipu():
    """Three forward stages on IPUs 0, 1, 0: five stages in all, the backward mirrored."""
    want = _train(*_session(accumulation=5))
    s, loss = _session((0, 1, 0), (0, 1, 2), pipelined=True, accumulation=5)
    _assert_same_training(_train(s, loss), want)
    assert [st.ipu for st in s._exe.program.stages] == [0, 1, 0, 1, 0]


def test_a_pipeline_needs_enough_micro_batches_per_update():
    with pytest.raises(popart.popart_exception, match="accumulationFactor >= 3"):
        _session((0, 1, 1), pipelined=True, accumulation=2)
    with pytest.raises(popart.popart_exception, match="virtualGraphMode Manual"):
        proto, loss = _model(None)
        o = popart.SessionOptions()
        o.enablePipelining = True
        popart.TrainingSession(
            proto,
            popart.DataFlow(1, [loss]),
            loss,
            _optimizer("sgd"),
            popart.DeviceManager().createCpuDevice(),
            userOptions=o,
        )


def test_pipelined_checkpoint_and_host_weights(tmp_path):
    """A checkpoint resumes the pipeline's training; weights written on the host reach it."""
    s, loss = _session((0, 1, 1), pipelined=True, accumulation=3)
    _train(s, loss, steps=2)
    s.saveCheckpoint(tmp_path / "ckpt.popef")
    want = _train(s, loss, steps=2, seed=7)
    r, loss_r = _session((0, 1, 1), pipelined=True, accumulation=3)
    r.loadCheckpoint(tmp_path / "ckpt.popef")
    _assert_same_training(_train(r, loss_r, steps=2, seed=7), want)

    w = _weights(r)
    w["w2"][...] = 0.25
    r.writeWeights(popart.PyWeightsIO(w))
    r.weightsFromHost()
    np.testing.assert_array_equal(_weights(r)["w2"], np.full((HID, OUT), 0.25, np.float32))
