"""Compile-time errors: pyipu.errors.Error subclasses that are also ValueErrors ("unsupported"
ones are also NotImplementedErrors), so one `except pyipu.Error` catches compiler and runtime."""

from __future__ import annotations

from pyipu import errors


class CompileError(errors.Error, ValueError):
    """The model cannot be compiled as given (bad shapes, dynamic dims, bad options...)."""


class UnsupportedError(CompileError, errors.UnsupportedError):
    """pyipu does not implement something the model uses."""


class UnsupportedOpError(UnsupportedError):
    """An ONNX op type (or this opset version of it) has no lowering."""


class UnsupportedAttributeError(UnsupportedError):
    """A supported op uses an attribute value or input form pyipu does not implement."""


class UnsupportedDTypeError(UnsupportedError):
    """A tensor has a dtype the op (or the IPU) does not support."""


class ShapeError(CompileError, errors.ShapeError):
    """Shapes are dynamic, inconsistent, or disagree with the model's declarations."""


def node_label(name: str, op_type: str, opset: int) -> str:
    """How errors name a node: `node 'mm0' (MatMul, opset 13)`."""
    return (
        f"node {name!r} ({op_type}, opset {opset})" if name else f"{op_type} node (opset {opset})"
    )


class IPUOutOfMemoryError(CompileError):
    """Some tile needs more memory than it has (the IPU Model's estimate, docs/ipu-model.md).

    `report` is the IPUModelReport; engine option `debug.allowOutOfMemory` = "true" compiles
    anyway, for CPU use.
    """

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report
