"""Op and DType for the compiler: pyipu.enums when the C extension is built, else the .def files.

The fallback lets the compiler and the NumPy reference run from a source tree without the
extension (pyipu.enums reads the tables through pyipu._core). Both read the same .def files, so
the values cannot drift.
"""

from __future__ import annotations

import re
from enum import IntEnum
from pathlib import Path

try:
    from pyipu.enums import DType, Op
except ImportError:  # pyipu._core not built: parse the tables the C core includes
    _DEF_DIR = Path(__file__).resolve().parents[2] / "runtime_c" / "include" / "ipu"

    def _table(file: str, macro: str) -> list[tuple[str, int]]:
        text = (_DEF_DIR / file).read_text()
        return [(m[1], int(m[2])) for m in re.finditer(rf"^{macro}\((\w+),\s*(\d+)", text, re.M)]

    DType = IntEnum("DType", _table("ipu_dtype.def", "IPU_DTYPE"))  # type: ignore[misc]
    Op = IntEnum("Op", _table("ipu_ops.def", "IPU_OP"))  # type: ignore[misc]

__all__ = ["DType", "Op"]
