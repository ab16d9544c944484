"""The float32 kernels against the NumPy reference at every instruction-set level the CPU runs
(the `isa_level` fixture forces portable, AVX2 and AVX-512 in turn for every kernel family), so
each SIMD variant is checked, not only the one this CPU picks: convolutions (Winograd, the window
plan, depthwise taps, 1x1, im2col, fused epilogues), pools (the AVX-512 3x3 stride-2 max, the
rows-first max, same-shape planes, the window fold), Pow's square-root exponents, the vectorised
Exp/Erf/GELU/Softmax, and sgemm/sgemv with edge tiles. The float16 variants run under the same
fixture in test_f16_kernels.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from models import F32, arr, assert_parity, check_parity, run_c
from test_conv_epilogue import _block
from test_gelu_erf import _gelu_model

from pyipu import _core
from pyipu.compiler import Compiler


def _u(shape: tuple[int, ...], seed: int, low: float = -1, high: float = 1) -> np.ndarray:
    return arr(shape, F32, seed, low=low, high=high)


def _specials(x: np.ndarray) -> np.ndarray:
    """x with an infinity, a minus infinity, a minus zero and a NaN spread over its elements."""
    flat = x.reshape(-1)
    flat[len(flat) // 5] = np.inf
    flat[len(flat) // 3] = -0.0
    flat[len(flat) // 2] = -np.inf
    flat[4 * len(flat) // 5] = np.nan
    return x


def _model(model_fn: Callable[[], object], feeds: dict[str, np.ndarray]) -> None:
    exe = Compiler.compile(model_fn())
    assert_parity(run_c(exe, feeds), exe.run_reference(feeds))


CASES: dict[str, Callable[[], None]] = {
    # convolutions: SqueezeNet's 3x3 (Winograd), with an infinity (its blocks go direct)
    "conv3x3_winograd": lambda: check_parity(
        "Conv",
        [_u((1, 64, 13, 13), 1)],
        {"pads": [1, 1, 1, 1]},
        const_inputs={1: _u((96, 64, 3, 3), 2), 2: _u((96,), 3)},
    ),
    "conv3x3_winograd_inf": lambda: check_parity(
        "Conv",
        [_specials(_u((1, 64, 13, 13), 1))],
        {"pads": [1, 1, 1, 1]},
        const_inputs={1: _u((96, 64, 3, 3), 2)},
    ),
    # the window plan: the 7x7 stride-2 stem, a stride-2 3x3 over several K chunks
    "conv7x7_s2_stem": lambda: check_parity(
        "Conv",
        [_u((1, 3, 41, 46), 1)],
        {"strides": [2, 2], "pads": [3, 3, 3, 3]},
        const_inputs={1: _u((20, 3, 7, 7), 2), 2: _u((20,), 3)},
    ),
    "conv3x3_s2_chunks": lambda: check_parity(
        "Conv",
        [_u((1, 40, 45, 70), 1)],
        {"strides": [2, 2], "pads": [1, 0, 1, 1]},
        const_inputs={1: _u((150, 40, 3, 3), 2), 2: _u((150,), 3)},
    ),
    "conv1x1": lambda: check_parity(
        "Conv",
        [_u((1, 64, 13, 13), 1)],
        const_inputs={1: _u((200, 64, 1, 1), 2), 2: _u((200,), 3)},
    ),
    "conv1x1_s2_padded": lambda: check_parity(
        "Conv",
        [_u((2, 10, 15, 9), 1)],
        {"strides": [2, 2], "pads": [1, 2, 0, 1]},
        const_inputs={1: _u((37, 10, 1, 1), 2)},
    ),
    "conv_dilated_groups": lambda: check_parity(
        "Conv",
        [_u((2, 6, 17, 40), 1)],
        {"dilations": [2, 1], "group": 2, "pads": [2, 0, 1, 3]},
        const_inputs={1: _u((4, 3, 3, 2), 2)},
    ),
    "conv_weight_input": lambda: check_parity(
        "Conv", [_u((1, 8, 23, 29), 1), _u((70, 8, 3, 3), 2)], {"strides": [2, 2]}
    ),
    "depthwise": lambda: check_parity(
        "Conv",
        [_u((1, 32, 28, 28), 1)],
        {"group": 32, "pads": [1, 1, 1, 1]},
        const_inputs={1: _u((32, 1, 3, 3), 2), 2: _u((32,), 3)},
    ),
    "depthwise_s2": lambda: check_parity(
        "Conv",
        [_u((1, 6, 15, 17), 1)],
        {"group": 6, "strides": [2, 2], "pads": [1, 2, 1, 0]},
        const_inputs={1: _u((6, 1, 3, 3), 2)},
    ),
    # fused Conv -> BatchNormalization -> Add -> Relu epilogues (conv_epilogue.c)
    "conv_bn_add_relu_3x3_s2": lambda: _block_case(3, 2, 21),
    "conv_bn_add_relu_3x3": lambda: _block_case(3, 1, 13),
    "conv_bn_add_relu_1x1": lambda: _block_case(1, 1, 11),
    # pools: 3x3 stride 2 max (AVX-512 per plane; with a NaN, the rows-first and window paths)
    "maxpool3x3_s2": lambda: check_parity(
        "MaxPool", [_u((1, 8, 57, 57), 1)], {"kernel_shape": [3, 3], "strides": [2, 2]}
    ),
    "maxpool3x3_s2_pad": lambda: check_parity(
        "MaxPool",
        [_u((2, 3, 19, 21), 1)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    "maxpool3x3_s2_wide_nan": lambda: check_parity(
        "MaxPool",
        [_specials(_u((1, 4, 30, 121), 1))],
        {"kernel_shape": [3, 3], "strides": [2, 2]},
    ),
    "maxpool_same": lambda: check_parity(
        "MaxPool", [_u((2, 8, 14, 14), 1)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    ),
    "avgpool_same": lambda: check_parity(
        "AveragePool", [_u((1, 8, 9, 9), 1)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    ),
    "avgpool_pad": lambda: check_parity(
        "AveragePool",
        [_u((1, 4, 9, 30), 1)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    "avgpool_2x3": lambda: check_parity(
        "AveragePool", [_u((1, 5, 14, 14), 1)], {"kernel_shape": [2, 3], "strides": [1, 2]}
    ),
    # Pow by a scalar: the square-root exponents take the vector roots, 2 the square, 1.3 powf;
    # -inf and -0 follow C's pow ((-inf) ** 0.5 = +inf, not sqrt's NaN)
    **{
        f"pow_{str(z).replace('.', '_')}": (
            lambda z=z: check_parity(
                "Pow",
                [_specials(_u((7, 131), 1, low=-2, high=3)), np.array(z, np.float32)],
            )
        )
        for z in (0.5, 0.75, 2.0, 1.3)
    },
    # the vectorised math: long rows (vector body and tail), specials included
    "exp": lambda: check_parity("Exp", [_specials(_u((5, 301), 1, low=-90, high=90))]),
    "erf": lambda: check_parity("Erf", [_specials(_u((5, 301), 1, low=-5, high=5))]),
    "sigmoid": lambda: check_parity("Sigmoid", [_specials(_u((5, 301), 1, low=-20, high=20))]),
    "softmax": lambda: check_parity("Softmax", [_u((6, 333), 1, low=-30, high=30)], {"axis": -1}),
    "gelu": lambda: _model(
        lambda: _gelu_model("half_first", (4, 301)), {"x": _u((4, 301), 1, -6, 6)}
    ),
    # sgemm and sgemv: edge tiles of every micro-kernel (12 x 32, 6 x 16, 6 x 8), K past KC
    "matmul_edges": lambda: check_parity(
        "MatMul", [_u((37, 300), 1)], const_inputs={1: _u((300, 70), 2)}
    ),
    "matmul_k_past_kc": lambda: check_parity("MatMul", [_u((13, 517), 1), _u((517, 47), 2)]),
    "matmul_gemv": lambda: check_parity(
        "MatMul", [_u((2, 64), 1)], const_inputs={1: _u((64, 1100), 2)}
    ),
    "matmul_batched": lambda: check_parity("MatMul", [_u((3, 50, 40), 1), _u((3, 40, 75), 2)]),
    "matmul_small": lambda: check_parity("MatMul", [_u((5, 17), 1), _u((17, 33), 2)]),
    "gemm_trans_bias": lambda: check_parity(
        "Gemm",
        [_u((40, 33), 1)],
        {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
        const_inputs={1: _u((20, 40), 2), 2: _u((20,), 3)},
    ),
}


def _block_case(k: int, stride: int, hw: int) -> None:
    model = _block(F32, bn=True, residual=True, relu=True, bias=True, k=k, hw=hw, stride=stride)
    oh = (hw - 1) // stride + 1
    feeds = {"x": _specials(_u((1, 8, hw, hw), hw)), "z": _u((1, 16, oh, oh), 7)}
    _model(lambda: model, feeds)


@pytest.mark.parametrize("case", CASES)
def test_isa_parity(case: str, isa_level: int) -> None:
    CASES[case]()


def test_isa_levels_force_every_family(isa_level: int) -> None:
    """The one switch moves the sgemm micro-kernel too; automatic is the best level again."""
    assert _core.sgemm_isa() == isa_level
    assert _core.set_isa(0) == _core.isa_best()
    assert _core.set_isa(_core.isa_best() + 1) == _core.isa_best()  # unknown: automatic


CLAMPS = {  # op, attrs, constant inputs: the unary clamps with an AVX2 path (unary.c)
    "relu6": ("Clip", {}, {1: np.array(0, np.float32), 2: np.array(6, np.float32)}),
    "hardswish": ("HardSwish", {}, {}),
    "hardsigmoid": ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, {}),
    "leakyrelu": ("LeakyRelu", {"alpha": 0.1}, {}),
}


@pytest.mark.parametrize("case", CLAMPS)
def test_unary_clamps_are_bit_identical_at_every_level(case: str) -> None:
    """-0, NaN and the infinities included, the tail of a length not a multiple of 8 too."""
    from models import compile_single_op

    op, attrs, consts = CLAMPS[case]
    x = _specials(_u((3, 37), 5, low=-9, high=9))
    x.reshape(-1)[7] = -0.0
    exe, feeds, _ = compile_single_op(op, [x], attrs, opset=17, const_inputs=consts)
    outs = []
    try:
        for level in [lv for lv in sorted(_core.ISA_LEVELS.values()) if 0 < lv <= _core.isa_best()]:
            _core.set_isa(level)
            outs.append(next(iter(run_c(exe, feeds).values())))
    finally:
        _core.set_isa(0)
    assert_parity({"y": outs[0]}, {"y": next(iter(exe.run_reference(feeds).values()))})
    for y in outs[1:]:
        np.testing.assert_array_equal(y.view(np.uint32), outs[0].view(np.uint32))
