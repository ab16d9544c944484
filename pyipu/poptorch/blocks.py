"""Multi-IPU annotations: blocks (`BeginBlock`, `Block`, `BlockFunction`), stages, phases and
execution strategies, turned into the ONNX node attributes `__ipu_number` and
`__pipeline_stage` that pyipu's compiler places nodes by (pyipu/compiler/staging.py).

While a model is lowered (torch.onnx's tracer runs `forward`), a block opens a tracer scope
named `__poptorch_block<k>` (`Block`, `BlockFunction`) or `__poptorch_begin<k>` (the layer a
`BeginBlock` wraps), so every ONNX node's name carries the blocks it was traced in. `place`
then walks the nodes in trace order: a node takes the innermost block named in its own name,
and one outside every block takes the block before it (PopTorch's rule: layers between
annotations inherit the previous block; the first ones are on IPU 0).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import onnx
from onnx import helper

from pyipu.compiler.staging import IPU_ATTR, STAGE_ATTR
from pyipu.poptorch.enums import AutoStage, Liveness
from pyipu.poptorch.errors import OptionError, UnsupportedFeatureError


@dataclass(frozen=True)
class BlockSpec:
    user_id: str | None
    ipu_id: int | None


# the blocks opened while a model is being lowered (None outside lowering); index = scope number
_TRACED: list[BlockSpec] | None = None
_SCOPE = re.compile(r"__poptorch_(?:block|begin)(\d+)")


def _tracing_state() -> Any:
    import torch

    return torch._C._get_tracing_state() if _TRACED is not None else None


def _open(spec: BlockSpec, kind: str) -> bool:
    state = _tracing_state()
    if state is None or _TRACED is None:
        return False
    _TRACED.append(spec)
    state.push_scope(f"PoptorchBlock::__poptorch_{kind}{len(_TRACED) - 1}")
    return True


def _close(opened: bool) -> None:
    state = _tracing_state()
    if opened and state is not None:
        state.pop_scope()


class Block:
    """`with poptorch.Block(user_id=None, ipu_id=None):` places what runs inside on a block."""

    _auto_id = False
    _next_id = 0

    @staticmethod
    def useAutoId() -> None:  # noqa: N802
        """Blocks without a user_id are named "0", "1", ... in the order they are created."""
        Block._auto_id = True
        Block._next_id = 0

    def __init__(self, user_id: str | None = None, ipu_id: int | None = None) -> None:
        self.spec = _spec(user_id, ipu_id)
        self._opened: list[bool] = []

    def __enter__(self) -> Block:
        self._opened.append(_open(self.spec, "block"))
        return self

    def __exit__(self, *exc: object) -> None:
        _close(self._opened.pop())


def _spec(user_id: Any, ipu_id: Any) -> BlockSpec:
    if ipu_id is not None and (not isinstance(ipu_id, int) or ipu_id < 0):
        raise OptionError(f"ipu_id must be an int >= 0, got {ipu_id!r}")
    if user_id is None and Block._auto_id:
        user_id = str(Block._next_id)
        Block._next_id += 1
    return BlockSpec(None if user_id is None else str(user_id), ipu_id)


def BeginBlock(layer: Any, user_id: str | None = None, ipu_id: int | None = None) -> Any:  # noqa: N802
    """Start a block at `layer` (a torch Module): it and every layer after it, up to the next
    annotation, run on that block. Returns the layer itself, annotated."""
    import torch

    if not isinstance(layer, torch.nn.Module):
        raise OptionError(f"BeginBlock wraps a torch.nn.Module, got {type(layer).__name__}")
    spec = _spec(user_id, ipu_id)
    for handle in getattr(layer, "_poptorch_block_hooks", ()):
        handle.remove()  # annotating again replaces the block
    opened: list[bool] = []

    def pre(_module: Any, _inputs: Any) -> None:
        opened.append(_open(spec, "begin"))

    def post(_module: Any, _inputs: Any, _output: Any) -> None:
        _close(opened.pop())

    layer.__dict__["_poptorch_block_hooks"] = (
        layer.register_forward_pre_hook(pre),
        layer.register_forward_hook(post),
    )
    layer.__dict__["_poptorch_block"] = spec
    return layer


def BlockFunction(user_id: str | None = None, ipu_id: int | None = None) -> Callable:  # noqa: N802
    """Decorator: everything the function runs is in one block."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with Block(user_id, ipu_id):
                return fn(*args, **kwargs)

        return run

    return wrap


class Stage:
    """`Stage(*user_ids).ipu(n)`: blocks that form one pipeline stage, on IPU n."""

    def __init__(self, *block_ids: str) -> None:
        self.blocks = [str(b) for b in block_ids]
        self._ipu: int | None = None

    def ipu(self, ipu: int) -> Stage:
        self._ipu = int(ipu)
        return self


class Phase:
    """A group of stages run together (phased execution only)."""

    def __init__(self, *stages: Stage | Sequence[Stage]) -> None:
        self.stages = [s for x in stages for s in ([x] if isinstance(x, Stage) else x)]

    def ipus(self, *ipus: int) -> Phase:
        for stage, ipu in zip(self.stages, ipus, strict=False):
            stage.ipu(ipu)
        return self


class _Strategy:
    pipelined = True

    def __init__(self, *args: Any) -> None:
        self.auto = AutoStage.SameAsIpu
        self.stages: list[Stage] = []
        for a in args:
            if isinstance(a, AutoStage):
                self.auto = a
            elif isinstance(a, Stage):
                self.stages.append(a)
            elif isinstance(a, Phase):
                self.stages.extend(a.stages)
            elif isinstance(a, (list, tuple)):
                self.stages.extend(s for s in a if isinstance(s, Stage))
            else:
                raise OptionError(f"{type(self).__name__}: unexpected argument {a!r}")

    def stage(self, index: int) -> Stage:
        return self.stages[index]


class PipelinedExecution(_Strategy):
    """Each stage on its own IPU, micro-batches streaming through them (the default)."""


class ShardedExecution(_Strategy):
    """The stages run one after another on their IPUs (no pipelining)."""

    pipelined = False


class _Phased(_Strategy):
    def __init__(self, *phases: Phase | Sequence[Stage]) -> None:
        self.phases = [p if isinstance(p, Phase) else Phase(*p) for p in phases]
        super().__init__(*self.phases)
        self.liveness = Liveness.AlwaysLive

    def phase(self, index: int) -> Phase:
        return self.phases[index]

    def setTensorsLiveness(self, liveness: Liveness) -> None:  # noqa: N802
        self.liveness = liveness


class SerialPhasedExecution(_Phased):
    """Accepted as an option; compiling with it is refused (pyipu has no phased execution)."""


class ParallelPhasedExecution(_Phased):
    """Accepted as an option; compiling with it is refused (pyipu has no phased execution)."""


@dataclass
class Placement:
    num_ipus: int  # IPUs the annotations use (0 when the model has none)
    num_stages: int
    pipelined: bool


def place(model: onnx.ModelProto, blocks: Sequence[BlockSpec], strategy: _Strategy) -> Placement:
    """Write `__ipu_number` / `__pipeline_stage` on every node of `model` from the blocks traced
    into the node names; no attributes when the model has no block."""
    if not blocks:
        return Placement(0, 1, False)
    if isinstance(strategy, _Phased):
        raise UnsupportedFeatureError(
            f"{type(strategy).__name__} is not supported: pyipu keeps every weight on its IPU "
            "(use PipelinedExecution or ShardedExecution)",
            "setExecutionStrategy",
        )
    named = {b for s in strategy.stages for b in s.blocks}
    default = BlockSpec(None, 0)
    current = default
    stage_of: dict[BlockSpec, tuple[int, int]] = {}
    last_stage = -1
    for node in model.graph.node:
        found = _SCOPE.findall(node.name)
        if found:
            current = blocks[int(found[-1])]
        if current not in stage_of:
            stage_of[current] = _stage(current, strategy, named, last_stage)
        ipu, stage = stage_of[current]
        last_stage = stage
        del_attrs = [a for a in node.attribute if a.name in (IPU_ATTR, STAGE_ATTR)]
        for a in del_attrs:
            node.attribute.remove(a)
        node.attribute.extend(
            [helper.make_attribute(IPU_ATTR, ipu), helper.make_attribute(STAGE_ATTR, stage)]
        )
    ipus = 1 + max(i for i, _ in stage_of.values())
    return Placement(ipus, len({s for _, s in stage_of.values()}), strategy.pipelined)


def _stage(
    block: BlockSpec, strategy: _Strategy, named: set[str], last_stage: int
) -> tuple[int, int]:
    """(IPU, stage) of a block."""
    if strategy.stages and block.user_id is not None and block.user_id in named:
        for k, s in enumerate(strategy.stages):
            if block.user_id in s.blocks:
                ipu = s._ipu if s._ipu is not None else block.ipu_id
                return (ipu if ipu is not None else 0), k
    if strategy.stages and block.user_id is not None:
        raise OptionError(
            f"block {block.user_id!r} is in none of the execution strategy's stages "
            f"({[s.blocks for s in strategy.stages]})"
        )
    ipu = block.ipu_id if block.ipu_id is not None else 0
    if strategy.auto == AutoStage.AutoIncrement:
        return ipu, last_stage + 1
    return ipu, ipu
