"""PopTorch's enumerations (`poptorch.OutputMode.All`, `poptorch.enums.CommGroupType`, ...)."""

from __future__ import annotations

import enum

# PopTorch's names for PopART's enumerations: the same values, one definition
from pyipu.popart.devices import DeviceConnectionType
from pyipu.popart.devices import SyncPattern as SyncPattern
from pyipu.popart.losses import ReductionType as ReductionType

ConnectionType = DeviceConnectionType


class OutputMode(enum.IntEnum):
    """What a call returns when it runs several batches: the last batch's outputs (Final), all
    of them (All), their sum (Sum), every N-th (EveryN); Default is All for inference and Final
    for training."""

    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


class MeanReductionStrategy(enum.IntEnum):
    Running = 0
    Post = 1
    PostAndLoss = 2


class DataLoaderMode(enum.IntEnum):
    Sync = 0
    Async = 1
    AsyncRebatched = 2


class CommGroupType(enum.IntEnum):
    All = 0
    Consecutive = 1
    Orthogonal = 2
    NoGrouping = 3


class VariableRetrievalMode(enum.IntEnum):
    OnePerGroup = 0
    AllReduceReplicas = 1
    AllReplicas = 2


class Liveness(enum.IntEnum):
    AlwaysLive = 0
    OffChipAfterFwd = 1
    OffChipAfterFwdNoOverlap = 2
    OffChipAfterEachPhase = 3


class AutoStage(enum.IntEnum):
    """How blocks without an explicit Stage become pipeline stages: stage = the block's IPU
    (SameAsIpu) or one more than the previous block's (AutoIncrement)."""

    SameAsIpu = 0
    AutoIncrement = 1


class MatMulSerializationMode(enum.Enum):
    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "none"


class MultiConvPlanType(enum.IntEnum):
    Parallel = 0
    Serial = 1
