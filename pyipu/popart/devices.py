"""PopART's `DeviceManager` and `DeviceInfo` over pyipu's virtual IPUs."""

from __future__ import annotations

import enum
from typing import Any

from pyipu.popart.errors import popart_exception
from pyipu.runtime.device import DeviceManager as _Devices


class DeviceType(enum.IntEnum):
    IpuModel = 0
    Cpu = 1
    Ipu = 2
    OfflineIpu = 3
    Sim = 4


class DeviceConnectionType(enum.IntEnum):
    Always = 0
    OnDemand = 1
    Never = 2


class SyncPattern(enum.IntEnum):
    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class DeviceInfo:
    """A device a session runs on: every kind is pyipu's CPU runtime with the IPU Model's
    estimates; `type` says what was asked for."""

    def __init__(
        self,
        num_ipus: int,
        kind: DeviceType,
        version: str,
        tiles: int,
        id: int = 0,  # noqa: A002 - PopART's name
    ) -> None:
        self.numIpus, self.type, self.version, self.tilesPerIPU, self.id = (
            num_ipus,
            kind,
            version,
            tiles,
            id,
        )
        self.isAttached = kind != DeviceType.OfflineIpu

    @property
    def ipuVersion(self) -> str:  # noqa: N802
        return self.version

    def attach(self) -> bool:
        self.isAttached = True
        return True

    def detach(self) -> None:
        self.isAttached = False

    def __repr__(self) -> str:
        return f"Device(type={self.type.name} numIpus={self.numIpus} version={self.version})"


class DeviceManager:
    """`DeviceManager().acquireAvailableDevice(numIpus)`, `createCpuDevice()`,
    `createIpuModelDevice({...})`, `createOfflineIPUDevice({...})`, `enumerateDevices()`."""

    def acquireAvailableDevice(  # noqa: N802
        self,
        numIpus: int = 1,  # noqa: N803
        tilesPerIpu: int = 0,  # noqa: N803
        pattern: SyncPattern = SyncPattern.Full,
        connectionType: DeviceConnectionType = DeviceConnectionType.Always,  # noqa: N803
        selectionCriterion: Any = None,  # noqa: N803
    ) -> DeviceInfo:
        try:
            dev = _Devices().get_device(int(numIpus))
        except Exception as e:
            raise popart_exception(f"acquireAvailableDevice({numIpus}): {e}") from None
        tiles = tilesPerIpu or dev.tiles_per_ipu
        return DeviceInfo(dev.num_ipus, DeviceType.Ipu, dev.ipu_version, tiles, dev.id)

    def acquireDeviceById(self, id: int, **_: Any) -> DeviceInfo:  # noqa: N802, A002
        total = _Devices().get_num_devices()
        if not 0 <= int(id) < total:
            raise popart_exception(f"no device with id {id} ({total} virtual IPUs)")
        return DeviceInfo(1, DeviceType.Ipu, _Devices().ipu_hardware_version(), 1472, int(id))

    def enumerateDevices(self, **_: Any) -> list[DeviceInfo]:  # noqa: N802
        version = _Devices().ipu_hardware_version()
        return [
            DeviceInfo(1, DeviceType.Ipu, version, 1472, i)
            for i in range(_Devices().get_num_devices())
        ]

    def createCpuDevice(self) -> DeviceInfo:  # noqa: N802
        return DeviceInfo(1, DeviceType.Cpu, _Devices().ipu_hardware_version(), 1472)

    def createIpuModelDevice(self, opts: dict[str, Any] | None = None) -> DeviceInfo:  # noqa: N802
        o = dict(opts or {})
        dev = _Devices().create_ipu_model_device(
            int(o.get("numIPUs", 1)),
            str(o.get("ipuVersion", "ipu2")),
            int(o.get("tilesPerIPU", 1472)),
        )
        return DeviceInfo(dev.num_ipus, DeviceType.IpuModel, dev.ipu_version, dev.tiles_per_ipu)

    def createOfflineIPUDevice(self, opts: dict[str, Any] | None = None) -> DeviceInfo:  # noqa: N802
        o = dict(opts or {})
        return DeviceInfo(
            int(o.get("numIPUs", 1)),
            DeviceType.OfflineIpu,
            str(o.get("ipuVersion", "ipu2")),
            int(o.get("tilesPerIPU", 1472)),
        )
