"""Keeping a host model's parameters and the PopTorch executors wrapping it in step.

A training executor's steps change the weights on its device only. The host model is brought
up to date when it is next used: its class is swapped for a subclass whose attribute access,
`state_dict`, `load_state_dict`, `parameters`, `buffers` and calls first copy the newer device
weights to the host (PopTorch does the same). Each copy to the host raises the model's
`version`; an executor whose device holds an older version uploads the host weights before it
runs, which is how an inferenceModel sees what a sibling trainingModel learnt.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch


class HostSync:
    """Per host model: which executor's device holds newer weights, and the host version."""

    def __init__(self) -> None:
        self.owner: Any = None  # the executor whose device is ahead of the host, or None
        self.version = 0
        self.busy = False  # inside a copy: attribute access must not start another
        self.trainer: Any = None  # weakref to the model's trainingModel

    def pull(self) -> None:
        """Copy the newer device weights to the host, if a device has them."""
        owner = self.owner
        if owner is None or self.busy:
            return
        owner.copyWeightsToHost()


_SYNCS: weakref.WeakKeyDictionary[torch.nn.Module, HostSync] = weakref.WeakKeyDictionary()
_CLASSES: dict[type, type] = {}


def sync_of(model: torch.nn.Module) -> HostSync:
    """The model's HostSync; the model and its submodules pull newer weights when used (so
    `model.layer.weight` read through a submodule kept from before is up to date too)."""
    sync = _SYNCS.get(model)
    if sync is None:
        sync = HostSync()
        for m in model.modules():
            if m in _SYNCS:
                continue
            _SYNCS[m] = sync
            cls = type(m)
            if not getattr(cls, "_poptorch_synced", False):
                m.__class__ = _synced_class(cls)
    return sync


def original_class(model: torch.nn.Module) -> type:
    cls = type(model)
    return cls.__bases__[0] if getattr(cls, "_poptorch_synced", False) else cls


def _pull(model: Any) -> None:
    sync = _SYNCS.get(model)
    if sync is not None and sync.owner is not None:
        sync.pull()


def _restore(cls: type, state: dict[str, Any]) -> Any:
    obj: Any = object.__new__(cls)
    if hasattr(obj, "__setstate__"):
        obj.__setstate__(state)
    else:
        obj.__dict__.update(state)
    return obj


def _synced_class(cls: type) -> type:
    if cls in _CLASSES:
        return _CLASSES[cls]

    def __getattr__(self: Any, name: str) -> Any:  # noqa: N807
        if not name.startswith("_"):
            _pull(self)
        return cls.__getattr__(self, name)  # type: ignore[attr-defined]

    def pulling(method: str) -> Any:
        base = getattr(cls, method)

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            _pull(self)
            return base(self, *args, **kwargs)

        run.__name__ = method
        return run

    def __reduce_ex__(self: Any, protocol: Any) -> Any:  # noqa: N807
        """Pickled as the user's class (the subclass is created at run time)."""
        _pull(self)
        return (_restore, (cls, self.__dict__.copy()))

    attrs: dict[str, Any] = {
        "_poptorch_synced": True,
        "__getattr__": __getattr__,
        "__reduce_ex__": __reduce_ex__,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
    }
    for m in (
        "state_dict",
        "load_state_dict",  # a partial load keeps the device's values of the rest
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
    ):
        attrs[m] = pulling(m)
    attrs["__call__"] = pulling("__call__")
    synced = type(cls.__name__, (cls,), attrs)
    _CLASSES[cls] = synced
    return synced
