"""PopART's Python API on pyipu: a PopART script runs after `from popart import *` becomes
`from pyipu.popart import *` (docs/popart.md).

Sessions compile through pyipu's compiler into a PopEF executable and run on pyipu's runtime.

Example:
    >>> from pyipu.popart import *
    >>> builder = Builder()
    >>> x = builder.addInputTensor(TensorInfo("FLOAT", [2]), "x")
    >>> y = builder.aiOnnx.relu([x])
    >>> builder.addOutputTensor(y)
    >>> session = InferenceSession(
    ...     fnModel=builder.getModelProto(),
    ...     dataFlow=DataFlow(1, {y: AnchorReturnType("FINAL")}),
    ...     deviceInfo=DeviceManager().createCpuDevice(),
    ... )
    >>> session.prepareDevice()
    >>> anchors = session.initAnchorArrays()
    >>> session.run(PyStepIO({x: np.array([-1.0, 2.0], np.float32)}, anchors))
    >>> anchors[y]
    array([0., 2.], dtype=float32)
"""

import numpy as np  # noqa: F401 - the example's

from pyipu.popart.builder import Builder
from pyipu.popart.dataflow import (
    AnchorReturnType,
    AnchorReturnTypeId,
    DataFlow,
    ExchangeStrategy,
    TileSet,
)
from pyipu.popart.devices import (
    DeviceConnectionType,
    DeviceInfo,
    DeviceManager,
    DeviceType,
    SyncPattern,
)
from pyipu.popart.errors import (
    OutOfMemoryException,
    popart_exception,
    popart_internal_exception,
    poplar_exception,
)
from pyipu.popart.losses import ReductionType
from pyipu.popart.optimizers import (
    SGD,
    Adam,
    AdamMode,
    Adaptive,
    AdaptiveMode,
    ConstSGD,
    IdentityLoss,
    L1Loss,
    NllLoss,
    WeightDecayMode,
)
from pyipu.popart.options import SessionOptions, SyntheticDataMode, VirtualGraphMode
from pyipu.popart.session import InferenceSession, InputShapeInfo, Patterns
from pyipu.popart.stepio import PyStepIO, PyStepIOCallback, PyWeightsIO
from pyipu.popart.tensorinfo import TensorInfo
from pyipu.popart.training import TrainingSession

__all__ = [
    "SGD",
    "Adam",
    "AdamMode",
    "Adaptive",
    "AdaptiveMode",
    "ConstSGD",
    "IdentityLoss",
    "L1Loss",
    "NllLoss",
    "TrainingSession",
    "WeightDecayMode",
    "AnchorReturnType",
    "AnchorReturnTypeId",
    "Builder",
    "DataFlow",
    "DeviceConnectionType",
    "DeviceInfo",
    "DeviceManager",
    "DeviceType",
    "ExchangeStrategy",
    "InferenceSession",
    "InputShapeInfo",
    "OutOfMemoryException",
    "Patterns",
    "PyStepIO",
    "PyStepIOCallback",
    "PyWeightsIO",
    "ReductionType",
    "SessionOptions",
    "SyncPattern",
    "SyntheticDataMode",
    "TensorInfo",
    "TileSet",
    "VirtualGraphMode",
    "popart_exception",
    "popart_internal_exception",
    "poplar_exception",
]
