"""The variables of a loaded executable by name: state its requests update and that persists
between steps (pyipu.compiler.variables), read and written between steps through a device
handle (a `_core.Runtime` of a Runner, or a `_core.Session`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import numpy as np

from pyipu import _core
from pyipu.errors import InvalidArgumentError, NotFoundError
from pyipu.runtime.descriptors import DataDesc


class _Device(Protocol):
    def read_variable(self, anchor: int, out: np.ndarray) -> None: ...
    def write_variable(self, anchor: int, value: np.ndarray) -> None: ...


class Variables:
    def __init__(self, executable: _core.Executable, anchors: list[DataDesc]) -> None:
        self._anchor = {name: a for name, (a, _) in executable.variables().items()}
        self._descs = anchors

    def descs(self) -> list[DataDesc]:
        return [self._descs[a] for a in self._anchor.values()]

    def read(self, device: _Device, names: Iterable[str] | None) -> dict[str, np.ndarray]:
        out = {}
        for name in self._anchor if names is None else names:
            a = self._lookup(name)
            desc = self._descs[a]
            out[name] = np.empty(desc.shape, desc.numpy_data_type())
            device.read_variable(a, out[name])
        return out

    def write(self, devices: Iterable[_Device], values: Mapping[str, Any]) -> None:
        checked = {self._lookup(name): self._checked(name, v) for name, v in values.items()}
        for device in devices:
            for a, array in checked.items():
                device.write_variable(a, array)

    def _lookup(self, name: str) -> int:
        if name not in self._anchor:
            known = ", ".join(sorted(self._anchor)) or "none"
            raise NotFoundError(f"{name!r} is not a variable of the model (variables: {known})")
        return self._anchor[name]

    def _checked(self, name: str, value: Any) -> np.ndarray:
        desc = self._descs[self._anchor[name]]
        array = np.asarray(value)
        if array.dtype != desc.numpy_data_type() or array.shape != tuple(desc.shape):
            raise InvalidArgumentError(
                f"variable {name!r} is {desc.data_type.name.lower()} {list(desc.shape)}, "
                f"got {array.dtype} {list(array.shape)}"
            )
        return np.ascontiguousarray(array)
