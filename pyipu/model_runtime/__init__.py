"""Model Runtime's API (`model_runtime`): the Session + QueueManager layer under Runner."""

from pyipu.model_runtime.predicates import (
    AnchorCallbackPolicy,
    or_bind,
    pred_names,
    pred_program_flow_main,
    pred_streamed,
)
from pyipu.model_runtime.session import (
    InputQueue,
    OutputQueue,
    QueueManager,
    Session,
    SessionConfig,
    StepResult,
)
from pyipu.runtime.device import Device, DeviceManager

__all__ = [
    "AnchorCallbackPolicy",
    "Device",
    "DeviceManager",
    "InputQueue",
    "OutputQueue",
    "QueueManager",
    "Session",
    "SessionConfig",
    "StepResult",
    "or_bind",
    "pred_names",
    "pred_program_flow_main",
    "pred_streamed",
]
