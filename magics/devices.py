"""`%ipu devices`: the virtual IPUs and the constants of their target, as a table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import html as H


@dataclass(frozen=True)
class DevicesResult:
    """The DeviceManager's view: how many virtual IPUs, which version, its constants."""

    num_devices: int
    ipu_version: str
    constants: dict[str, Any]

    def _repr_html_(self) -> str:
        head = [("virtual IPUs", self.num_devices), ("IPU version", self.ipu_version)]
        rows = [
            (k, f"{v:,}" if isinstance(v, (int, float)) else v) for k, v in self.constants.items()
        ]
        return (
            '<div class="ipu-devices"><b>Virtual IPUs (IPU Model)</b>'
            + H.pairs(head)
            + H.table(("device id", "IPUs", "version", "tiles"), self._device_rows())
            + H.section("Target constants", H.pairs(rows))
            + "</div>"
        )

    def _device_rows(self) -> list[tuple[Any, ...]]:
        tiles = self.constants.get("tiles_per_ipu", "")
        return [(i, 1, self.ipu_version, tiles) for i in range(self.num_devices)]


def devices() -> DevicesResult:
    from pyipu.ipu_targets import target
    from pyipu.runtime import DeviceManager

    dm = DeviceManager()
    version = dm.ipu_hardware_version()
    return DevicesResult(
        num_devices=dm.get_num_devices(),
        ipu_version=version,
        constants=dict(target(version).__dict__),
    )
