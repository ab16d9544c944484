"""float16 kernels (float16 in memory, float32 compute) against the NumPy reference at every
instruction-set level the CPU runs (conversions portable, F16C or AVX-512F, with the sgemm
micro-kernel and the other kernels of the same level; the `isa_level` fixture):
MatMul/Gemm with weights packed as float32 at load and with activation operands (long rows,
transposed A, columns past one packing run), convolutions (the GEMM path through im2col, the
window path on converted rows, the small-map path, Winograd, depthwise; strides, pads,
dilation, groups, fused residual epilogues, infinities and NaNs), pools over staged rows,
element-wise and softmax."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from models import F16, arr, assert_parity, check_parity, compile_single_op, run_c
from onnx import TensorProto, helper, numpy_helper
from test_conv_epilogue import _block

from pyipu.compiler import Compiler


def _u(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return arr(shape, F16, seed, low=-1, high=1)


def _with_inf(x: np.ndarray) -> np.ndarray:
    x[0, 5, 2, 7] = np.inf
    return x


def _with_nan(x: np.ndarray) -> np.ndarray:
    x[0, 1, 9, 4] = np.nan
    return x


CASES: dict[str, Callable[[], None]] = {
    "matmul_weight": lambda: check_parity(
        "MatMul", [_u((37, 300), 1)], const_inputs={1: _u((300, 70), 2)}
    ),
    "matmul_weight_m2": lambda: check_parity(
        "MatMul", [_u((2, 64), 1)], const_inputs={1: _u((64, 1100), 2)}
    ),
    "matmul_batched": lambda: check_parity("MatMul", [_u((3, 50, 40), 1), _u((3, 40, 1500), 2)]),
    "gemm_trans_bias_relu": lambda: check_parity(
        "Gemm",
        [_u((40, 33), 1)],
        {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
        const_inputs={1: _u((20, 40), 2), 2: _u((20,), 3)},
    ),
    "conv3x3_s2_pad": lambda: check_parity(
        "Conv",
        [_u((1, 8, 23, 29), 1)],
        {"strides": [2, 2], "pads": [1, 1, 1, 1]},
        const_inputs={1: _u((12, 8, 3, 3), 2), 2: _u((12,), 3)},
    ),
    "conv_dilated_groups": lambda: check_parity(
        "Conv",
        [_u((2, 6, 17, 40), 1)],
        {"dilations": [2, 1], "group": 2, "pads": [2, 0, 1, 3]},
        const_inputs={1: _u((4, 3, 3, 2), 2)},
    ),
    "conv1x1": lambda: check_parity(
        "Conv", [_u((1, 16, 9, 11), 1)], const_inputs={1: _u((24, 16, 1, 1), 2)}
    ),
    # SqueezeNet's shapes: where the float32 plan picks its small-map and Winograd paths
    "conv1x1_fire": lambda: check_parity(
        "Conv", [_u((1, 64, 13, 13), 1)], const_inputs={1: _u((256, 64, 1, 1), 2), 2: _u((256,), 3)}
    ),
    "conv3x3_fire": lambda: check_parity(
        "Conv",
        [_u((1, 64, 13, 13), 1)],
        {"pads": [1, 1, 1, 1]},
        const_inputs={1: _u((200, 64, 3, 3), 2)},
    ),
    # K over several chunks (the float32 C tile accumulates, the last chunk stores half) and
    # edge tiles of pixels and channels
    "conv1x1_k_chunks": lambda: check_parity(
        "Conv",
        [_u((1, 600, 7, 11), 1)],
        const_inputs={1: _u((45, 600, 1, 1), 2), 2: _u((45,), 3)},
    ),
    # the small-map path (pixels as the micro-kernel's rows): 1x1 over several K chunks, and
    # a stride-2 3x3 layer on copied rows
    "conv1x1_small_map": lambda: check_parity(
        "Conv",
        [_u((1, 520, 14, 14), 1)],
        const_inputs={1: _u((70, 520, 1, 1), 2), 2: _u((70,), 3)},
    ),
    "conv3x3_s2_small_map": lambda: check_parity(
        "Conv",
        [_u((1, 40, 28, 28), 1)],
        {"strides": [2, 2], "pads": [1, 1, 1, 1]},
        const_inputs={1: _u((48, 40, 3, 3), 2), 2: _u((48,), 3)},
    ),
    # an infinity in the input: the Winograd blocks reading it fall back to direct sums
    "conv3x3_fire_inf": lambda: check_parity(
        "Conv",
        [_with_inf(_u((1, 64, 13, 13), 1))],
        {"pads": [1, 1, 1, 1]},
        const_inputs={1: _u((200, 64, 3, 3), 2)},
    ),
    # the float32 window plan on rows converted from float16 (conv_window.c): the 7x7 stride-2
    # stem (both column phases split at once), a stride-2 3x3 layer over several K chunks, C
    # tiles and pixel tiles, padded 1x1 and dilated-stride layers (one column phase each)
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
    # output rows as whole micro-kernel tiles (33 extended columns for 32 kept ones)
    "conv3x3_s2_row_tiles": lambda: check_parity(
        "Conv",
        [_u((1, 3, 65, 65), 1)],
        {"strides": [2, 2]},
        const_inputs={1: _u((20, 3, 3, 3), 2), 2: _u((20,), 3)},
    ),
    "conv3x3_s2_inf_nan": lambda: check_parity(
        "Conv",
        [_with_nan(_with_inf(_u((1, 8, 23, 29), 1)))],
        {"strides": [2, 2], "pads": [1, 1, 1, 1]},
        const_inputs={1: _u((12, 8, 3, 3), 2)},
    ),
    "conv1x1_padded": lambda: check_parity(
        "Conv",
        [_u((2, 10, 7, 9), 1)],
        {"pads": [1, 2, 0, 1]},
        const_inputs={1: _u((5, 10, 1, 1), 2)},
    ),
    "conv_s3_dilated": lambda: check_parity(
        "Conv",
        [_u((1, 6, 20, 31), 1)],
        {"strides": [3, 3], "dilations": [2, 2], "pads": [2, 1, 0, 2]},
        const_inputs={1: _u((9, 6, 3, 2), 2)},
    ),
    # weights bound at run time: packed from half in the work item
    "conv3x3_s2_weight_input": lambda: check_parity(
        "Conv", [_u((1, 8, 23, 29), 1), _u((70, 8, 3, 3), 2)], {"strides": [2, 2]}
    ),
    # KW = 1, stride 1, unpadded: no row copy, so the float16 GEMM path
    "conv3x1": lambda: check_parity(
        "Conv", [_u((1, 8, 12, 10), 1)], const_inputs={1: _u((16, 8, 3, 1), 2)}
    ),
    "conv_wide_row": lambda: check_parity(
        "Conv",
        [_u((1, 2, 3, 1200), 1)],
        {"strides": [1, 3], "pads": [0, 1, 0, 1]},
        const_inputs={1: _u((3, 2, 1, 5), 2)},
    ),
    "depthwise": lambda: check_parity(
        "Conv",
        [_u((1, 4, 10, 12), 1)],
        {"group": 4, "pads": [1, 1, 1, 1]},
        const_inputs={1: _u((4, 1, 3, 3), 2)},
    ),
    "depthwise_s2": lambda: check_parity(
        "Conv",
        [_u((1, 6, 15, 17), 1)],
        {"group": 6, "strides": [2, 2], "pads": [1, 2, 1, 0]},
        const_inputs={1: _u((6, 1, 3, 3), 2), 2: _u((6,), 3)},
    ),
    "depthwise_3x1": lambda: check_parity(
        "Conv", [_u((2, 5, 11, 9), 1)], {"group": 5}, const_inputs={1: _u((5, 1, 3, 1), 2)}
    ),
    # ShuffleNet's shapes: depthwise blocks whose input rows are converted where they are read,
    # 7 x 7 planes (rows shorter than a vector), and grouped 1 x 1 layers (panels packed from half)
    "depthwise_7x7_planes": lambda: check_parity(
        "Conv",
        [_u((1, 40, 7, 7), 1)],
        {"group": 40, "pads": [1, 1, 1, 1]},
        const_inputs={1: _u((40, 1, 3, 3), 2), 2: _u((40,), 3)},
    ),
    "depthwise_s2_odd": lambda: check_parity(
        "Conv",
        [_u((1, 12, 29, 31), 1)],
        {"group": 12, "strides": [2, 2], "pads": [1, 1, 1, 1]},
        const_inputs={1: _u((12, 1, 3, 3), 2), 2: _u((12,), 3)},
    ),
    "depthwise_tall": lambda: check_parity(
        "Conv",
        [_u((1, 3, 300, 33), 1)],
        {"group": 3, "pads": [2, 0, 1, 2]},
        const_inputs={1: _u((3, 1, 5, 3), 2)},
    ),
    "conv1x1_groups": lambda: check_parity(
        "Conv",
        [_u((1, 48, 7, 7), 1)],
        {"group": 4},
        const_inputs={1: _u((48, 12, 1, 1), 2), 2: _u((48,), 3)},
    ),
    "conv1x1_few_out": lambda: check_parity(
        "Conv",
        [_u((1, 64, 23, 21), 1)],
        const_inputs={1: _u((16, 64, 1, 1), 2), 2: _u((16,), 3)},
    ),
    "maxpool": lambda: check_parity(
        "MaxPool",
        [_u((2, 3, 19, 21), 1)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    "maxpool_s2_tall_nan": lambda: check_parity(
        "MaxPool",
        [_with_nan(_u((1, 2, 230, 61), 1))],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1]},
    ),
    "maxpool_same_nan": lambda: check_parity(
        "MaxPool",
        [_with_nan(_u((1, 6, 14, 14), 1))],
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    ),
    "maxpool_nan": lambda: check_parity(
        "MaxPool", [_with_nan(_u((1, 3, 27, 27), 1))], {"kernel_shape": [3, 3], "strides": [2, 2]}
    ),
    "maxpool_same": lambda: check_parity(
        "MaxPool", [_u((2, 8, 14, 14), 1)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    ),
    "avgpool_pad": lambda: check_parity(
        "AveragePool",
        [_u((1, 4, 9, 30), 1)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    "avgpool": lambda: check_parity(
        "AveragePool", [_u((1, 5, 14, 14), 1)], {"kernel_shape": [2, 3], "strides": [1, 2]}
    ),
    "avgpool_tall_pads": lambda: check_parity(
        "AveragePool",
        [_u((1, 2, 300, 37), 1)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1]},
    ),
    "maxpool_tall_s1": lambda: check_parity(
        "MaxPool",
        [_u((1, 2, 301, 35), 1)],
        {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0]},
    ),
    "global_avgpool_7x7": lambda: check_parity("GlobalAveragePool", [_u((1, 70, 7, 7), 1)]),
    "global_avgpool": lambda: check_parity("GlobalAveragePool", [_u((2, 7, 13, 13), 1)]),
    "add_broadcast": lambda: check_parity("Add", [_u((3, 300, 17), 1), _u((300, 1), 2)]),
    "sub_broadcast_first": lambda: check_parity("Sub", [_u((4, 1), 1), _u((4, 77), 2)]),
    "relu": lambda: check_parity("Relu", [_u((5, 1000), 1)]),
    "softmax": lambda: check_parity("Softmax", [_u((6, 333), 1)], {"axis": -1}),
}


@pytest.mark.parametrize("case", CASES)
def test_f16_kernel(case: str, isa_level: int) -> None:
    CASES[case]()


@pytest.mark.parametrize(
    "k,stride,hw", [(3, 2, 13), (7, 2, 20), (3, 1, 9), (1, 2, 11), (1, 1, 13), (3, 2, 29)]
)
def test_f16_fused_residual(k: int, stride: int, hw: int, isa_level: int) -> None:
    """Conv → BatchNormalization → Add (half residual) → Relu as one instruction, on the window
    and small-map (k > 1, stride 2), Winograd, GEMM and small-map 1x1 paths, with an infinity
    and a NaN in the input."""
    model = _block(F16, bn=True, residual=True, relu=True, bias=True, k=k, hw=hw, stride=stride)
    exe = Compiler.compile(model)
    x = arr((1, 8, hw, hw), F16, hw, low=-1, high=1)
    x[0, 3, hw // 2, hw - 1] = np.nan
    x[0, 5, 0, hw // 3] = np.inf
    oh = (hw - 1) // stride + 1
    feeds = {"x": x, "z": arr((1, 16, oh, oh), F16, 7, low=-1, high=1)}
    assert_parity(run_c(exe, feeds), exe.run_reference(feeds))


@pytest.mark.parametrize(
    "c,m,k,stride,hw",
    # ResNet-50-like shapes on the small-map path at every micro-kernel (1x1 over two K chunks,
    # 3x3 stride 2 on copied rows), one on the GEMM path, one on the window path
    [(256, 256, 1, 1, 14), (64, 64, 3, 2, 56), (64, 16, 1, 1, 40), (3, 20, 3, 2, 65)],
)
def test_f16_residual_relu_finite(
    c: int, m: int, k: int, stride: int, hw: int, isa_level: int
) -> None:
    """Conv (bias) → Add (half residual) → Relu as one instruction on finite data, so that
    every element is compared within the tolerance."""
    oh = (hw + 2 * (k // 2) - k) // stride + 1
    inits = [
        numpy_helper.from_array(arr((m, c, k, k), F16, 1, low=-0.2, high=0.2), "w"),
        numpy_helper.from_array(arr((m,), F16, 2, low=-1, high=1), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, strides=[stride] * 2),
        helper.make_node("Add", ["c", "z"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    h = TensorProto.FLOAT16
    ins = [
        helper.make_tensor_value_info("x", h, [1, c, hw, hw]),
        helper.make_tensor_value_info("z", h, [1, m, oh, oh]),
    ]
    g = helper.make_graph(nodes, "res", ins, [helper.make_tensor_value_info("y", h, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    exe = Compiler.compile(model)
    feeds = {
        "x": arr((1, c, hw, hw), F16, 3, low=-1, high=1),
        "z": arr((1, m, oh, oh), F16, 4, low=-1, high=1),
    }
    assert_parity(run_c(exe, feeds), exe.run_reference(feeds))


# One op's float16 executable against its float32 one on the same (half-representable) values:
# they take the same paths and sums, so float16 is the float32 result rounded once.
Shape = tuple[int, ...]
ROUND_ONCE: dict[str, tuple[str, Shape, dict, dict[int, Shape]]] = {
    "depthwise_s1": (
        "Conv",
        (1, 24, 14, 14),
        {"group": 24, "pads": [1, 1, 1, 1]},
        {1: (24, 1, 3, 3), 2: (24,)},
    ),
    "depthwise_s2_odd": (
        "Conv",
        (1, 10, 15, 13),
        {"group": 10, "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {1: (10, 1, 3, 3), 2: (10,)},
    ),
    "depthwise_tall": (
        "Conv",
        (1, 2, 300, 19),
        {"group": 2, "pads": [1, 1, 1, 1]},
        {1: (2, 1, 3, 3), 2: (2,)},
    ),
    "conv1x1_few_out": ("Conv", (1, 64, 17, 19), {}, {1: (16, 64, 1, 1), 2: (16,)}),
    "conv1x1_groups": ("Conv", (1, 48, 7, 7), {"group": 4}, {1: (48, 12, 1, 1), 2: (48,)}),
    "maxpool_pads": (
        "MaxPool",
        (1, 3, 19, 21),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {},
    ),
    "maxpool_s2_tall": (
        "MaxPool",
        (1, 3, 230, 61),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {},
    ),
    "maxpool_same_7x7": (
        "MaxPool",
        (1, 40, 7, 7),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        {},
    ),
    "avgpool_same_14x14": (
        "AveragePool",
        (1, 9, 14, 14),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        {},
    ),
    "avgpool_tall": (
        "AveragePool",
        (1, 2, 300, 23),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1]},
        {},
    ),
    "global_avgpool": ("GlobalAveragePool", (1, 30, 7, 7), {}, {}),
    # the micro-kernel's half store (one K chunk, and several: a float32 tile between them)
    "matmul_odd": ("MatMul", (37, 300), {}, {1: (300, 70)}),
    "matmul_batched": ("MatMul", (3, 19, 40), {}, {1: (40, 33)}),
    "gemm_bias": ("Gemm", (45, 200), {}, {1: (200, 50), 2: (50,)}),
    "gemm_c_matrix_k_chunks": ("Gemm", (21, 700), {"transB": 1}, {1: (35, 700), 2: (21, 35)}),
    # alpha, beta: the epilogue after the float32 tile
    "winograd_13x13": (
        "Conv",
        (1, 48, 13, 13),
        {"pads": [1, 1, 1, 1]},
        {1: (40, 48, 3, 3), 2: (40,)},
    ),
    "conv1x1_small_map_rows": ("Conv", (1, 96, 13, 13), {}, {1: (24, 96, 1, 1), 2: (24,)}),
    # element-wise: whole vectors in registers, the rest converted in chunks
    "add_odd": ("Add", (3, 1001), {}, {1: (3, 1001)}),
    "div_odd": ("Div", (7, 37), {}, {1: (7, 37)}),
    "mul_bcast": ("Mul", (5, 40), {}, {1: (40,)}),
    "sub_row_value": ("Sub", (6, 101), {}, {1: (6, 1)}),
    "div_scalar": ("Div", (3, 50), {}, {1: (1,)}),
    "softmax_rows": ("Softmax", (3, 40, 128), {"axis": -1}, {}),
    "reduce_mean_768": ("ReduceMean", (9, 768), {"axes": [1], "keepdims": 1}, {}),
    # rows reduced whole, many per conversion (mean and sum; a row longer than the run)
    "reduce_mean_rows": ("ReduceMean", (300, 13), {"axes": [1], "keepdims": 0}, {}),
    "global_avgpool_long_rows": ("GlobalAveragePool", (1, 3, 40, 41), {}, {}),
    "gemm_alpha_beta": ("Gemm", (30, 64), {"alpha": 0.5, "beta": 2.0}, {1: (64, 20), 2: (20,)}),
}


@pytest.mark.parametrize("case", ROUND_ONCE)
def test_f16_rounds_float32_once(case: str, isa_level: int) -> None:
    op, xs, attrs, shapes = ROUND_ONCE[case]
    x = _u(xs, 1)
    consts = {k: _u(v, k + 1) for k, v in shapes.items()}
    outs = []
    for dt in (F16, np.float32):
        exe, feeds, _ = compile_single_op(
            op, [x.astype(dt)], attrs, const_inputs={k: v.astype(dt) for k, v in consts.items()}
        )
        outs.append(next(iter(run_c(exe, feeds).values())))
    np.testing.assert_array_equal(outs[0].view(np.uint16), outs[1].astype(F16).view(np.uint16))
