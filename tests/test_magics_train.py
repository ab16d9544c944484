"""`%ipu train`: a TrainingSession run step after step with a live loss panel; the feeds as a
dict, a function or an iterable; the losses match the session's own runs; an interrupt stops
after the run in flight; bad arguments are UsageErrors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from magics_shell import magic, require_notebook_libraries, shell
from onnx import TensorProto, helper, numpy_helper

require_notebook_libraries()

from IPython.core.error import UsageError  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

from pyipu import popart  # noqa: E402

RNG = np.random.default_rng(2)
B = 8


def regression_session(bps: int = 2) -> popart.TrainingSession:
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["y"]),
            helper.make_node("Sub", ["y", "t"], ["d"]),
            helper.make_node("Mul", ["d", "d"], ["sq"]),
            helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
        ],
        "regression",
        [
            helper.make_tensor_value_info("x", f, [B, 3]),
            helper.make_tensor_value_info("t", f, [B, 1]),
        ],
        [helper.make_tensor_value_info("loss", f, [])],
        [numpy_helper.from_array(np.zeros((3, 1), np.float32), "W")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return popart.TrainingSession(
        model.SerializeToString(),
        popart.DataFlow(bps, {"loss": popart.AnchorReturnType("ALL")}),
        "loss",
        popart.SGD({"defaultLearningRate": (0.1, False)}),
        popart.DeviceManager().createCpuDevice(),
    )


def feed(i: int, bps: int = 2) -> dict[str, np.ndarray]:
    x = np.random.default_rng(i).standard_normal((bps, B, 3)).astype(np.float32)
    return {"x": x, "t": x @ np.array([[1.0], [-2.0], [0.5]], np.float32)}


@pytest.fixture()
def ip() -> Any:
    ip = shell()
    ip.user_ns.update(feed=feed, feeds=[feed(i) for i in range(5)], one=feed(0))
    return ip


def test_losses_fall_and_match_the_sessions_own_runs(ip: Any) -> None:
    ip.user_ns["s"] = regression_session()
    types = ip.display_formatter.active_types
    ip.display_formatter.active_types = [*types, "text/html"]  # as a notebook has
    try:
        with capture_output() as out:
            ip.run_line_magic("ipu", "train s feed --runs 6 -o res")
    finally:
        ip.display_formatter.active_types = types
    res = ip.user_ns["res"]
    assert res is ip.user_ns["_ipu_last_train"]
    assert res.runs == 6 and len(res.losses) == 12 and res.samples == 6 * 2 * B
    assert res.losses[-1] < 0.1 * res.losses[0]
    html = "".join(o.data.get("text/html", "") for o in out.outputs)
    assert "svg" in html and "%ipu train s" in html and "samples/s" in html
    # the same runs through the session's API give the same losses
    s2 = regression_session()
    s2.prepareDevice()
    anchors = s2.initAnchorArrays()
    again = []
    for i in range(6):
        s2.run(popart.PyStepIO(feed(i), anchors))
        again.extend(anchors["loss"].tolist())
    np.testing.assert_allclose(res.losses, again, rtol=1e-6)
    assert "TrainResult(s: 6 runs" in repr(res) and "<svg" in res._repr_html_()


def test_feeds_as_a_list_and_as_one_dict(ip: Any) -> None:
    ip.user_ns["s"] = regression_session()
    magic(ip, "train s feeds")
    assert ip.user_ns["_ipu_last_train"].runs == 5
    magic(ip, "train s feeds --runs 2")
    assert ip.user_ns["_ipu_last_train"].runs == 2
    magic(ip, "train s one --runs 3")
    res = ip.user_ns["_ipu_last_train"]
    assert res.runs == 3 and np.all(np.diff(res.losses) < 0)  # one batch, learned


def test_interrupt_stops_after_the_run_in_flight(ip: Any) -> None:
    ip.user_ns["s"] = regression_session()

    def stopping(i: int) -> dict[str, np.ndarray]:
        if i == 3:
            raise KeyboardInterrupt
        return feed(i)

    ip.user_ns["stopping"] = stopping
    with pytest.raises(KeyboardInterrupt):
        magic(ip, "train s stopping --runs 10")
    res = ip.user_ns["_ipu_last_train"]
    assert res.interrupted and res.runs == 3 and len(res.losses) == 6


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("train nope feed --runs 2", "neither a variable"),
        ("train one feed --runs 2", "not a pyipu.popart.TrainingSession"),
        ("train s feed", "--runs N"),
        ("train s one", "--runs N"),
        ("train s feed --runs 2 --anchor nope", "not an anchor"),
        ("train s feed --runs 0", "positive integer"),
    ],
)
def test_bad_arguments_are_usage_errors(ip: Any, line: str, message: str) -> None:
    ip.user_ns["s"] = regression_session()
    with pytest.raises(UsageError, match=message):
        magic(ip, line)


def test_a_poptorch_training_model_trains_from_argument_tuples(ip: Any) -> None:
    torch = pytest.importorskip("torch")
    from pyipu import poptorch

    class Regression(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 1)

        def forward(self, x, y):  # noqa: ANN001, ANN201
            out = self.fc(x)
            return out, torch.nn.functional.mse_loss(out, y)

    def make() -> Any:
        torch.manual_seed(0)
        model = Regression()
        return poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))

    torch.manual_seed(1)
    x = torch.randn(8, 3)
    batches = [(x, x @ torch.tensor([[1.0], [-2.0], [0.5]])) for _ in range(4)]
    ip.user_ns.update(m=make(), batches=batches, one=batches[0])
    magic(ip, "train m batches")
    res = ip.user_ns["_ipu_last_train"]
    assert res.runs == 4 and res.samples == 4 * 8 and len(res.losses) == 4
    again = make()
    expected = [float(again(*b)[1]) for b in batches]
    np.testing.assert_allclose(res.losses, expected, rtol=1e-6)
    magic(ip, "train m one --runs 3")
    assert ip.user_ns["_ipu_last_train"].runs == 3
    ip.user_ns["inference"] = poptorch.inferenceModel(Regression())
    with pytest.raises(UsageError, match="trainingModel"):
        magic(ip, "train inference batches")
