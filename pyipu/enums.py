"""IntEnums for statuses, dtypes, opcodes, UNARY/BINARY/REDUCE functions and epilogue
activations, built from the C tables (runtime_c/include/ipu/*.def).

The .def files are the single source of truth: C includes them, and this module reads them through
the extension, so C, Cython and Python cannot drift apart.
"""

from __future__ import annotations

from enum import EnumMeta, IntEnum
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from pyipu import _core

_E = TypeVar("_E")

if TYPE_CHECKING:
    # The members exist only once the tables are read: to a type checker every member name of
    # these enums is a member, so the tables are not repeated here.
    class _TableEnum(EnumMeta):
        def __getattr__(cls: type[_E], name: str) -> _E: ...

    class Status(IntEnum, metaclass=_TableEnum): ...

    class DType(IntEnum, metaclass=_TableEnum): ...

    class Op(IntEnum, metaclass=_TableEnum): ...

    class UnaryFn(IntEnum, metaclass=_TableEnum): ...

    class BinaryFn(IntEnum, metaclass=_TableEnum): ...

    class ReduceFn(IntEnum, metaclass=_TableEnum): ...

    class ActFn(IntEnum, metaclass=_TableEnum): ...

else:
    Status = IntEnum("Status", _core.enum_table("status"))
    DType = IntEnum("DType", [(n.upper(), v) for n, v in _core.enum_table("dtype")])
    Op = IntEnum("Op", [(n.upper(), v) for n, v in _core.enum_table("op")])
    # Function ids of the UNARY and BINARY opcodes (attribute 0), from ipu_fns.def.
    UnaryFn = IntEnum("UnaryFn", _core.enum_table("unary"))
    BinaryFn = IntEnum("BinaryFn", _core.enum_table("binary"))
    # Function ids of the REDUCE opcode (attribute 0), from ipu_fns.def.
    ReduceFn = IntEnum("ReduceFn", _core.enum_table("reduce"))
    # Epilogue activations of CONV2D and GEMM (their `activation` attribute), from ipu_fns.def.
    ActFn = IntEnum("ActFn", _core.enum_table("act"))

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
