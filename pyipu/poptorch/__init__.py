"""PopTorch's Python API on pyipu: a PopTorch program runs after `import poptorch` becomes
`from pyipu import poptorch` (docs/poptorch.md). Needs torch.

A wrapped model is lowered to ONNX by torch.onnx and compiled by pyipu's PopART front end:
inference through an `InferenceSession`, training through a `TrainingSession` whose backward
pass and optimizer are pyipu's (torch autograd does not run).

Example:
    >>> import torch
    >>> from pyipu import poptorch
    >>> model = torch.nn.Linear(4, 2).eval()
    >>> out = poptorch.inferenceModel(model)(torch.ones(3, 4))
    >>> out.shape
    torch.Size([3, 2])
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

try:
    import torch
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "pyipu.poptorch needs PyTorch: pip install torch (CPU build; see README)"
    ) from e

from pyipu.poptorch import enums, optim
from pyipu.poptorch._executor import PoplarExecutor, _metadata
from pyipu.poptorch._lowering import identity_loss, isRunningOnIpu
from pyipu.poptorch.blocks import (
    BeginBlock,
    Block,
    BlockFunction,
    ParallelPhasedExecution,
    Phase,
    PipelinedExecution,
    SerialPhasedExecution,
    ShardedExecution,
    Stage,
)
from pyipu.poptorch.data import DataLoader
from pyipu.poptorch.enums import (
    AutoStage,
    CommGroupType,
    ConnectionType,
    DataLoaderMode,
    Liveness,
    MatMulSerializationMode,
    MeanReductionStrategy,
    MultiConvPlanType,
    OutputMode,
    ReductionType,
    SyncPattern,
    VariableRetrievalMode,
)
from pyipu.poptorch.errors import (
    Error,
    InputDTypeError,
    InputShapeError,
    OptionError,
    RecoverableError,
    UnrecoverableError,
    UnsupportedFeatureError,
)
from pyipu.poptorch.ops import (
    MultiConv,
    custom_op,
    dynamic_slice,
    dynamic_update,
    ipu_print_tensor,
    nop,
    serializedMatMul,
    set_available_memory,
)
from pyipu.poptorch.options import Options, TensorLocationSettings

__all__ = [
    "AutoStage",
    "BeginBlock",
    "Block",
    "BlockFunction",
    "CommGroupType",
    "ConnectionType",
    "DataLoader",
    "DataLoaderMode",
    "Error",
    "InputDTypeError",
    "InputShapeError",
    "Liveness",
    "MatMulSerializationMode",
    "MultiConv",
    "MultiConvPlanType",
    "MeanReductionStrategy",
    "OptionError",
    "Options",
    "OutputMode",
    "ParallelPhasedExecution",
    "Phase",
    "PipelinedExecution",
    "PoplarExecutor",
    "RecoverableError",
    "ReductionType",
    "SerialPhasedExecution",
    "ShardedExecution",
    "Stage",
    "SyncPattern",
    "TensorLocationSettings",
    "UnrecoverableError",
    "UnsupportedFeatureError",
    "VariableRetrievalMode",
    "custom_op",
    "dynamic_slice",
    "dynamic_update",
    "enums",
    "identity_loss",
    "inferenceModel",
    "ipuHardwareIsAvailable",
    "ipuHardwareVersion",
    "ipu_print_tensor",
    "isRunningOnIpu",
    "load",
    "nop",
    "optim",
    "serializedMatMul",
    "set_available_memory",
    "setLogLevel",
    "trainingModel",
]


def inferenceModel(model: Any, options: Options | None = None) -> PoplarExecutor:  # noqa: N802
    """Wrap `model` for inference on pyipu (call `model.eval()` first)."""
    return PoplarExecutor(model, options, training=False)


def trainingModel(  # noqa: N802
    model: Any, options: Options | None = None, optimizer: torch.optim.Optimizer | None = None
) -> PoplarExecutor:
    """Wrap `model` for training on pyipu: each call runs forward, backward and the optimizer
    step (SGD with lr 0.01 unless `optimizer` is given). The model returns its loss, or a tuple
    whose last element is the loss (or marks it with `identity_loss`)."""
    return PoplarExecutor(model, options, training=True, optimizer=optimizer)


def load(
    filename: str | os.PathLike, edit_opts_fn: Callable[[Options], None] | None = None
) -> PoplarExecutor:
    """Wrap again the model of a `compileAndExport` file (exported with export_model=True) and
    run its executable. The file holds a pickled model: load only files you trust."""
    from pyipu.compiler.executable import Executable

    exe = Executable.open(filename)
    meta = _metadata(exe, filename)
    if meta["model"] is None:
        raise Error(
            f"{os.fspath(filename)!r} was exported with export_model=False: wrap the model "
            "again and call loadExecutable()",
            type="poptorch_python_error",
            location="load",
        )
    opts = meta["options"]
    if edit_opts_fn is not None:
        edit_opts_fn(opts)
    model = meta["model"]
    model.train(meta["mode"])
    wrapper = PoplarExecutor(model, opts, meta["training"], meta["optimizer"])
    wrapper.loadExecutable(filename)
    return wrapper


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:  # noqa: N802
    """pyipu's virtual IPUs are always available."""
    return num_ipus >= 1


def ipuHardwareVersion() -> int:  # noqa: N802
    """The IPU version pyipu models (2: the GC200)."""
    return 2


def setLogLevel(level: str | int) -> None:  # noqa: N802
    """POPTORCH_LOG_LEVEL's levels mapped onto pyipu's log level."""
    import logging

    names = {"TRACE_ALL": 5, "TRACE": 5, "DEBUG": 10, "INFO": 20, "WARN": 30, "ERR": 40, "OFF": 60}
    value = names.get(str(level).upper(), level) if isinstance(level, str) else level
    if not isinstance(value, int):
        raise OptionError(f"setLogLevel: one of {sorted(names)}, got {level!r}")
    logging.getLogger("pyipu").setLevel(value)
