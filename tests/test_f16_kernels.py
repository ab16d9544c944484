"""float16 kernels (float16 in memory, float32 compute) against the NumPy reference at every
combination of conversion level (portable, F16C, AVX-512F) and sgemm micro-kernel the CPU runs:
MatMul/Gemm with weights packed as float32 at load and with activation operands (long rows,
transposed A, columns past one packing run), convolutions through im2col (strides, pads,
dilation, 1x1), pools over staged rows, element-wise and softmax."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
from models import F16, arr, assert_matches_reference, compile_single_op, run_c

from pyipu import _core

F16_LEVELS = [lvl for lvl in (1, 2, 3) if _core.set_f16_isa(lvl) == lvl]
GEMM_LEVELS = [lvl for lvl in (1, 2, 3) if _core.set_sgemm_isa(lvl) == lvl]
_core.set_f16_isa(0)
_core.set_sgemm_isa(0)
# every conversion level with the best micro-kernel, every micro-kernel with the best level
LEVELS = sorted(
    {(f, GEMM_LEVELS[-1]) for f in F16_LEVELS} | {(F16_LEVELS[-1], g) for g in GEMM_LEVELS}
)


@pytest.fixture(params=LEVELS, ids=[f"cvt{f}-gemm{g}" for f, g in LEVELS])
def levels(request: pytest.FixtureRequest) -> Iterator[tuple[int, int]]:
    f, g = request.param
    assert _core.set_f16_isa(f) == f and _core.set_sgemm_isa(g) == g
    yield f, g
    _core.set_f16_isa(0)
    _core.set_sgemm_isa(0)


def _check(op: str, inputs: list[np.ndarray], attrs: dict | None = None, **kw: object) -> None:
    exe, feeds, _ = compile_single_op(op, inputs, attrs, opset=17, **kw)
    assert_matches_reference(run_c(exe, feeds), exe.run_reference(feeds))


def _u(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return arr(shape, F16, seed, low=-1, high=1)


def _with_inf(x: np.ndarray) -> np.ndarray:
    x[0, 5, 2, 7] = np.inf
    return x


def _with_nan(x: np.ndarray) -> np.ndarray:
    x[0, 1, 9, 4] = np.nan
    return x


CASES: dict[str, Callable[[], None]] = {
    "matmul_weight": lambda: _check(
        "MatMul", [_u((37, 300), 1)], const_inputs={1: _u((300, 70), 2)}
    ),
    "matmul_weight_m2": lambda: _check(
        "MatMul", [_u((2, 64), 1)], const_inputs={1: _u((64, 1100), 2)}
    ),
    "matmul_batched": lambda: _check("MatMul", [_u((3, 50, 40), 1), _u((3, 40, 1500), 2)]),
    "gemm_trans_bias_relu": lambda: _check(
        "Gemm",
        [_u((40, 33), 1)],
        {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
        const_inputs={1: _u((20, 40), 2), 2: _u((20,), 3)},
    ),
    "conv3x3_s2_pad": lambda: _check(
        "Conv",
        [_u((1, 8, 23, 29), 1)],
        {"strides": [2, 2], "pads": [1, 1, 1, 1]},
        const_inputs={1: _u((12, 8, 3, 3), 2), 2: _u((12,), 3)},
    ),
    "conv_dilated_groups": lambda: _check(
        "Conv",
        [_u((2, 6, 17, 40), 1)],
        {"dilations": [2, 1], "group": 2, "pads": [2, 0, 1, 3]},
        const_inputs={1: _u((4, 3, 3, 2), 2)},
    ),
    "conv1x1": lambda: _check(
        "Conv", [_u((1, 16, 9, 11), 1)], const_inputs={1: _u((24, 16, 1, 1), 2)}
    ),
    # SqueezeNet's shapes: where the float32 plan picks its small-map and Winograd paths
    "conv1x1_fire": lambda: _check(
        "Conv", [_u((1, 64, 13, 13), 1)], const_inputs={1: _u((256, 64, 1, 1), 2), 2: _u((256,), 3)}
    ),
    "conv3x3_fire": lambda: _check(
        "Conv",
        [_u((1, 64, 13, 13), 1)],
        {"pads": [1, 1, 1, 1]},
        const_inputs={1: _u((200, 64, 3, 3), 2)},
    ),
    # an infinity in the input: the Winograd blocks reading it fall back to direct sums
    "conv3x3_fire_inf": lambda: _check(
        "Conv",
        [_with_inf(_u((1, 64, 13, 13), 1))],
        {"pads": [1, 1, 1, 1]},
        const_inputs={1: _u((200, 64, 3, 3), 2)},
    ),
    "conv_wide_row": lambda: _check(
        "Conv",
        [_u((1, 2, 3, 1200), 1)],
        {"strides": [1, 3], "pads": [0, 1, 0, 1]},
        const_inputs={1: _u((3, 2, 1, 5), 2)},
    ),
    "depthwise": lambda: _check(
        "Conv",
        [_u((1, 4, 10, 12), 1)],
        {"group": 4, "pads": [1, 1, 1, 1]},
        const_inputs={1: _u((4, 1, 3, 3), 2)},
    ),
    "depthwise_s2": lambda: _check(
        "Conv",
        [_u((1, 6, 15, 17), 1)],
        {"group": 6, "strides": [2, 2], "pads": [1, 2, 1, 0]},
        const_inputs={1: _u((6, 1, 3, 3), 2), 2: _u((6,), 3)},
    ),
    "depthwise_3x1": lambda: _check(
        "Conv", [_u((2, 5, 11, 9), 1)], {"group": 5}, const_inputs={1: _u((5, 1, 3, 1), 2)}
    ),
    "maxpool": lambda: _check(
        "MaxPool",
        [_u((2, 3, 19, 21), 1)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    "maxpool_nan": lambda: _check(
        "MaxPool", [_with_nan(_u((1, 3, 27, 27), 1))], {"kernel_shape": [3, 3], "strides": [2, 2]}
    ),
    "maxpool_same": lambda: _check(
        "MaxPool", [_u((2, 8, 14, 14), 1)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    ),
    "avgpool_pad": lambda: _check(
        "AveragePool",
        [_u((1, 4, 9, 30), 1)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    "avgpool": lambda: _check(
        "AveragePool", [_u((1, 5, 14, 14), 1)], {"kernel_shape": [2, 3], "strides": [1, 2]}
    ),
    "global_avgpool": lambda: _check("GlobalAveragePool", [_u((2, 7, 13, 13), 1)]),
    "add_broadcast": lambda: _check("Add", [_u((3, 300, 17), 1), _u((300, 1), 2)]),
    "relu": lambda: _check("Relu", [_u((5, 1000), 1)]),
    "softmax": lambda: _check("Softmax", [_u((6, 333), 1)], {"axis": -1}),
}


@pytest.mark.parametrize("case", CASES)
def test_f16_kernel(case: str, levels: tuple[int, int]) -> None:
    CASES[case]()
