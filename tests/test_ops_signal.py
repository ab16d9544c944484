"""DFT as one MATMUL by a constant matrix: C runtime against the reference, the reference
against onnxruntime (forward, inverse, onesided, padded and truncated lengths, other axes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from models import F32, arr, check_op

from pyipu.enums import Op

CASES: list[tuple[tuple[int, ...], dict[str, Any], int | None, int]] = [
    ((2, 8, 1), {}, None, 1),
    ((2, 8, 2), {}, None, 1),
    ((2, 8, 2), {"inverse": 1}, None, 1),
    ((3, 10, 1), {"onesided": 1}, None, 1),
    ((2, 6, 1), {}, 9, 1),  # zero-padded to 9
    ((2, 9, 2), {}, 5, 1),  # truncated to 5
    ((2, 4, 5, 2), {}, None, 1),  # signal axis before another dim
    ((2, 4, 5, 1), {"onesided": 1}, None, 2),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_dft(case: int) -> None:
    shape, attrs, length, axis = CASES[case]
    x = arr(shape, F32, case, low=-1, high=1)
    consts = {1: None if length is None else np.array(length, np.int64), 2: np.array(axis)}
    prog = check_op("DFT", [x], attrs, opset=20, const_inputs=consts, tol=1e-4)
    assert Op.MATMUL in {i.op for i in prog.program(prog.main_programs[0]).instrs}
