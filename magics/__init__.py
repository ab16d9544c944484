"""IPython extension: `%load_ext pyipu.magics`.

The notebook magics (compile, fuse, run with live widgets, profile) arrive with their own issue;
today the extension registers `%ipu devices`, which lists the virtual IPUs. IPython is imported
only here, never by the core package.
"""

from __future__ import annotations

from typing import Any


def ipu(line: str) -> dict[str, Any]:
    """%ipu devices — the virtual IPUs of the IPU Model."""
    from IPython.core.error import UsageError

    from pyipu.runtime import DeviceManager

    if line.strip() != "devices":
        raise UsageError("usage: %ipu devices")
    dm = DeviceManager()
    return {"num_devices": dm.get_num_devices(), "ipu_version": dm.ipu_hardware_version()}


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magic_function(ipu, "line", "ipu")
