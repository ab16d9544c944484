"""Virtual IPU devices of the IPU Model (`poprt.runtime.DeviceManager`)."""

from __future__ import annotations

from dataclasses import dataclass

from pyipu import _config
from pyipu.errors import InvalidArgumentError, NotFoundError
from pyipu.ipu_targets import TILES_PER_IPU, target


@dataclass(frozen=True)
class Device:
    """A group of virtual IPUs."""

    id: int
    num_ipus: int
    ipu_version: str
    tiles_per_ipu: int = TILES_PER_IPU

    def ipuVersion(self) -> str:  # noqa: N802 - Model Runtime's C++-style name
        return self.ipu_version


class DeviceManager:
    """Enumerates the virtual IPUs: $PYIPU_NUM_DEVICES of version $PYIPU_IPU_VERSION."""

    def get_num_devices(self) -> int:
        return _config.num_devices()

    def ipu_hardware_version(self) -> str:
        """ "ipu2" (GC200, IPU-M2000/Bow) or "ipu21" (C600), like PopRT."""
        return _config.ipu_version()

    def get_device(self, num_ipus: int = 1) -> Device:
        total = self.get_num_devices()
        if num_ipus < 1 or num_ipus & (num_ipus - 1):
            raise InvalidArgumentError(f"num_ipus must be a power of two >= 1, got {num_ipus}")
        if num_ipus > total:
            raise NotFoundError(f"no device with {num_ipus} IPUs: only {total} virtual IPUs exist")
        return Device(id=0, num_ipus=num_ipus, ipu_version=self.ipu_hardware_version())

    def create_ipu_model_device(
        self, num_ipus: int = 1, ipu_version: str | int = "ipu2", tiles_per_ipu: int = TILES_PER_IPU
    ) -> Device:
        """A simulated IPU of the IPU Model (Model Runtime's createIpuModelDevice). Versions may
        be given as PopEF integers (2, 21) or strings ("ipu2", "ipu21")."""
        try:
            version = target(ipu_version).ipu_version if ipu_version != "" else ""
        except KeyError:
            version = ""
        if not version:
            raise InvalidArgumentError(f"ipu_version must be ipu2 or ipu21, got {ipu_version!r}")
        if num_ipus < 1:
            raise InvalidArgumentError(f"num_ipus must be >= 1, got {num_ipus}")
        if not 1 <= tiles_per_ipu <= TILES_PER_IPU:
            raise InvalidArgumentError(
                f"tiles_per_ipu must be in 1..{TILES_PER_IPU}, got {tiles_per_ipu}"
            )
        return Device(id=0, num_ipus=num_ipus, ipu_version=version, tiles_per_ipu=tiles_per_ipu)

    def get_specific_device(self, device_id: int) -> Device:
        if not 0 <= device_id < self.get_num_devices():
            raise NotFoundError(f"no device with id {device_id}")
        return Device(id=device_id, num_ipus=1, ipu_version=self.ipu_hardware_version())
