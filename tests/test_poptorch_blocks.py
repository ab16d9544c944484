"""Multi-IPU annotations: BeginBlock, Block, BlockFunction, stages and strategies become the
`__ipu_number` / `__pipeline_stage` node attributes pyipu's compiler places nodes by."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pyipu import poptorch  # noqa: E402
from pyipu.compiler.staging import IPU_ATTR, STAGE_ATTR  # noqa: E402
from pyipu.poptorch import _lowering  # noqa: E402


class Network(torch.nn.Module):
    """The guide's Block example."""

    def __init__(self) -> None:
        super().__init__()
        self.layer1 = torch.nn.Linear(5, 10)
        self.layer2 = torch.nn.Linear(10, 5)
        self.layer3 = torch.nn.Linear(5, 5)
        self.layer4 = torch.nn.Linear(5, 5)
        self.act = torch.nn.ReLU()
        self.softmax = torch.nn.Softmax(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        poptorch.Block.useAutoId()
        with poptorch.Block(ipu_id=0):
            x = self.act(self.layer1(x))
        with poptorch.Block(ipu_id=1):
            x = self.act(self.layer2(x))
        with poptorch.Block(ipu_id=2):
            x = self.act(self.layer3(x))
            x = self.act(self.layer4(x))
        with poptorch.Block(ipu_id=3):
            return self.softmax(x)


class FunctionNetwork(Network):
    """The guide's BlockFunction example."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        poptorch.Block.useAutoId()
        x = self.block_one(x)
        x = self.block_two(x)
        return self.final_activation(x)

    @poptorch.BlockFunction(ipu_id=0)
    def block_one(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.layer2(self.act(self.layer1(x))))

    @poptorch.BlockFunction(ipu_id=1)
    def block_two(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.layer4(self.act(self.layer3(x))))

    @poptorch.BlockFunction(ipu_id=1)
    def final_activation(self, x: torch.Tensor) -> torch.Tensor:
        return self.softmax(x)


def _placement(model: torch.nn.Module, strategy=None) -> dict[str, tuple[int, int]]:  # type: ignore[no-untyped-def]
    low = _lowering.lower(
        model, (torch.rand(4, 5),), {}, 1, False, strategy or poptorch.PipelinedExecution()
    )
    out = {}
    for n in low.model.graph.node:
        attrs = {a.name: a.i for a in n.attribute}
        out[n.name] = (attrs[IPU_ATTR], attrs[STAGE_ATTR])
    return out


def _ipu_of(placement: dict[str, tuple[int, int]], layer: str) -> set[int]:
    return {v[0] for k, v in placement.items() if layer in k.split("/")}


@pytest.mark.parametrize("pipelined", [True, False])
def test_guide_block_example_runs_pipelined_or_sharded(pipelined: bool) -> None:
    model = Network()
    placed = _placement(model)
    assert [_ipu_of(placed, f"layer{k}") for k in (1, 2, 3, 4)] == [{0}, {1}, {2}, {2}]
    opts = poptorch.Options().deviceIterations(4)
    if not pipelined:
        opts.setExecutionStrategy(poptorch.ShardedExecution())
    x = torch.rand((4, 5))
    out = poptorch.inferenceModel(model, options=opts)(x)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-6)


def test_guide_block_function_example() -> None:
    model = FunctionNetwork()
    placed = _placement(model)
    assert [_ipu_of(placed, f"layer{k}") for k in (1, 2, 3, 4)] == [{0}, {0}, {1}, {1}]
    opts = poptorch.Options().deviceIterations(4)
    x = torch.rand((4, 5))
    torch.testing.assert_close(poptorch.inferenceModel(model, opts)(x), model(x))


def test_begin_block_layers_after_it_inherit_its_ipu() -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.Tanh()
    )
    model[2] = poptorch.BeginBlock(model[2], ipu_id=1)
    placed = _placement(model)
    ipus = [(name, v[0]) for name, v in placed.items()]
    first = next(i for i, (name, _) in enumerate(ipus) if "model.2" in name.split("/"))
    assert {ipu for _, ipu in ipus[:first]} == {0}
    assert {ipu for _, ipu in ipus[first:]} == {1}  # the Tanh after it too
    x = torch.rand(2, 5)
    opts = poptorch.Options().deviceIterations(2)
    torch.testing.assert_close(poptorch.inferenceModel(model, opts)(x), model(x))


def test_explicit_stages_and_auto_increment() -> None:
    class ThreeBlocks(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with poptorch.Block("A", ipu_id=0):
                x = x + 1
            with poptorch.Block("B", ipu_id=1):
                x = x * 2
            with poptorch.Block("C", ipu_id=0):
                return x - 3

    staged = _placement(
        ThreeBlocks(),
        poptorch.PipelinedExecution(
            poptorch.Stage("A").ipu(0), poptorch.Stage("B").ipu(1), poptorch.Stage("C").ipu(1)
        ),
    )
    assert set(staged.values()) == {(0, 0), (1, 1), (1, 2)}
    auto = _placement(ThreeBlocks(), poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
    assert set(auto.values()) == {(0, 0), (1, 1), (0, 2)}
    with pytest.raises(poptorch.OptionError, match="'C' is in none"):
        _placement(ThreeBlocks(), poptorch.ShardedExecution(poptorch.Stage("A", "B")))


def test_ipu_count_must_be_a_power_of_two_unless_rounded() -> None:
    class ThreeIpus(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with poptorch.Block(ipu_id=0):
                x = x + 1
            with poptorch.Block(ipu_id=1):
                x = x * 2
            with poptorch.Block(ipu_id=2):
                return x - 3

    x = torch.rand(6, 2)
    opts = poptorch.Options().deviceIterations(6)  # pyipu: a multiple of the 3 stages
    with pytest.raises(poptorch.OptionError, match="power of 2"):
        poptorch.inferenceModel(ThreeIpus(), opts)(x)
    opts.autoRoundNumIPUs(True)
    torch.testing.assert_close(poptorch.inferenceModel(ThreeIpus(), opts)(x), (x + 1) * 2 - 3)


def test_phased_execution_is_refused() -> None:
    strategy = poptorch.SerialPhasedExecution(
        poptorch.Phase(poptorch.Stage("A")), poptorch.Phase(poptorch.Stage("B"))
    )
    strategy.phase(0).ipus(0)

    class TwoBlocks(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with poptorch.Block("A"):
                x = x + 1
            with poptorch.Block("B"):
                return x * 2

    opts = poptorch.Options().setExecutionStrategy(strategy)
    with pytest.raises(poptorch.UnsupportedFeatureError, match="SerialPhasedExecution"):
        poptorch.inferenceModel(TwoBlocks(), opts)(torch.rand(2))


def test_blocks_outside_lowering_do_nothing() -> None:
    model = Network()
    x = torch.rand(3, 5)
    assert model(x).shape == (3, 5)  # CPU run: no tracer scope opened


@pytest.mark.parametrize("strategy", ["pipelined", "sharded"])
def test_blocks_train_on_virtual_ipus_as_torch_does(strategy: str) -> None:
    """A trainingModel with two blocks, 4 micro-batches accumulated (PopTorch's mean), trains
    like torch does: pyipu's backward pass on the blocks' IPUs, pipelined or one after another."""
    import copy

    class TwoBlocks(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = poptorch.BeginBlock(torch.nn.Linear(8, 16), ipu_id=0)
            self.b = poptorch.BeginBlock(torch.nn.Linear(16, 4), ipu_id=1)
            self.loss = torch.nn.MSELoss()

        def forward(self, x, y):  # noqa: ANN001, ANN201
            out = self.b(torch.relu(self.a(x)))
            return out, self.loss(out, y)

    torch.manual_seed(0)
    model = TwoBlocks()
    ref = copy.deepcopy(model)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(4)
    opts.setExecutionStrategy(
        poptorch.PipelinedExecution() if strategy == "pipelined" else poptorch.ShardedExecution()
    )
    trained = poptorch.trainingModel(
        model, opts, optimizer=torch.optim.SGD(model.parameters(), lr=0.05)
    )
    x, y = torch.randn(8, 8), torch.randn(8, 4)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for _ in range(3):
        trained(x, y)
        opt.zero_grad()
        for k in range(4):
            (ref(x[2 * k : 2 * k + 2], y[2 * k : 2 * k + 2])[1] / 4).backward()
        opt.step()
    trained.copyWeightsToHost()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
