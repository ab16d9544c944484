"""`TensorInfo`: a dtype and a shape, with PopART's dtype names ("FLOAT", "INT32"...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from pyipu.popart.errors import popart_exception

_ONNX_NAMES = {  # PopART's upper-case names → ONNX element types
    "FLOAT": TensorProto.FLOAT,
    "FLOAT16": TensorProto.FLOAT16,
    "DOUBLE": TensorProto.DOUBLE,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "BOOL": TensorProto.BOOL,
}
_BY_TYPE: dict[int, str] = {int(v): k for k, v in _ONNX_NAMES.items()}


class TensorInfo:
    """`TensorInfo("FLOAT", [2, 3])`, `TensorInfo(ndarray)` or `TensorInfo(np.float32, [2])`."""

    def __init__(self, dtype_or_array: Any, shape: Sequence[int] | None = None) -> None:
        if isinstance(dtype_or_array, np.ndarray) and shape is None:
            self.onnx_type = _onnx_type(dtype_or_array.dtype)
            self._shape = list(dtype_or_array.shape)
            return
        if shape is None:
            raise popart_exception("TensorInfo(dtype, shape): the shape is missing")
        self.onnx_type = _onnx_type(dtype_or_array)
        try:
            self._shape = [int(d) for d in shape]
        except (TypeError, ValueError):
            raise popart_exception(f"TensorInfo: bad shape {shape!r}") from None
        if any(d < 0 for d in self._shape):
            raise popart_exception(f"TensorInfo: negative dimension in {self._shape}")

    @classmethod
    def of_value(cls, vi: onnx.ValueInfoProto) -> TensorInfo:
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        info = cls.__new__(cls)
        info.onnx_type, info._shape = t.elem_type, dims
        return info

    def shape(self) -> list[int]:
        return list(self._shape)

    def rank(self) -> int:
        return len(self._shape)

    def nelms(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    def nbytes(self) -> int:
        return self.nelms() * self.numpy_dtype().itemsize

    def data_type(self) -> str:
        return _BY_TYPE.get(self.onnx_type, str(self.onnx_type))

    def data_type_lcase(self) -> str:
        return self.data_type().lower()

    def numpy_dtype(self) -> np.dtype:
        return helper.tensor_dtype_to_np_dtype(self.onnx_type)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TensorInfo)
            and other.onnx_type == self.onnx_type
            and other._shape == self._shape
        )

    def __repr__(self) -> str:
        return f"TensorInfo({self.data_type()!r}, {self._shape})"


def _onnx_type(dtype: Any) -> int:
    if isinstance(dtype, str):
        key = dtype.upper()
        if key in _ONNX_NAMES:
            return _ONNX_NAMES[key]
    try:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except (TypeError, KeyError, ValueError):
        pass
    raise popart_exception(f"unknown data type {dtype!r} (one of {', '.join(_ONNX_NAMES)})")
