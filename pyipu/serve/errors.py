"""The server's typed errors and their HTTP and gRPC statuses (one table for both)."""

from __future__ import annotations

from pyipu.errors import (
    ClosedError,
    DTypeError,
    Error,
    InvalidArgumentError,
    IpuTimeoutError,
    NotFoundError,
    ShapeError,
)


class BadRequestError(InvalidArgumentError):
    """A malformed request: bad JSON, datatype, shape, unknown or missing tensor, oversize."""


class ModelNotFoundError(NotFoundError):
    """No such model or version in the repository, or not loaded."""


class OverloadedError(Error):
    """The model's in-flight limit is reached: retry later."""


class UnavailableError(Error):
    """The server is shutting down, or the model is unloading."""


class DeadlineError(IpuTimeoutError):
    """The request did not complete within its timeout; it was cancelled."""


class UnauthorizedError(Error):
    """A missing or wrong bearer token."""


class RayNotInstalledError(Error, ImportError):
    """pyipu.serve.ray without Ray Serve installed (the serve-ray extra)."""


# (error class, HTTP status, gRPC status name); the first match wins, so subclasses first.
STATUS_TABLE: list[tuple[type[BaseException], int, str]] = [
    (BadRequestError, 400, "INVALID_ARGUMENT"),
    (ModelNotFoundError, 404, "NOT_FOUND"),
    (OverloadedError, 429, "RESOURCE_EXHAUSTED"),
    (UnavailableError, 503, "UNAVAILABLE"),
    (DeadlineError, 504, "DEADLINE_EXCEEDED"),
    (UnauthorizedError, 401, "UNAUTHENTICATED"),
    (ShapeError, 400, "INVALID_ARGUMENT"),
    (DTypeError, 400, "INVALID_ARGUMENT"),
    (InvalidArgumentError, 400, "INVALID_ARGUMENT"),
    (NotFoundError, 404, "NOT_FOUND"),
    (ClosedError, 503, "UNAVAILABLE"),
]


def public_message(error: BaseException) -> str:
    """What a client is told: a pyipu error's message; nothing of an internal one's."""
    return str(error) if isinstance(error, Error) else f"internal error: {type(error).__name__}"


def status_of(error: BaseException) -> tuple[int, str, str]:
    """HTTP status, gRPC status name and a short kind label (for metrics) of an error."""
    for cls, http, grpc_name in STATUS_TABLE:
        if isinstance(error, cls):
            return http, grpc_name, grpc_name.lower()
    return 500, "INTERNAL", "internal"
