"""Optimizer state on the device: a poptorch.optim optimizer's state_dict() reads it and
load_state_dict() writes it, so training resumes exactly where it stopped."""

from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")

from pyipu import poptorch  # noqa: E402


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor):  # type: ignore[no-untyped-def]
        out = self.net(x)
        return out, torch.nn.functional.mse_loss(out, y)


_G = torch.Generator().manual_seed(1)
DATA = [(torch.randn(4, 6, generator=_G), torch.randn(4, 2, generator=_G)) for _ in range(6)]
MAKE = {
    "adam": lambda p: poptorch.optim.Adam(p, lr=0.05),
    "sgd_momentum": lambda p: poptorch.optim.SGD(p, lr=0.05, momentum=0.9),
    "rmsprop": lambda p: poptorch.optim.RMSprop(p, lr=0.01, momentum=0.5),
}


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _continuous(kind: str) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Regressor()
    trainer = poptorch.trainingModel(model, optimizer=MAKE[kind](model.parameters()))
    for x, y in DATA:
        trainer(x, y)
    trainer.copyWeightsToHost()
    return _weights(model)


@pytest.mark.parametrize("kind", sorted(MAKE))
def test_the_guides_checkpoint_example_resumes_exactly(kind: str) -> None:
    torch.manual_seed(0)
    model = Regressor()
    optimizer = MAKE[kind](model.parameters())
    poptorch_model = poptorch.trainingModel(model, optimizer=optimizer)
    for x, y in DATA[:3]:
        poptorch_model(x, y)
    saved = io.BytesIO()
    torch.save({"optimizer_state_dict": optimizer.state_dict()}, saved)
    poptorch_model.destroy()
    new_optimizer = MAKE[kind](model.parameters())
    saved.seek(0)
    checkpoint = torch.load(saved)
    assert checkpoint["optimizer_state_dict"]["ipu_state"]["slots"]  # momentum, m, v, ...
    new_optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
    new_poptorch_model = poptorch.trainingModel(model, optimizer=new_optimizer)
    for x, y in DATA[3:]:
        new_poptorch_model(x, y)
    new_poptorch_model.copyWeightsToHost()
    for name, want in _continuous(kind).items():
        torch.testing.assert_close(model.state_dict()[name], want, rtol=1e-5, atol=1e-6)


def test_an_optimizer_keeps_its_state_after_destroy() -> None:
    """The guide wraps the model again with the first optimizer: it holds the state too."""
    torch.manual_seed(0)
    model = Regressor()
    optimizer = MAKE["adam"](model.parameters())
    trainer = poptorch.trainingModel(model, optimizer=optimizer)
    for x, y in DATA[:3]:
        trainer(x, y)
    trainer.destroy()
    assert optimizer.state_dict()["ipu_state"]["steps"] == 3
    again = poptorch.trainingModel(model, optimizer=optimizer)
    for x, y in DATA[3:]:
        again(x, y)
    again.copyWeightsToHost()
    for name, want in _continuous("adam").items():
        torch.testing.assert_close(model.state_dict()[name], want, rtol=1e-5, atol=1e-6)


def test_loading_into_a_live_model_rewinds_its_optimizer() -> None:
    torch.manual_seed(0)
    model = Regressor()
    optimizer = MAKE["sgd_momentum"](model.parameters())
    trainer = poptorch.trainingModel(model, optimizer=optimizer)
    trainer(*DATA[0])
    state = optimizer.state_dict()
    trainer.copyWeightsToHost()
    weights = _weights(model)
    first = trainer(*DATA[1])[1]
    model.load_state_dict(weights)  # rewind the weights ...
    trainer.copyWeightsToDevice()
    optimizer.load_state_dict(state)  # ... and the velocity
    again = trainer(*DATA[1])[1]
    torch.testing.assert_close(again, first)
    trainer.copyWeightsToHost()
    state2 = optimizer.state_dict()["ipu_state"]
    assert state2["steps"] == state["ipu_state"]["steps"] + 1


def test_state_of_another_optimizer_is_refused() -> None:
    torch.manual_seed(0)
    model = Regressor()
    adam = MAKE["adam"](model.parameters())
    trainer = poptorch.trainingModel(model, optimizer=adam)
    trainer(*DATA[0])
    state = adam.state_dict()
    trainer.destroy()
    sgd = MAKE["sgd_momentum"](model.parameters())
    sgd.load_state_dict({**sgd.state_dict(), "ipu_state": state["ipu_state"]})
    with pytest.raises(poptorch.OptionError, match="does not fit"):
        poptorch.trainingModel(model, optimizer=sgd)(*DATA[0])
