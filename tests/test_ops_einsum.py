"""Einsum lowered to TRANSPOSE / REDUCE_SUM / MATMUL: C kernels against the reference, the
reference against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from models import F32, I64, arr, check_op, compile_single_op

from pyipu.compiler import UnsupportedAttributeError
from pyipu.enums import Op

CASES = [
    ("ij->ji", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij", [(3, 4)]),  # implicit output: letters in order
    ("ba", [(3, 4)]),  # implicit output transposes
    ("i,i", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,bkj->bki", [(2, 3, 4), (2, 5, 4)]),
    ("...ij,...jk->...ik", [(2, 2, 3, 4), (2, 2, 4, 5)]),
    ("abc,cd,de->ae", [(2, 3, 4), (4, 5), (5, 2)]),  # chain; b summed away early
    ("ijk,jk->i", [(3, 4, 5), (4, 5)]),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_einsum(case: int) -> None:
    eq, shapes = CASES[case]
    inputs = [arr(s, F32, case * 7 + i, low=-1, high=1) for i, s in enumerate(shapes)]
    check_op("Einsum", inputs, {"equation": eq}, opset=12, tol=1e-5)


def test_einsum_int64() -> None:
    inputs = [arr((2, 3), I64, 1, low=-5, high=5), arr((3, 2), I64, 2, low=-5, high=5)]
    prog = check_op("Einsum", inputs, {"equation": "ij,jk->ik"}, opset=12)
    assert Op.MATMUL in {i.op for i in prog.program(prog.main_programs[0]).instrs}


def test_einsum_diagonal_is_a_compile_error() -> None:
    with pytest.raises(UnsupportedAttributeError, match="Einsum.*diagonals"):
        compile_single_op("Einsum", [arr((3, 3), F32)], {"equation": "ii->i"}, opset=12)


def test_einsum_of_a_scalar() -> None:
    check_op("Einsum", [np.array(2.5, dtype=F32)], {"equation": "->"}, opset=12)
