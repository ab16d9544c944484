"""Exceptions raised by pyipu.

Mirrors PopTorch/Model Runtime's error classes (`Error` with `message`, `type` and `location`;
`RecoverableError` with `recovery_action`; `UnrecoverableError`) and adds one typed subclass per C
status, so callers can catch exactly what they expect. Each subclass also derives from the
closest built-in exception (ValueError, MemoryError, TimeoutError, ...), so generic handlers work.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence


class Error(Exception):
    """Base class of every pyipu error."""

    status_name: str = "ERR_INTERNAL"

    def __init__(self, message: str, *, type: str = "runtime", location: str = "") -> None:  # noqa: A002
        super().__init__(message)
        self.message = message
        self.type = type
        self.location = location


class RecoverableError(Error):
    """An error after which the device can be used again once `recovery_action` is done."""

    def __init__(self, message: str, *, recovery_action: str = "IPU_RESET", **kw: str) -> None:
        super().__init__(message, **kw)
        self.recovery_action = recovery_action


class UnrecoverableError(Error):
    """An error that leaves the runtime unusable."""


class InvalidArgumentError(Error, ValueError):
    status_name = "ERR_INVALID_ARGUMENT"


class ConfigError(InvalidArgumentError):
    """A configuration file (YAML) pyipu refuses: aliases, too large or deep, a path that
    leaves the directories it may write to."""


class OutOfMemoryError(Error, MemoryError):
    status_name = "ERR_NOMEM"


class FileIOError(Error, OSError):
    status_name = "ERR_IO"


class CorruptFileError(Error, ValueError):
    status_name = "ERR_CORRUPT"


class VersionError(CorruptFileError):
    status_name = "ERR_VERSION"


class PackageHashError(Error):
    """The PopEF file was written by another compiler version (see check_package_hash)."""

    status_name = "ERR_HASH_MISMATCH"


class InvalidStateError(Error):
    status_name = "ERR_INVALID_STATE"


class ClosedError(Error):
    """The runner was closed; pending requests fail with this error."""

    status_name = "ERR_CLOSED"


class IpuTimeoutError(Error, TimeoutError):
    status_name = "ERR_TIMEOUT"


class ShapeError(Error, ValueError):
    status_name = "ERR_SHAPE"


class DTypeError(Error, TypeError):
    status_name = "ERR_DTYPE"


class UnsupportedError(Error, NotImplementedError):
    status_name = "ERR_UNSUPPORTED"


class BadProgramError(CorruptFileError):
    status_name = "ERR_BAD_PROGRAM"


class NotFoundError(Error, LookupError):
    status_name = "ERR_NOT_FOUND"


class CallbackError(Error):
    status_name = "ERR_CALLBACK"


class AbortedError(Error):
    status_name = "ERR_ABORTED"


class InternalError(UnrecoverableError):
    status_name = "ERR_INTERNAL"


class ResetRequiredError(RecoverableError):
    """A step failed and auto_reset is off: every pending request got the error, and the runner
    refuses new ones until `Runner.reset()` (recovery_action "IPU_RESET")."""

    status_name = "ERR_NEEDS_RESET"


class CancelledError(Error):
    """The request was cancelled (`Future.cancel()`, or Ctrl-C while `execute()` waited)."""

    status_name = "ERR_CANCELLED"


_BY_STATUS: dict[str, type[Error]] = {
    cls.status_name: cls
    for cls in (
        InvalidArgumentError,
        OutOfMemoryError,
        FileIOError,
        CorruptFileError,
        VersionError,
        PackageHashError,
        InvalidStateError,
        ClosedError,
        IpuTimeoutError,
        ShapeError,
        DTypeError,
        UnsupportedError,
        BadProgramError,
        NotFoundError,
        CallbackError,
        AbortedError,
        InternalError,
        ResetRequiredError,
        CancelledError,
    )
}


def from_status(status_name: str, status: int, message: str) -> Error:
    """The exception for a C status (by its name in ipu_status.def)."""
    cls = _BY_STATUS.get(status_name, InternalError)
    err = cls(message, type=status_name)
    err.status = status  # type: ignore[attr-defined]
    return err


def error_class(status_name: str) -> type[Error]:
    return _BY_STATUS.get(status_name, InternalError)


def unknown_name(what: str, name: str, known: Sequence[str]) -> str:
    """The message for a name that is not one of `known`: the closest match, then the list.

    >>> unknown_name("input", "imput", ["input", "mask"])
    "unknown input 'imput'; did you mean 'input'? (the inputs: ['input', 'mask'])"
    """
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown {what} {name!r}{hint} (the {what}s: {list(known)})"
