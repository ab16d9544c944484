"""PopTorch's exception classes.

`poptorch.Error`, `RecoverableError` (with `recovery_action`) and `UnrecoverableError` are
pyipu's own error classes (pyipu.errors, which carry `message`, `type` and `location` as
PopTorch's do): an error raised anywhere in pyipu while a PopTorch model compiles or runs is
already a `poptorch.Error`. The subclasses below name what the PopTorch layer itself refuses.
"""

from __future__ import annotations

from pyipu.errors import (
    DTypeError,
    Error,
    InvalidArgumentError,
    InvalidStateError,
    RecoverableError,
    ShapeError,
    UnrecoverableError,
    UnsupportedError,
)

__all__ = [
    "Error",
    "InputDTypeError",
    "InputShapeError",
    "InvalidStateError",
    "OptionError",
    "RecoverableError",
    "UnrecoverableError",
    "UnsupportedFeatureError",
]


class InputShapeError(ShapeError):
    """A call's inputs differ in number or shape from those the model was compiled for, or the
    batch does not split into the options' device iterations, replicas and accumulation."""

    def __init__(self, message: str) -> None:
        super().__init__(message, type="poptorch_python_error", location="PoplarExecutor")


class InputDTypeError(DTypeError):
    """A call's input has another dtype than the model was compiled for."""

    def __init__(self, message: str) -> None:
        super().__init__(message, type="poptorch_python_error", location="PoplarExecutor")


class OptionError(InvalidArgumentError):
    """A bad `poptorch.Options` value, or a config file line that is not an option call."""

    def __init__(self, message: str) -> None:
        super().__init__(message, type="poptorch_python_error", location="Options")


class UnsupportedFeatureError(UnsupportedError):
    """A PopTorch feature pyipu does not implement (docs/poptorch.md lists them)."""

    def __init__(self, message: str, location: str = "poptorch") -> None:
        super().__init__(message, type="poptorch_python_error", location=location)
