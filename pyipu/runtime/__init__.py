"""PopRT-compatible runtime (`poprt.runtime`): Runner, RuntimeConfig, DeviceManager."""

from pyipu.runtime.config import DeviceWaitConfig, RunnerType, RuntimeConfig
from pyipu.runtime.descriptors import DataDesc, InputDesc, OutputDesc
from pyipu.runtime.device import Device, DeviceManager
from pyipu.runtime.runner import Future, Runner

ModelRunner = Runner  # PopRT < 1.1 name, still used by older scripts

__all__ = [
    "DataDesc",
    "Device",
    "DeviceManager",
    "DeviceWaitConfig",
    "Future",
    "InputDesc",
    "ModelRunner",
    "OutputDesc",
    "Runner",
    "RunnerType",
    "RuntimeConfig",
]
