"""End-to-end training against PyTorch: an MLP, a ResNet-style CNN with BatchNormalization and a
two-layer transformer encoder (tests/torch_training.py), each written in torch, exported to ONNX
with its cross-entropy loss in training mode, and trained for 100 steps by pyipu's PopART
TrainingSession and by torch from the same initial weights on the same batches, with SGD
(momentum, weight decay) and with Adam (L2 weight decay).

Tolerances: both engines compute in float32 and differ only in summation order and kernel
formulas, about 1e-7 relative per value. These runs are well conditioned (the loss falls
steadily, no step amplifies a difference): measured, the losses of all 100 steps agree to
2e-6 and every trained parameter to 1e-5 of its largest magnitude. The bounds below (1e-5 for
the first ten losses, 1e-4 for the last, 1e-3 for any step and parameter) leave a margin over
that and still catch a wrong gradient or update, which moves the loss by far more than 1e-3
within a few steps. BatchNormalization's running statistics are left out: only
torch's trainable parameters are compared.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("torch")

import torch_training as T  # noqa: E402 - needs torch

# the exporter's warnings about traced Python values and in-place ops
pytestmark = pytest.mark.filterwarnings(
    "ignore::torch.jit.TracerWarning", "ignore::UserWarning:torch.onnx"
)
STEPS = 100
BATCHES_PER_STEP = 10  # optimizer steps per session.run


@pytest.fixture(scope="module", autouse=True)
def _torch_setup() -> Iterator[None]:
    """One torch thread: its tiny steps gain nothing from two on a shared machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("kind", list(T.OPTIMIZERS))
@pytest.mark.parametrize("name", list(T.CASES))
def test_training_follows_torch(name: str, kind: str) -> None:
    case = T.CASES[name]
    xs, ys = case.data(STEPS)
    pyipu = T.pyipu_trainer(case, kind, BATCHES_PER_STEP)
    got = np.concatenate(
        [
            pyipu.run(xs[i : i + BATCHES_PER_STEP], ys[i : i + BATCHES_PER_STEP])
            for i in range(0, STEPS, BATCHES_PER_STEP)
        ]
    )
    reference = T.TorchTrainer(case, kind)
    initial = reference.parameters()
    trained = pyipu.parameters(list(initial))
    pyipu.close()
    want = np.array([reference.step(x, y) for x, y in zip(xs, ys, strict=True)])
    rel = np.abs(got - want) / np.abs(want)
    assert rel[:10].max() <= 1e-5, rel[:10]
    assert rel.max() <= 1e-3, (int(rel.argmax()), rel.max())
    assert rel[-1] <= 1e-4, (got[-1], want[-1])
    assert want[-10:].mean() < 0.9 * want[:10].mean()  # it learns: the comparison means something
    params = reference.parameters()
    for k, w in params.items():
        err = np.abs(trained[k] - w).max() / np.abs(w).max()
        assert err <= 1e-3, (k, err)
        assert not np.array_equal(trained[k], initial[k]), k  # read back after training


def test_the_export_keeps_training_mode_and_names() -> None:
    """The form the comparison relies on: BatchNormalization with the batch's statistics
    (training_mode=1), every parameter an initializer under its torch name."""
    case = T.CASES["resnet"]
    model = T.build(case)
    proto = T.export(case, model)
    bns = [n for n in proto.graph.node if n.op_type == "BatchNormalization"]
    assert len(bns) == 6
    assert all(any(a.name == "training_mode" and a.i == 1 for a in n.attribute) for n in bns)
    inits = {i.name for i in proto.graph.initializer}
    assert {k for k, _ in model.named_parameters()} <= inits
