"""poptorch.Options (and its config files), poptorch.DataLoader."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pyipu import poptorch  # noqa: E402


def test_guide_config_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "poptorch.conf"
    conf.write_text(
        "deviceIterations(1)\n"
        "setExecutionStrategy(poptorch.ShardedExecution())\n"
        "replicationFactor(1)\n"
        "enableSyntheticData(True)\n"
        "\n"
        "# a comment, then grouped and enum-valued options\n"
        "Training.gradientAccumulation(4)\n"
        "outputMode(poptorch.OutputMode.EveryN, 2)\n"
        "setExecutionStrategy(PipelinedExecution(AutoStage.AutoIncrement))\n"
    )
    opts = poptorch.Options()
    assert opts.loadFromFile(conf) is opts
    assert opts.device_iterations == 1 and opts.gradient_accumulation == 4
    assert opts.output_mode == poptorch.OutputMode.EveryN and opts.output_return_period == 2
    assert isinstance(opts.execution_strategy, poptorch.PipelinedExecution)
    assert opts.execution_strategy.auto == poptorch.AutoStage.AutoIncrement
    assert opts.toDict()["synthetic_data"] is True


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("deviceIterations(0)", "deviceIterations must be an int >= 1"),
        ("noSuchOption(1)", "no option 'noSuchOption'"),
        ("__class__(1)", "no option"),
        ("deviceIterations(__import__('os').getpid())", "literals"),
        ("deviceIterations(open('x'))", "unknown name"),
        ("replicationFactor(2); deviceIterations(2)", "not an option call"),
        ("deviceIterations = 3", "not an option call"),
        ("setExecutionStrategy(poptorch.Options())", "unknown name"),
        ("deviceIterations(1, 2, 3)", "takes"),
    ],
)
def test_config_files_are_parsed_never_run(tmp_path, line: str, match: str) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "bad.conf"
    conf.write_text(line + "\n")
    with pytest.raises(poptorch.OptionError, match=match) as e:
        poptorch.Options().loadFromFile(conf)
    assert str(conf) in str(e.value) or "must be" in str(e.value)


def test_missing_config_file_is_an_option_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(poptorch.OptionError, match="No such file"):
        poptorch.Options().loadFromFile(tmp_path / "absent.conf")


def test_setters_chain_and_check_their_values() -> None:
    opts = poptorch.Options()
    same = (
        opts.deviceIterations(2)
        .replicationFactor(2)
        .autoRoundNumIPUs(True)
        .randomSeed(5)
        .useIpuModel(True)
        .enableExecutableCaching(None)
    )
    assert same is opts and opts.batch_factor(False) == 4
    opts.Training.gradientAccumulation(3)
    assert opts.batch_factor(True) == 12 and opts.batch_factor(False) == 4
    opts.TensorLocations.numIOTiles(32)
    opts.Precision.setPartialsType(torch.half)
    opts.Jit.traceModel(True)
    opts._Popart.set("enableOutlining", False)
    clone = opts.clone()
    clone.deviceIterations(7)
    assert opts.device_iterations == 2
    with pytest.raises(poptorch.OptionError):
        opts.replicationFactor(0)
    with pytest.raises(poptorch.OptionError, match="EveryN"):
        opts.outputMode(poptorch.OutputMode.All, 3)
    with pytest.raises(poptorch.OptionError, match="PopART has no"):
        opts._Popart.set("noSuchOption", 1)
    with pytest.raises(poptorch.OptionError, match="one process"):
        opts.Distributed.configureProcessId(1, 2)
    with pytest.raises(poptorch.OptionError, match="loss_scaling"):
        opts.Training.setAutomaticLossScaling(True)
    with pytest.raises(poptorch.OptionError, match="input_group_size"):
        opts.inputReplicaGrouping(2, poptorch.CommGroupType.Consecutive)
    with pytest.raises(poptorch.OptionError, match="PipelinedExecution"):
        opts.setExecutionStrategy("pipelined")


def test_options_reach_the_compiled_session() -> None:
    opts = poptorch.Options().replicationFactor(2)
    opts.TensorLocations.numIOTiles(16)
    model = torch.nn.Linear(3, 2).eval()
    wrapped = poptorch.inferenceModel(model, opts)
    x = torch.randn(4, 3)
    torch.testing.assert_close(wrapped(x), model(x).detach())
    so = wrapped._session.options
    assert so.replicatedGraphCount == 2 and so.enableReplicatedGraphs and so.numIOTiles == 16


def test_cache_dir_from_the_environment(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("POPTORCH_CACHE_DIR", str(tmp_path))
    assert poptorch.Options().toDict()["cache_path"] == str(tmp_path)
    monkeypatch.setenv("POPTORCH_IPU_MODEL", "1")
    assert poptorch.Options().toDict()["use_ipu_model"] is True


class Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 50

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((3,), float(i)), torch.tensor([float(i * i)])


def test_data_loader_batches_one_call_of_the_model() -> None:
    opts = poptorch.Options().deviceIterations(2).replicationFactor(2)
    opts.Training.gradientAccumulation(3)
    loader = poptorch.DataLoader(opts, Squares(), batch_size=2, shuffle=False)
    assert loader.combinedBatchSize == 24
    batches = list(loader)
    assert len(batches) == 2 and batches[0][0].shape == (24, 3)  # drop_last by default

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.fc(x / 50)
            return out, torch.nn.functional.mse_loss(out, y / 2500)

    wrapped = poptorch.trainingModel(Model(), opts)
    for x, y in loader:
        out, loss = wrapped(x, y)
    assert out.shape == (4, 1) and loss.shape == (2,)  # Final: the last micro-batch per replica
    with pytest.raises(poptorch.OptionError, match="batch_size"):
        poptorch.DataLoader(opts, Squares(), batch_size=0)
