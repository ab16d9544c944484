"""Tensor descriptors returned by Runner.get_*_inputs/outputs (`poprt.runtime.DataDesc`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyipu.enums import DType, to_numpy
from pyipu.errors import DTypeError, InvalidArgumentError


@dataclass(frozen=True)
class DataDesc:
    """One anchor: name, one batch's shape, data type and size."""

    name: str
    shape: list[int]
    data_type: DType
    size_in_bytes: int
    popef_contains_tensor_data: bool = False
    subgraph: int | None = None  # fused models: the subgraph the anchor belongs to

    def numpy_data_type(self) -> np.dtype:
        return to_numpy(self.data_type)

    @property
    def sizeInBytes(self) -> int:  # noqa: N802 - PopRT's C++ field name
        return self.size_in_bytes


def check_buffer(desc: DataDesc, array: object, is_output: bool) -> np.ndarray:
    """`array` as a buffer the runtime may use for `desc` zero-copy: a C-contiguous ndarray of
    the anchor's dtype, writable for outputs. Shapes are the caller's business."""
    kind = "output" if is_output else "input"
    if not isinstance(array, np.ndarray):
        raise InvalidArgumentError(
            f"{kind} {desc.name!r} must be a numpy.ndarray, got {type(array).__name__}"
        )
    expected = desc.numpy_data_type()
    if array.dtype != expected:
        raise DTypeError(f"{kind} {desc.name!r}: expected dtype {expected}, got {array.dtype}")
    if not array.flags.c_contiguous:
        raise InvalidArgumentError(
            f"{kind} {desc.name!r} is not C-contiguous; pass np.ascontiguousarray(array)"
        )
    if is_output and not array.flags.writeable:
        raise InvalidArgumentError(f"output {desc.name!r} is read-only")
    return array


InputDesc = DataDesc
OutputDesc = DataDesc
