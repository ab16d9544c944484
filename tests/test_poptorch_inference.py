"""poptorch.inferenceModel: the guide's examples (MobileNetV2 written out in
poptorch_models.py, with random weights; half precision), batching and output modes, typed
errors for changed inputs, isRunningOnIpu, export and load, the device calls."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from poptorch_models import ExampleModelWithLoss, mobilenet_v2  # noqa: E402

from pyipu import errors, poptorch  # noqa: E402


def test_guide_mobilenet_v2_example() -> None:
    torch.manual_seed(0)
    picture_of_a_cat_here = torch.randn([1, 3, 224, 224])
    model = mobilenet_v2(weights=None)
    model.train(False)
    inference_model = poptorch.inferenceModel(model)
    out_tensor = inference_model(picture_of_a_cat_here)
    top_five_classes = torch.topk(torch.softmax(out_tensor, 1), 5)
    native_out = model(picture_of_a_cat_here)
    native_top_five_classes = torch.topk(torch.softmax(native_out, 1), 5)
    assert any(top_five_classes[1][0] == native_top_five_classes[1][0])
    torch.testing.assert_close(out_tensor, native_out, rtol=1e-4, atol=1e-5)
    assert not model.training  # lowering leaves the modules' modes as they were


def test_guide_half_example() -> None:
    model = torch.nn.Linear(1, 10)
    model.half()
    t1 = torch.tensor([1.0]).half()
    opts = poptorch.Options()
    inference_model = poptorch.inferenceModel(model, opts)
    out = inference_model(t1)
    assert out.dtype == torch.half
    torch.testing.assert_close(out, model(t1), rtol=1e-3, atol=1e-3)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()


@pytest.mark.parametrize(
    ("mode", "period", "expected"),
    [
        (poptorch.OutputMode.All, None, lambda y: y),
        (poptorch.OutputMode.Final, None, lambda y: y[-2:]),
        (poptorch.OutputMode.Sum, None, lambda y: y.reshape(4, 2, 3).sum(0)),
        (poptorch.OutputMode.EveryN, 2, lambda y: y.reshape(4, 2, 3)[1::2].reshape(-1, 3)),
    ],
)
def test_device_iterations_and_output_modes(mode, period, expected) -> None:  # type: ignore[no-untyped-def]
    model = _mlp()
    opts = poptorch.Options().deviceIterations(4).outputMode(mode, period)
    x = torch.randn(8, 4)
    out = poptorch.inferenceModel(model, opts)(x)
    torch.testing.assert_close(out, expected(model(x)).detach(), rtol=1e-5, atol=1e-6)


def test_replication_splits_the_batch_over_replicas() -> None:
    model = _mlp()
    opts = poptorch.Options().deviceIterations(2).replicationFactor(2)
    x = torch.randn(8, 4)
    out = poptorch.inferenceModel(model, opts)(x)
    assert out.shape == (8, 3)
    torch.testing.assert_close(out, model(x).detach(), rtol=1e-5, atol=1e-6)


def test_changed_inputs_raise_typed_errors() -> None:
    wrapped = poptorch.inferenceModel(_mlp(), poptorch.Options().deviceIterations(2))
    wrapped(torch.randn(8, 4))
    with pytest.raises(poptorch.InputShapeError, match=r"compiled for \[8, 4\]") as e:
        wrapped(torch.randn(6, 4))
    assert isinstance(e.value, errors.ShapeError) and isinstance(e.value, poptorch.Error)
    with pytest.raises(poptorch.InputDTypeError, match="float64"):
        wrapped(torch.randn(8, 4, dtype=torch.float64))
    with pytest.raises(poptorch.InputShapeError, match="structure"):
        wrapped(torch.randn(8, 4), torch.randn(8, 4))
    with pytest.raises(poptorch.InputShapeError, match="multiple of 2"):
        poptorch.inferenceModel(_mlp(), poptorch.Options().deviceIterations(2))(torch.randn(5, 4))


def test_is_running_on_ipu_picks_the_path_while_lowering() -> None:
    class Network(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if poptorch.isRunningOnIpu():
                return x * 2
            return x * 3

    assert not poptorch.isRunningOnIpu()
    x = torch.ones(2)
    assert torch.equal(poptorch.inferenceModel(Network())(x), x * 2)
    assert torch.equal(Network()(x), x * 3)


def test_nested_inputs_keywords_and_outputs() -> None:
    class Nested(torch.nn.Module):
        def forward(self, pair, scale=None):  # type: ignore[no-untyped-def]
            a, b = pair
            return {"sum": a + b, "parts": (a * scale, b * scale), "tag": "kept"}

    a, b, s = torch.randn(2, 3), torch.randn(2, 3), torch.tensor(2.0)
    out = poptorch.inferenceModel(Nested())((a, b), scale=s)
    assert out["tag"] == "kept"
    torch.testing.assert_close(out["sum"], a + b)
    torch.testing.assert_close(out["parts"][1], b * 2)


def test_device_calls_and_latency() -> None:
    model = _mlp()
    wrapped = poptorch.inferenceModel(model)
    assert not wrapped.isCompiled()
    x = torch.randn(3, 4)
    wrapped.compile(x)
    assert wrapped.isCompiled() and wrapped.isAttachedToDevice()
    wrapped.detachFromDevice()
    assert not wrapped.isAttachedToDevice()
    torch.testing.assert_close(wrapped(x), model(x).detach())
    lo, hi, mean = wrapped.getLatency()
    assert 0 < lo <= mean <= hi
    wrapped.destroy()
    assert not wrapped.isCompiled()
    with pytest.raises(poptorch.Error, match="not compiled"):
        wrapped.attachToDevice()
    torch.testing.assert_close(wrapped(x), model(x).detach())


def test_compile_and_export_then_load(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = ExampleModelWithLoss()
    input, target = torch.randn(10), torch.randn(10)  # noqa: A001
    training_model = poptorch.trainingModel(model)
    training_model.compileAndExport(tmp_path / "training.poptorch", input, target)
    model.eval()
    validation_model = poptorch.inferenceModel(model)
    validation_model.compileAndExport(tmp_path / "validation.poptorch", input)

    training = poptorch.load(tmp_path / "training.poptorch")
    validation = poptorch.load(tmp_path / "validation.poptorch")
    torch.testing.assert_close(validation(input), model(input))
    for _ in range(20):
        _, loss = training(input, target)
    torch.testing.assert_close(validation(input), model(input))  # not connected any more
    training.copyWeightsToHost()  # each loaded wrapper has its own copy of the model
    validation.model.load_state_dict(training.model.state_dict())
    validation.copyWeightsToDevice()
    trained = training.model
    trained.eval()
    torch.testing.assert_close(validation(input), trained(input), rtol=1e-5, atol=1e-6)

    # or connect them again: an inferenceModel of the loaded training model's model
    training = poptorch.load(tmp_path / "training.poptorch")
    connected = poptorch.inferenceModel(training)
    connected.model.eval()
    connected.loadExecutable(tmp_path / "validation.poptorch")
    for _ in range(5):
        training(input, target)
    expected = connected.model(input)  # the host pulls the trained weights
    torch.testing.assert_close(connected(input), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(poptorch.Error, match="trainingModel's executable"):
        poptorch.inferenceModel(training.model).loadExecutable(tmp_path / "training.poptorch")

    # export_model=False: wrap the model again and load the executable
    model2 = ExampleModelWithLoss()
    model2.eval()
    bare = poptorch.inferenceModel(model2)
    bare.compileAndExport(tmp_path / "bare.poptorch", input, export_model=False)
    with pytest.raises(poptorch.Error, match="export_model=False"):
        poptorch.load(tmp_path / "bare.poptorch")
    again = poptorch.inferenceModel(model2)
    again.loadExecutable(tmp_path / "bare.poptorch")
    torch.testing.assert_close(again(input), model2(input))


def test_edit_opts_fn_sees_the_loaded_options(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = _mlp()
    poptorch.inferenceModel(model).compileAndExport(tmp_path / "m.poptorch", torch.randn(2, 4))
    seen = []
    loaded = poptorch.load(tmp_path / "m.poptorch", edit_opts_fn=lambda o: seen.append(o))
    assert isinstance(seen[0], poptorch.Options)
    x = torch.randn(2, 4)
    torch.testing.assert_close(loaded(x), model(x).detach())


def test_error_classes_follow_poptorch() -> None:
    assert issubclass(poptorch.RecoverableError, poptorch.Error)
    assert issubclass(poptorch.UnrecoverableError, poptorch.Error)
    assert poptorch.Error is errors.Error
    e = errors.ResetRequiredError("step failed", recovery_action="IPU_RESET")
    assert isinstance(e, poptorch.RecoverableError) and e.recovery_action == "IPU_RESET"
    with pytest.raises(poptorch.Error) as info:
        poptorch.inferenceModel(_mlp())(torch.randn(2, 5))  # wrong width: torch refuses it
    assert info.value.message and info.value.type and info.value.location


def test_guide_buffer_examples() -> None:
    """A plain tensor attribute is frozen into the graph (pyipu: with the value the traced
    forward pass left in it); a registered buffer the forward pass modifies in place keeps its
    value on the device from call to call, and reaches the host with copyWeightsToHost."""

    class FrozenCounter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.i = torch.tensor([0.0], dtype=torch.float)

        def forward(self) -> torch.Tensor:
            self.i += 1
            return self.i

    counter = FrozenCounter()
    frozen = poptorch.inferenceModel(counter)
    first = frozen()
    assert torch.equal(frozen(), first) and torch.equal(frozen(), first)
    assert torch.equal(counter.i, torch.tensor([0.0]))  # lowering left the host as it was

    class CounterModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("i", torch.tensor([0.0], dtype=torch.float))

        def forward(self) -> torch.Tensor:
            self.i += 1
            return self.i

    model = CounterModel()
    poptorch_model = poptorch.inferenceModel(model)
    assert torch.equal(poptorch_model(), torch.tensor([1.0]))
    assert torch.equal(poptorch_model(), torch.tensor([2.0]))
    assert torch.equal(model.i, torch.tensor([0.0]))  # not copied implicitly
    poptorch_model.copyWeightsToHost()
    assert torch.equal(model.i, torch.tensor([2.0]))


def test_cycle_count_is_the_ipu_model_estimate_of_the_last_call() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU()).eval()
    plain = poptorch.inferenceModel(model)
    plain(torch.randn(2, 16))
    with pytest.raises(poptorch.Error, match="logCycleCount"):
        plain.cycleCount()
    counts = {}
    for iterations in (1, 4):
        opts = poptorch.Options().deviceIterations(iterations).logCycleCount(True)
        wrapped = poptorch.inferenceModel(model, opts)
        with pytest.raises(errors.InvalidStateError, match="not run yet"):
            wrapped.cycleCount()
        wrapped(torch.randn(2 * iterations, 16))
        counts[iterations] = wrapped.cycleCount()
        report = wrapped._session.getExecutable().report()
        assert counts[iterations] == iterations * report.step_cycles // report.batches_per_step
    assert counts[1] > 0 and counts[4] == 4 * counts[1]
