"""What a MODEL / EXE argument names: a variable of the user's namespace, or a file path."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from IPython.core.error import UsageError


def lookup(token: str, namespace: Mapping[str, Any]) -> Any:
    """The variable `token` (dotted attributes allowed), else the path `token` if it exists."""
    head, *rest = token.split(".")
    if head.isidentifier() and head in namespace:
        value = namespace[head]
        try:
            for attr in rest:
                value = getattr(value, attr)
        except AttributeError as e:
            raise UsageError(f"{token!r}: {e}") from None
        return value
    if os.path.exists(token):
        return token
    raise UsageError(f"{token!r} is neither a variable nor an existing file")


def model(token: str, namespace: Mapping[str, Any]) -> Any:
    """An ONNX model: ModelProto, serialized bytes or a path."""
    import onnx

    value = lookup(token, namespace)
    if isinstance(value, (str, os.PathLike)):
        try:
            return onnx.load(os.fspath(value))
        except Exception as e:  # protobuf's DecodeError, OSError...: not a model file
            raise UsageError(f"{token!r} is not an ONNX model file: {e}") from None
    if isinstance(value, (onnx.ModelProto, bytes)):
        return value
    raise UsageError(
        f"{token!r} is a {type(value).__name__}; expected an onnx.ModelProto, bytes or a path"
    )


def executable(token: str, namespace: Mapping[str, Any]) -> Any:
    """A pyipu.compiler.Executable from a variable (Executable, PopEF bytes) or a PopEF path."""
    from pyipu.compiler import Executable
    from pyipu.errors import Error

    value = lookup(token, namespace)
    if isinstance(value, Executable):
        return value
    if hasattr(value, "executable") and isinstance(value.executable, Executable):
        return value.executable  # a FuseResult
    if isinstance(value, (str, os.PathLike)):
        try:
            return Executable.open(value)
        except (Error, OSError) as e:  # corrupt, truncated, not a PopEF file
            raise UsageError(f"{token!r} is not a valid PopEF file: {e}") from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return Executable.from_bytes(value)
    raise UsageError(
        f"{token!r} is a {type(value).__name__}; expected a pyipu Executable or a PopEF path"
    )
