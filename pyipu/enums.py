"""IntEnums for statuses, dtypes, opcodes, UNARY/BINARY/REDUCE functions and epilogue
activations, built from the C tables (runtime_c/include/ipu/*.def).

The .def files are the single source of truth: C includes them, and this module reads them through
the extension, so C, Cython and Python cannot drift apart.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from pyipu import _core

Status = IntEnum("Status", _core.enum_table("status"))  # type: ignore[misc]
DType = IntEnum("DType", [(n.upper(), v) for n, v in _core.enum_table("dtype")])  # type: ignore[misc]
Op = IntEnum("Op", [(n.upper(), v) for n, v in _core.enum_table("op")])  # type: ignore[misc]
# Function ids of the UNARY and BINARY opcodes (attribute 0), from ipu_fns.def.
UnaryFn = IntEnum("UnaryFn", _core.enum_table("unary"))  # type: ignore[misc]
BinaryFn = IntEnum("BinaryFn", _core.enum_table("binary"))  # type: ignore[misc]
# Function ids of the REDUCE opcode (attribute 0), from ipu_fns.def.
ReduceFn = IntEnum("ReduceFn", _core.enum_table("reduce"))  # type: ignore[misc]
# Epilogue activations of CONV2D and GEMM (their `activation` attribute), from ipu_fns.def.
ActFn = IntEnum("ActFn", _core.enum_table("act"))  # type: ignore[misc]

_TO_NUMPY: dict[int, np.dtype] = {
    d.value: np.dtype(d.name.lower())
    for d in DType  # names match numpy's ("float16", "bool"...)
}
_FROM_NUMPY: dict[np.dtype, int] = {v: k for k, v in _TO_NUMPY.items()}


def to_numpy(dtype: int) -> np.dtype:
    """NumPy dtype of a pyipu/ONNX dtype number."""
    return _TO_NUMPY[int(dtype)]


def from_numpy(dtype: np.dtype | type | str) -> DType:
    """pyipu dtype of a NumPy dtype; KeyError if the IPU has no such type."""
    return DType(_FROM_NUMPY[np.dtype(dtype)])


def dtype_size(dtype: int) -> int:
    return int(_core.dtype_size(int(dtype)))
