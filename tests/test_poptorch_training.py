"""poptorch.trainingModel: pyipu's backward pass and optimizers against torch's, weight sync
with the host model and sibling inference models, setOptimizer, batching options."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from poptorch_models import ExampleModelWithLoss  # noqa: E402

from pyipu import poptorch  # noqa: E402
from pyipu.poptorch import optim as poptorch_optim  # noqa: E402


def test_guide_training_example_matches_host_model_after_800_steps() -> None:
    """The guide's trainingModel example: MSE loss, 800 steps, host output within 1e-4."""
    torch.manual_seed(0)
    model = ExampleModelWithLoss()
    poptorch_model = poptorch.trainingModel(model)
    input = torch.randn(10)  # noqa: A001
    target = torch.randn(10)
    first = None
    for _ in range(800):
        poptorch_out, loss = poptorch_model(input, target)
        first = float(loss) if first is None else first
    assert float(loss) < first * 1e-3
    poptorch_model.copyWeightsToHost()
    model.eval()
    native_out = model(input)
    torch.testing.assert_close(native_out, poptorch_out, rtol=1e-04, atol=1e-04)


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(x)
        return out, torch.nn.functional.mse_loss(out, y)


OPTIMIZERS = {
    "sgd": lambda p, m: m.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "sgd_nesterov": lambda p, m: m.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda p, m: m.Adam(p, lr=0.01, weight_decay=1e-3),
    "adamw": lambda p, m: m.AdamW(p, lr=0.01),
    "rmsprop": lambda p, m: m.RMSprop(p, lr=0.01, momentum=0.5),
    "rmsprop_centered": lambda p, m: m.RMSprop(p, lr=0.01, centered=True),
}


def _data(steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(batch, 6, generator=g), torch.randn(batch, 2, generator=g))
            for _ in range(steps)]  # fmt: skip


def _torch_steps(model: Regressor, opt: torch.optim.Optimizer, data: list) -> list[float]:
    losses = []
    for x, y in data:
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
@pytest.mark.parametrize("namespace", ["torch", "poptorch"])
def test_optimizers_match_torch(kind: str, namespace: str) -> None:
    torch.manual_seed(0)
    model = Regressor()
    ref = copy.deepcopy(model)
    module = torch.optim if namespace == "torch" else poptorch_optim
    opt = OPTIMIZERS[kind](model.parameters(), module)
    data = _data(8, 4)
    wrapped = poptorch.trainingModel(model, optimizer=opt)
    losses = [float(wrapped(x, y)[1]) for x, y in data]
    expected = _torch_steps(ref, OPTIMIZERS[kind](ref.parameters(), torch.optim), data)
    assert losses == pytest.approx(expected, rel=1e-4, abs=1e-5)
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        # RMSprop steps by lr * g / sqrt(v): where g is near 0 its float rounding (which
        # differs between torch's CPU kernels and pyipu's) moves a weight by up to ~lr * 3e-3
        atol = 5e-5 if kind.startswith("rmsprop") else 1e-5
        torch.testing.assert_close(p, q, rtol=1e-4, atol=atol, msg=name)


def test_lamb_matches_its_cpu_step() -> None:
    torch.manual_seed(0)
    model = Regressor()
    ref = copy.deepcopy(model)
    data = _data(6, 4)
    wrapped = poptorch.trainingModel(
        model, optimizer=poptorch_optim.LAMB(model.parameters(), lr=0.01)
    )
    losses = [float(wrapped(x, y)[1]) for x, y in data]
    expected = _torch_steps(ref, poptorch_optim.LAMB(ref.parameters(), lr=0.01), data)
    assert losses == pytest.approx(expected, rel=1e-4, abs=1e-5)
    wrapped.copyWeightsToHost()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_loss_scaling_leaves_the_training_unchanged() -> None:
    torch.manual_seed(0)
    model = Regressor()
    ref = copy.deepcopy(model)
    data = _data(5, 4)
    opt = poptorch_optim.SGD(model.parameters(), lr=0.05, loss_scaling=512.0)
    wrapped = poptorch.trainingModel(model, optimizer=opt)
    losses = [float(wrapped(x, y)[1]) for x, y in data]
    expected = _torch_steps(ref, torch.optim.SGD(ref.parameters(), lr=0.05), data)
    assert losses == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_set_optimizer_changes_lr_between_steps_and_other_values_keep_state() -> None:
    torch.manual_seed(0)
    model = Regressor()
    ref = copy.deepcopy(model)
    data = _data(6, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    wrapped = poptorch.trainingModel(model, optimizer=opt)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    losses, expected = [], []
    for step, (x, y) in enumerate(data):
        if step == 2:  # the learning rate: fed at run time
            for o in (opt, ropt):
                o.param_groups[0]["lr"] = 0.01
            wrapped.setOptimizer(opt)
        if step == 4:  # the momentum: compiled in, so a recompile that keeps the velocity
            for o in (opt, ropt):
                o.param_groups[0]["momentum"] = 0.5
            wrapped.setOptimizer(opt)
        losses.append(float(wrapped(x, y)[1]))
        expected += _torch_steps(ref, ropt, [(x, y)])
    assert losses == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_identity_loss_marks_a_custom_loss() -> None:
    class CustomLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(5, 5)

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.fc(x)
            d = out - t
            return out, poptorch.identity_loss(d * d * 5, reduction="mean")

    torch.manual_seed(0)
    model = CustomLoss()
    ref = copy.deepcopy(model)
    x, t = torch.randn(3, 5), torch.randn(3, 5)
    wrapped = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01))
    ropt = torch.optim.SGD(ref.parameters(), lr=0.01)
    for _ in range(3):
        out, loss = wrapped(x, t)
        ropt.zero_grad()
        rout, rloss = ref(x, t)
        rloss.backward()
        ropt.step()
        assert float(loss) == pytest.approx(float(rloss.detach()), rel=1e-5)
    # outside lowering, identity_loss is its reduction
    assert float(poptorch.identity_loss(torch.ones(4), "sum")) == 4.0
    with pytest.raises(poptorch.Error, match="reduction"):
        poptorch.identity_loss(torch.ones(4), "max")


def test_accumulation_and_replication_average_the_gradients_as_torch() -> None:
    torch.manual_seed(1)
    model = Regressor()
    ref = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(2).replicationFactor(2)
    opts.Training.gradientAccumulation(3)
    opts.outputMode(poptorch.OutputMode.All)
    wrapped = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    )
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(5)
    for _ in range(2):
        x, y = torch.randn(2 * 3 * 2 * 4, 6, generator=g), torch.randn(48, 2, generator=g)
        out, loss = wrapped(x, y)
        assert out.shape == (48, 2) and loss.shape == (12,)
        xs, ys = x.reshape(2, 3, 2, 4, 6), y.reshape(2, 3, 2, 4, 2)
        for it in range(2):  # one optimizer step per device iteration: mean of 6 micro-batches
            ropt.zero_grad()
            total = sum(
                torch.nn.functional.mse_loss(ref.net(xs[it, a, r]), ys[it, a, r])
                for a in range(3)
                for r in range(2)
            )
            (total / 6).backward()
            ropt.step()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_frozen_parameters_are_not_trained() -> None:
    torch.manual_seed(0)
    model = Regressor()
    model.net[0].weight.requires_grad_(False)
    frozen = model.net[0].weight.detach().clone()
    before = model.net[2].weight.detach().clone()
    wrapped = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    for x, y in _data(3, 4):
        wrapped(x, y)
    assert torch.equal(model.net[0].weight, frozen)
    assert not torch.equal(model.net[2].weight, before)


def test_host_model_and_inference_model_follow_training_implicitly() -> None:
    """The guide's PoplarExecutor example: weights flow from the training wrapper to the host
    model when it is used and to a sibling inferenceModel when it runs; a change made on the
    host by other means needs copyWeightsToDevice."""
    torch.manual_seed(0)
    model = ExampleModelWithLoss()
    model.eval()
    inference = poptorch.inferenceModel(model)
    x, t = torch.randn(4, 10), torch.randn(4, 10)
    before = inference(x)
    model.train()
    training = poptorch.trainingModel(model)
    layer = model.fc  # a submodule kept across training steps sees the new values too
    for _ in range(5):
        training(x, t)
    torch.testing.assert_close(layer.weight, model.state_dict()["fc.weight"])
    after = inference(x)  # copies the trained weights implicitly
    assert not torch.allclose(before, after)
    model.eval()
    torch.testing.assert_close(after, model(x), rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # "train on the CPU": the wrapper does not see it until asked
        model.fc.bias.add_(1.0)
    torch.testing.assert_close(inference(x), after)
    inference.copyWeightsToDevice()
    torch.testing.assert_close(inference(x), after + 1.0, rtol=1e-5, atol=1e-5)


def test_wrapping_twice_for_training_needs_destroy() -> None:
    model = ExampleModelWithLoss()
    first = poptorch.trainingModel(model)
    first(torch.randn(10), torch.randn(10))
    with pytest.raises(poptorch.Error, match="destroy"):
        poptorch.trainingModel(model)
    first.destroy()
    assert not first.isCompiled()
    second = poptorch.trainingModel(model)
    second(torch.randn(10), torch.randn(10))


def test_detach_and_attach_keep_the_training_state() -> None:
    torch.manual_seed(0)
    model = Regressor()
    ref = copy.deepcopy(model)
    data = _data(4, 4)
    wrapped = poptorch.trainingModel(model, optimizer=torch.optim.Adam(model.parameters(), 0.01))
    losses = [float(wrapped(*data[0])[1]), float(wrapped(*data[1])[1])]
    assert wrapped.isAttachedToDevice()
    wrapped.detachFromDevice()
    assert not wrapped.isAttachedToDevice()
    with pytest.raises(poptorch.Error, match="not attached"):
        wrapped.detachFromDevice()
    wrapped.attachToDevice()
    losses.append(float(wrapped(*data[2])[1]))
    wrapped.detachFromDevice()
    losses.append(float(wrapped(*data[3])[1]))  # a call attaches again
    expected = _torch_steps(ref, torch.optim.Adam(ref.parameters(), 0.01), data)
    assert losses == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_a_training_model_must_return_a_scalar_loss() -> None:
    model = torch.nn.Linear(3, 2)
    with pytest.raises(poptorch.Error, match="loss"):
        poptorch.trainingModel(model)(torch.randn(4, 3))


def test_unsupported_optimizers_and_param_groups_are_refused() -> None:
    model = Regressor()
    with pytest.raises(poptorch.UnsupportedFeatureError, match="Adadelta"):
        poptorch.trainingModel(model, optimizer=torch.optim.Adadelta(model.parameters()))
    groups = [
        {"params": model.net[0].parameters(), "lr": 0.1},
        {"params": model.net[2].parameters(), "lr": 0.2},
    ]
    with pytest.raises(poptorch.UnsupportedFeatureError, match="param groups"):
        poptorch.trainingModel(model, optimizer=torch.optim.SGD(groups))


def test_batch_norm_trains_and_its_running_statistics_reach_the_host() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(6, 8)
            self.bn = torch.nn.BatchNorm1d(8)
            self.head = torch.nn.Linear(8, 2)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.head(torch.relu(self.bn(self.fc(x))))
            return out, torch.nn.functional.mse_loss(out, y)

    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    data = _data(4, 8)
    wrapped = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), 0.1))
    wrapped.compile(*data[0])
    assert torch.equal(model.bn.running_mean, ref.bn.running_mean)  # lowering moved nothing
    losses = [float(wrapped(x, y)[1]) for x, y in data]
    expected = _torch_steps(ref, torch.optim.SGD(ref.parameters(), 0.1), data)
    assert losses == pytest.approx(expected, rel=1e-4, abs=1e-6)
    torch.testing.assert_close(model.bn.running_mean, ref.bn.running_mean, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(model.bn.running_var, ref.bn.running_var, rtol=1e-4, atol=1e-6)


def test_guide_optimizer_attribute_update_example() -> None:
    """The guide's setOptimizer example: loss_scaling changed on the optimizer and its param
    group, applied by setOptimizer; the training follows plain SGD throughout."""
    torch.manual_seed(0)
    model = Regressor()
    ref = copy.deepcopy(model)
    data = _data(4, 4)
    opt = poptorch_optim.SGD(
        model.parameters(), lr=0.01, loss_scaling=2.0, use_combined_accum=False
    )
    assert opt.variable_attrs.isConstant("momentum") and not opt.variable_attrs.isConstant("lr")
    poptorch_model = poptorch.trainingModel(model, poptorch.Options(), opt)
    losses = [float(poptorch_model(*data[0])[1]), float(poptorch_model(*data[1])[1])]
    opt.loss_scaling = 1.0
    opt.param_groups[0]["loss_scaling"] = 1.0
    poptorch_model.setOptimizer(opt)
    losses += [float(poptorch_model(x, y)[1]) for x, y in data[2:]]
    expected = _torch_steps(ref, torch.optim.SGD(ref.parameters(), lr=0.01), data)
    assert losses == pytest.approx(expected, rel=1e-5, abs=1e-7)
    with pytest.raises(poptorch.Error, match="inferenceModel"):
        poptorch.inferenceModel(model).setOptimizer(opt)


def test_identity_loss_none_backpropagates_ones() -> None:
    class Elementwise(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return poptorch.identity_loss(self.fc(x) ** 2, reduction="none")

    torch.manual_seed(0)
    model = Elementwise()
    ref = copy.deepcopy(model)
    x = torch.randn(5, 4)
    wrapped = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), 0.01))
    loss = wrapped(x)
    assert loss.shape == (5, 3)
    torch.testing.assert_close(loss, (ref.fc(x) ** 2).detach())
    opt = torch.optim.SGD(ref.parameters(), 0.01)
    (ref.fc(x) ** 2).sum().backward()  # a gradient of ones
    opt.step()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_copy_weights_to_device_after_steps_sends_what_the_host_holds() -> None:
    """The host writes a parameter through a reference kept from before (no implicit pull): the
    device, ahead of the session's host copies, still receives it."""
    torch.manual_seed(0)
    model = Regressor()
    bias = model.net[0].bias
    trainer = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = torch.randn(4, 6), torch.randn(4, 2)
    trainer(x, y)
    trainer.copyWeightsToHost()
    saved = bias.detach().clone()
    trainer(x, y)  # the device moves on; the host is not read
    with torch.no_grad():
        bias.copy_(saved)
    trainer.copyWeightsToDevice()
    trainer.copyWeightsToHost()
    torch.testing.assert_close(model.net[0].bias.detach(), saved)
