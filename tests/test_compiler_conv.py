"""Conv, pooling and BatchNormalization: every case compiled, run on the NumPy reference and
compared with onnxruntime, and run on the C kernels (CONV2D, POOL2D) and compared with the
reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from models import (
    F16,
    F32,
    arr,
    assert_matches_reference,
    check_op,
    compile_single_op,
    feeds_of,
    run_c,
    single_node,
)

from pyipu.compiler import CompileError, Compiler
from pyipu.enums import Op

# (x shape, w shape, attrs)
CONV_CASES = [
    ((1, 3, 8, 8), (4, 3, 1, 1), {}),
    ((2, 5, 9, 7), (6, 5, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 3, 20, 18), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ((1, 8, 6, 6), (12, 2, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    ((2, 6, 10, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    ((1, 4, 9, 9), (8, 1, 3, 3), {"group": 4, "strides": [2, 1]}),
    ((1, 4, 12, 11), (5, 4, 3, 3), {"dilations": [2, 3], "pads": [2, 1, 2, 1]}),
    ((1, 3, 7, 8), (4, 3, 3, 2), {"pads": [0, 1, 2, 0]}),
    ((1, 3, 7, 8), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 8, 7), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 3, 7, 8), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 130, 5, 5), (100, 130, 3, 3), {"pads": [1, 1, 1, 1]}),  # > 96 output channels
    ((1, 1, 40, 41), (2, 1, 3, 3), {"pads": [1, 1, 1, 1]}),  # several pixel tiles
    ((1, 600, 4, 4), (3, 600, 5, 5), {"pads": [2, 2, 2, 2]}),  # K chunked (15000 > KCH)
    ((1, 6, 5, 5), (6, 1, 5, 5), {"group": 6, "dilations": [2, 2], "pads": [4, 3, 2, 4]}),
    ((1, 2, 48, 48), (500, 2, 3, 3), {"pads": [1, 1, 1, 1]}),  # > 4 sub-blocks per work item
    ((1, 5, 9, 7), (6, 5, 3, 1), {"dilations": [2, 1]}),  # KW = 1: window path reads x itself
    ((1, 300, 2, 460), (3, 300, 1, 1), {"strides": [2, 2]}),  # rows too wide: GEMM path
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dt", [F32, F16])
def test_conv(case: int, bias: bool, dt: Any) -> None:
    xs, ws, attrs = CONV_CASES[case]
    x = arr(xs, dt, case, low=-1, high=1)
    w = arr(ws, dt, case + 100, low=-1, high=1)
    inputs = [x, w] + ([arr((ws[0],), dt, 7)] if bias else [])
    k = ws[1] * ws[2] * ws[3]
    tol = 2e-2 if dt == F16 else 1e-5 * max(1.0, k / 16)
    prog = check_op("Conv", inputs, attrs, opset=11, tol=tol)
    assert Op.CONV2D in {i.op for i in prog.program(prog.main_programs[0]).instrs}


def test_conv_constant_weights_opset1() -> None:
    x = arr((2, 3, 6, 6), F32, 1)
    w = arr((4, 3, 3, 3), F32, 2)
    check_op("Conv", [x], {"pads": [1, 1, 1, 1]}, opset=1, const_inputs={1: w})


CONV_1D_CASES = [
    ((2, 4, 10), (3, 4, 3), {}),
    ((2, 4, 10), (6, 2, 3), {"group": 2, "pads": [1, 2], "strides": [2]}),
    ((1, 4, 11), (5, 4, 3), {"dilations": [2], "pads": [2, 1]}),
    ((1, 4, 11), (5, 4, 3), {"auto_pad": "SAME_UPPER"}),
]


@pytest.mark.parametrize("case", range(len(CONV_1D_CASES)))
def test_conv_1d(case: int) -> None:
    xs, ws, attrs = CONV_1D_CASES[case]
    x, w = arr(xs, F32, case, low=-1, high=1), arr(ws, F32, case + 9, low=-1, high=1)
    prog = check_op("Conv", [x, w, arr((ws[0],), F32, 3)], attrs, opset=11)
    assert Op.CONV2D in {i.op for i in prog.program(prog.main_programs[0]).instrs}


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_1d(op: str) -> None:
    attrs = {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}
    check_op(op, [arr((2, 3, 9), F32, 1)], attrs, opset=11)


CONV_3D_CASES = [
    ((1, 2, 4, 5, 6), (3, 2, 2, 3, 3), {}),
    (
        (2, 4, 5, 5, 5),
        (4, 2, 3, 3, 3),
        {"group": 2, "pads": [1, 0, 1, 1, 1, 0], "strides": [2, 1, 2]},
    ),
    ((1, 2, 7, 6, 5), (2, 2, 3, 2, 2), {"dilations": [2, 1, 2], "pads": [2, 0, 1, 1, 1, 0]}),
    ((1, 2, 5, 6, 5), (2, 2, 3, 2, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2, 1]}),
]


@pytest.mark.parametrize("case", range(len(CONV_3D_CASES)))
@pytest.mark.parametrize("const_w", [False, True])
def test_conv_3d(case: int, const_w: bool) -> None:
    xs, ws, attrs = CONV_3D_CASES[case]
    x, w = arr(xs, F32, case, low=-1, high=1), arr(ws, F32, case + 9, low=-1, high=1)
    bias = arr((ws[0],), F32, 3)
    if const_w:
        prog = check_op("Conv", [x, bias], attrs, opset=11, const_inputs={1: w}, tol=1e-5)
    else:
        prog = check_op("Conv", [x, w, bias], attrs, opset=11, tol=1e-5)
    assert Op.CONV2D in {i.op for i in prog.program(prog.main_programs[0]).instrs}


POOL_3D_CASES = [
    {"kernel_shape": [2, 2, 2]},
    {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]},
    {"kernel_shape": [3, 2, 3], "strides": [2, 1, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3, 3], "pads": [1, 0, 1, 1, 1, 0], "count_include_pad": 1},
]


@pytest.mark.parametrize("case", range(len(POOL_3D_CASES)))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_3d(op: str, case: int) -> None:
    attrs = dict(POOL_3D_CASES[case])
    if op == "MaxPool":
        attrs.pop("count_include_pad", None)
    check_op(op, [arr((2, 3, 6, 5, 7), F32, case, low=-2, high=2)], attrs, opset=11, tol=1e-5)


def test_conv_4d_rejected() -> None:
    with pytest.raises(CompileError, match="only 1-D, 2-D and .*3-D convolution"):
        x, w = arr((1, 2, 3, 3, 3, 3), F32), arr((3, 2, 1, 1, 1, 1), F32)
        compile_single_op("Conv", [x, w], opset=11)


@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size: int, dt: Any) -> None:
    x = arr((2, 7, 3, 4), dt, size, low=-2, high=2)
    attrs = {"size": size, "alpha": 0.02, "beta": 0.6, "bias": 1.5}
    check_op("LRN", [x], attrs, opset=13, tol=2e-2 if dt == F16 else 1e-5)


def test_lrn_even_size() -> None:
    """ONNX's window for even sizes is asymmetric (floor((size-1)/2) channels before, ceil after).
    ORT only accepts odd sizes and onnx.reference's LRN loops over the wrong axis, so the
    reference is checked against the spec's formula written out here."""
    size, alpha, beta, bias = 4, 1e-4, 0.75, 1.0
    x = arr((1, 6, 2, 3), F32, 4, low=-3, high=3)
    exe, feeds, _ = compile_single_op("LRN", [x], {"size": size}, opset=13)
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    sq = np.zeros_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1], c + -(-(size - 1) // 2) + 1)
        sq[:, c] = (x[:, lo:hi] ** 2).sum(axis=1)
    want = x / (bias + alpha / size * sq) ** beta
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p: int) -> None:
    x = arr((1, 3, 6, 7), F32, p, low=-2, high=2)
    attrs = {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "p": p}
    check_op("LpPool", [x], attrs, opset=18, tol=1e-4)


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 3, 6)])
def test_instance_normalization(shape: tuple[int, ...]) -> None:
    c = shape[1]
    inputs = [arr(shape, F32, 1, low=-3, high=3), arr((c,), F32, 2), arr((c,), F32, 3)]
    check_op("InstanceNormalization", inputs, {"epsilon": 1e-3}, opset=6, tol=1e-4)


POOL_CASES = [
    ({"kernel_shape": [2, 2], "strides": [2, 2]}),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ({"kernel_shape": [3, 2], "pads": [1, 0, 2, 1]}),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ({"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ({"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"}),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    (
        {
            "kernel_shape": [3, 3],
            "strides": [2, 2],
            "pads": [1, 1, 1, 1],
            "ceil_mode": 1,
            "count_include_pad": 1,
        }
    ),
]


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("dt", [F32, F16])
def test_pool(case: int, op: str, dt: Any) -> None:
    attrs = dict(POOL_CASES[case])
    if op == "MaxPool":
        attrs.pop("count_include_pad", None)
    check_op(op, [arr((2, 3, 9, 10), dt, case)], attrs, opset=12)


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("dt", [F32, F16])
def test_pool_small_planes_in_groups(case: int, op: str, dt: Any) -> None:
    """74 planes of 7 x 8: several whole planes to a work item (the window path folds a group in
    one pass; 9 to an item here, the last item 2), every POOL_CASES window."""
    attrs = dict(POOL_CASES[case])
    if op == "MaxPool":
        attrs.pop("count_include_pad", None)
    check_op(op, [arr((2, 37, 7, 8), dt, case)], attrs, opset=12)


def test_maxpool_small_planes_bit_for_bit() -> None:
    """Grouped small planes keep (kh, kw) order and the first NaN, bit for bit."""
    rng = np.random.default_rng(4)
    x = rng.choice(np.array([0.0, -0.0, 1.0, -np.inf, np.inf], np.float32), (2, 37, 7, 8))
    x[1, 5, 2:5, 3] = (np.uint32(0x7FC00000) + np.arange(1, 4, dtype=np.uint32)).view(np.float32)
    _check_maxpool_bits(x, {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]})
    _check_maxpool_bits(x, {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("dt", [F32, F16])
def test_pool_dilated(op: str, dt: Any) -> None:
    attrs = {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}
    check_op(op, [arr((1, 2, 8, 9), dt, 3)], attrs, opset=19)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("strides", [[1, 1], [3, 2]])
def test_pool_row_blocks_and_nan(op: str, strides: list[int]) -> None:
    """Wide rows (several row blocks per plane) and a NaN, which max pooling propagates."""
    x = arr((1, 2, 40, 300), F32, 5)
    x[0, 1, 7, 33] = np.nan
    attrs = {"kernel_shape": [3, 3], "strides": strides, "pads": [1, 1, 1, 1]}
    exe, feeds, _ = compile_single_op(op, [x], attrs, opset=12)
    got, want = run_c(exe, feeds), exe.run_reference(feeds)
    for name, w in want.items():
        assert np.isnan(got[name]).sum() == np.isnan(w).sum() > 0
        np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=1e-6)


def _maxpool_in_order(x: np.ndarray, out_hw: tuple[int, int], attrs: dict[str, Any]) -> np.ndarray:
    """docs/bytecode.md's max pooling: taps in (kh, kw) order, v replaces the running value when
    greater, or when v is NaN and the running value is not (the first NaN wins)."""
    (kh_n, kw_n), (sh, sw) = attrs["kernel_shape"], attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
    oh, ow = out_hw
    extra_h = max(0, (oh - 1) * sh + (kh_n - 1) * dh + 1 - (x.shape[2] + pt + pb))
    extra_w = max(0, (ow - 1) * sw + (kw_n - 1) * dw + 1 - (x.shape[3] + pl + pr))  # ceil mode
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb + extra_h), (pl, pr + extra_w)),
                constant_values=-np.inf)  # fmt: skip
    want = np.full(x.shape[:2] + (oh, ow), -np.inf, np.float32)
    for kh in range(kh_n):
        for kw in range(kw_n):
            v = xp[:, :, kh * dh : kh * dh + sh * oh : sh, kw * dw : kw * dw + sw * ow : sw]
            want = np.where(((v > want) | np.isnan(v)) & ~np.isnan(want), v, want)
    return want


def _check_maxpool_bits(x: np.ndarray, attrs: dict[str, Any]) -> None:
    exe, feeds, _ = compile_single_op("MaxPool", [x], attrs, opset=12)
    (got,) = run_c(exe, feeds).values()
    want = _maxpool_in_order(x, got.shape[2:], attrs)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("strides", [[1, 1], [2, 2]])
def test_maxpool_takes_taps_in_order_bit_for_bit(strides: list[int]) -> None:
    """Signed zeros, infinities and NaNs: every output keeps the first of equal values in (kh, kw)
    order and the first NaN wins (docs/bytecode.md, POOL2D), bit for bit on the vector paths too:
    the NaNs carry distinct payloads, several to a window."""
    rng = np.random.default_rng(9)
    x = rng.choice(np.array([0.0, -0.0, 1.0, -np.inf, np.inf], np.float32), (1, 3, 21, 70))
    rows, cols = rng.integers(0, 21, 40), rng.integers(0, 70, 40)
    x[0, 2, rows, cols] = (np.uint32(0x7FC00000) + np.arange(1, 41, dtype=np.uint32)).view(
        np.float32
    )
    x[0, 1, 4:7, 10:13] = (
        (np.uint32(0xFFC00000) + np.arange(9, dtype=np.uint32)).view(np.float32).reshape(3, 3)
    )
    _check_maxpool_bits(x, {"kernel_shape": [3, 3], "strides": strides, "pads": [1, 1, 1, 1]})


ROWS_FIRST_CASES = [
    ({"kernel_shape": [3, 3], "strides": [2, 2]}, 111),  # SqueezeNet's first pool: odd rows
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 112),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}, 112),  # ResNet's
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, 96),  # VGG's: exactly 6 vectors of outputs
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, 98),  # the last vector overlaps the one before
    ({"kernel_shape": [1, 1], "strides": [2, 2]}, 97),  # stride 2 reads the odd columns too
    ({"kernel_shape": [1, 4], "strides": [1, 2], "pads": [0, 2, 0, 1]}, 100),
    ({"kernel_shape": [4, 3], "strides": [3, 2], "dilations": [2, 1]}, 101),
    ({"kernel_shape": [1, 46], "strides": [1, 2], "pads": [0, 45, 0, 45]}, 60),  # 7: scalar
]


@pytest.mark.parametrize("case", range(len(ROWS_FIRST_CASES)))
def test_maxpool_rows_first_bit_for_bit(case: int) -> None:
    """Float32 max pools with column stride 2 and >= 48 outputs a row (pool.c, pool_max_rows:
    rows reduced first, vectors with an overlapping last one, scalar edges; several row blocks):
    signed zeros and infinities decide ties bit for bit; a NaN in a vector run, in a scalar
    edge, or in an odd column a 1x1 stride-2 pool skips sends its block to the window path,
    and still propagates in order."""
    attrs, w = ROWS_FIRST_CASES[case]
    rng = np.random.default_rng(case)
    x = np.round(rng.standard_normal((1, 4, 45, w)) * 2).astype(np.float32)  # ties, -0.0
    x.flat[rng.integers(0, x.size, x.size // 50)] = rng.choice([-np.inf, np.inf], x.size // 50)
    x[0, 1, 5, w // 2 | 1] = np.nan  # interior, an odd column
    x[0, 2, 0, 0] = np.nan  # the left edge
    x[0, 3, 7, w - 1] = np.float32(-np.nan)  # the right edge (or past the last window)
    _check_maxpool_bits(x, attrs)
    x[0, 3, 7, w - 1] = 0.0
    _check_maxpool_bits(x[:, :1], attrs)  # channel 0 has no NaN: the vector path throughout


S2MAX_CASES = [  # pool_s2.c ipu__pool_max_s2 (AVX-512): 3-column windows at strides 2
    {"kernel_shape": [3, 3], "strides": [2, 2]},  # SqueezeNet's
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]},  # ResNet's
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},  # Inception's
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [2, 2, 2, 2]},  # whole windows of pad
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},  # past the last column
    {"kernel_shape": [1, 3], "strides": [2, 2], "pads": [0, 2, 0, 1]},
    {"kernel_shape": [4, 3], "strides": [2, 2], "pads": [1, 1, 2, 1]},  # no row carried
]


@pytest.mark.parametrize("case", range(len(S2MAX_CASES)))
@pytest.mark.parametrize("w", [1, 2, 3, 6, 13, 27, 31, 32, 33, 34, 36, 55, 66, 111])
def test_maxpool_3_columns_stride_2_bit_for_bit(case: int, w: int) -> None:
    """Max pools with [KH, 3] windows at strides 2 on AVX-512 take blocks of 16 outputs with
    masked loads (columns outside the row read -inf) and carry the shared row's maxima: widths
    around the block edges, pads up to 2 (windows wholly in the padding give -inf), ceil mode;
    ties of signed zeros and infinities keep (kh, kw) order bit for bit. Plane 4 holds a NaN:
    its item goes the window path, which propagates the first NaN."""
    attrs = S2MAX_CASES[case]
    pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
    if w + pl + pr < 3:
        pytest.skip("no window fits")
    rng = np.random.default_rng(w * 10 + case)
    vals = np.array([0.0, -0.0, 1.0, 2.0, -np.inf, np.inf], np.float32)
    x = rng.choice(vals, (1, 5, 9, w))
    x[0, 4, 3, w // 2] = (np.uint32(0x7FC00000) + np.uint32(7)).view(np.float32)
    _check_maxpool_bits(x, attrs)
    _check_maxpool_bits(x[:, :4], attrs)  # no NaN: the vector path for every item


SAME_CASES = [  # stride 1, output plane = input plane ("same" pads): pool.c's masked-tap path
    ((1, 40, 14, 14), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # Inception's
    ((1, 6, 28, 28), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ((2, 7, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # 49: an overlapping vector
    ((1, 5, 3, 3), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # 9 pixels
    ((1, 4, 2, 3), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # 6: too few, window path
    ((1, 3, 9, 11), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 3, 8, 8), {"kernel_shape": [2, 4], "pads": [0, 1, 1, 2]}),  # asymmetric
    ((1, 2, 33, 31), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # > 1024: window path
]


@pytest.mark.parametrize("case", range(len(SAME_CASES)))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_same_planes(case: int, op: str) -> None:
    """Against the reference; max pools bit for bit with ties, signed zeros, infinities and
    NaNs at the first and last pixel of the tensor (taps reach before and after it, masked)
    and inside a vector block."""
    shape, attrs = SAME_CASES[case]
    attrs = dict(attrs)
    if op == "AveragePool":
        check_op(op, [arr(shape, F32, case)], attrs, opset=19, tol=1e-6)
        return
    attrs.pop("count_include_pad", None)
    rng = np.random.default_rng(case)
    x = rng.choice(np.array([0.0, -0.0, 1.0, 2.0, -np.inf, np.inf], np.float32), shape)
    _check_maxpool_bits(x, attrs)
    x.flat[0] = np.nan
    x.flat[-1] = np.float32(-np.nan)
    x.flat[x.size // 2] = (np.uint32(0x7FC00000) + np.uint32(7)).view(np.float32)
    _check_maxpool_bits(x, attrs)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_huge_dilation(op: str) -> None:
    """A dilated window taller than any scratch: the row path, not the window copy."""
    attrs = {"kernel_shape": [2, 1], "dilations": [5_000_000, 1], "pads": [2_500_000, 0] * 2}
    exe, feeds, _ = compile_single_op(op, [arr((1, 2, 1, 3), F32, 1)], attrs, opset=19)
    assert_matches_reference(run_c(exe, feeds), exe.run_reference(feeds))


def test_maxpool_indices_rejected() -> None:
    from models import single_node

    from pyipu.compiler import Compiler

    model = single_node(
        "MaxPool", [arr((1, 1, 4, 4), F32)], {"kernel_shape": [2, 2]}, opset=12, num_outputs=2
    )
    with pytest.raises(CompileError, match="Indices"):
        Compiler().compile(model)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("dt", [F32, F16])
def test_global_pool(op: str, dt: Any) -> None:
    check_op(op, [arr((2, 5, 6, 7), dt, 4)], opset=12)


@pytest.mark.parametrize("strides", [[1, 1], [3, 2]])
@pytest.mark.parametrize("dt", [F32, F16])
def test_average_pool_over_whole_plane_is_a_mean(strides: list[int], dt: Any) -> None:
    """ResNet's final 7x7 AveragePool: one window per plane compiles to REDUCE_MEAN."""
    attrs = {"kernel_shape": [6, 7], "strides": strides}
    ir = check_op("AveragePool", [arr((2, 5, 6, 7), dt, 4)], attrs, opset=12)
    assert [i.op for i in ir.program(1).instrs] == [Op.REDUCE_MEAN]


@pytest.mark.parametrize("opset", [9, 14, 15])
@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize("shape", [(2, 4, 5, 6), (3, 4)])
def test_batchnorm(opset: int, dt: Any, shape: tuple[int, ...]) -> None:
    c = shape[1]
    rng = np.random.default_rng(5)
    params = [
        rng.uniform(0.5, 2, c),
        rng.uniform(-1, 1, c),
        rng.uniform(-1, 1, c),
        rng.uniform(0.5, 2, c),
    ]
    pdt = F32 if opset >= 15 else dt
    consts = {i + 1: p.astype(pdt) for i, p in enumerate(params)}
    check_op(
        "BatchNormalization",
        [arr(shape, dt, 6)],
        {"epsilon": 1e-3},
        opset=opset,
        const_inputs=consts,
    )


@pytest.mark.parametrize("opset", [14, 15, 18])
@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 3)])
def test_batchnorm_training_mode(opset: int, shape: tuple[int, ...]) -> None:
    """training_mode=1: normalised by the batch's statistics, the running mean and variance
    updated with momentum (ONNX's biased variance); scale and bias are runtime inputs, as in
    a TrainingSession."""
    c = shape[1]
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    scale, bias = rng.uniform(0.5, 2, c).astype(np.float32), rng.uniform(-1, 1, c)
    mean, var = rng.uniform(-1, 1, c), rng.uniform(0.5, 2, c)
    model = single_node(
        "BatchNormalization",
        [x, scale, bias.astype(np.float32)],
        {"epsilon": 1e-3, "momentum": 0.8, "training_mode": 1},
        opset=opset,
        const_inputs={3: mean.astype(np.float32), 4: var.astype(np.float32)},
        num_outputs=3,
    )
    exe = Compiler.compile(model, None)
    feeds = feeds_of(model, [x, scale, bias.astype(np.float32)])
    got = run_c(exe, feeds)
    axes = (0, *range(2, len(shape)))
    chan = (c, *[1] * (len(shape) - 2))
    mu, v = x.mean(axes, dtype=np.float64), x.var(axes, dtype=np.float64)
    y = (x - mu.reshape(chan)) / np.sqrt(v.reshape(chan) + 1e-3) * scale.reshape(chan)
    want = {
        "out0": y + bias.reshape(chan),
        "out1": mean * 0.8 + mu * 0.2,
        "out2": var * 0.8 + v * 0.2,
    }
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("fed", [(1, 2, 3, 4), (3, 4)], ids=["all", "statistics"])
@pytest.mark.parametrize("opset", [9, 15])
def test_batchnorm_with_runtime_parameters(opset: int, fed: tuple[int, ...]) -> None:
    """Inference mode with parameters fed at run time (weights a training session feeds): the
    same results as onnxruntime."""
    rng = np.random.default_rng(4)
    params = [rng.uniform(0.5, 2, 4), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4)]
    values = [p.astype(np.float32) for p in (*params, rng.uniform(0.5, 2, 4))]
    inputs = [arr((2, 4, 3, 5), F32, 6), *[values[i - 1] for i in fed]]
    consts = {i: values[i - 1] for i in range(1, 5) if i not in fed}
    check_op("BatchNormalization", inputs, {"epsilon": 1e-3}, opset=opset, const_inputs=consts)


def _tampered(op: str, inputs: list[np.ndarray], attrs: dict, pos: int, value: int) -> Any:
    """The executable of one node with attribute `pos` of its instruction replaced."""
    import dataclasses

    from pyipu.compiler import Executable

    exe, feeds, _ = compile_single_op(op, inputs, attrs, opset=12)
    ir = exe.program
    progs = []
    for p in ir.programs:
        instrs = tuple(
            dataclasses.replace(i, attrs=i.attrs[:pos] + (value,) + i.attrs[pos + 1 :])
            if i.op in (Op.CONV2D, Op.POOL2D)
            else i
            for i in p.instrs
        )
        progs.append(dataclasses.replace(p, instrs=instrs))
    return Executable.from_program(dataclasses.replace(ir, programs=tuple(progs))), feeds


@pytest.mark.parametrize(
    "op,pos,value,text",
    [
        ("Conv", 0, 3, "group 3 does not divide"),
        ("Conv", 1, 0, "stride_h = 0 outside"),
        ("Conv", 5, -1, "pad_top = -1 outside"),
        ("Conv", 6, 1, r"output y\[1,4,4,4\], expected \[1,4,4,5\]"),
        ("MaxPool", 0, 2, "kind must be 0"),
        ("MaxPool", 9, 2, "count_include_pad must be 0 or 1"),
        ("MaxPool", 5, 3, "pads .* must be smaller than the dilated kernel"),
        ("MaxPool", 3, 1, "output y.* expected"),
    ],
)
def test_verifier_rejects(op: str, pos: int, value: int, text: str) -> None:
    from models import run_c

    if op == "Conv":
        inputs, attrs = [arr((1, 4, 6, 6), F32), arr((4, 2, 3, 3), F32)], {"group": 2}
    else:
        inputs, attrs = [arr((1, 2, 6, 6), F32)], {"kernel_shape": [2, 2], "strides": [2, 2]}
    exe, feeds = _tampered(op, inputs, attrs, pos, value)
    with pytest.raises(Exception, match=text):
        run_c(exe, feeds)


CONV_T_CASES = [
    ((1, 2, 3, 3), (2, 3, 3, 3), {}),
    ((2, 4, 4, 3), (4, 2, 3, 2), {"strides": [2, 3], "pads": [1, 0, 0, 1]}),
    (
        (1, 4, 3, 4),
        (4, 3, 3, 3),
        {"group": 2, "dilations": [2, 1], "output_padding": [0, 1], "strides": [1, 2]},
    ),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((1, 2, 4, 4), (2, 1, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((2, 3, 7), (3, 2, 3), {"strides": [2], "pads": [1, 1]}),  # 1-D
]


@pytest.mark.parametrize("case", range(len(CONV_T_CASES)))
@pytest.mark.parametrize("const_w", [False, True])
def test_conv_transpose(case: int, const_w: bool) -> None:
    xs, ws, attrs = CONV_T_CASES[case]
    x, w = arr(xs, F32, case, low=-1, high=1), arr(ws, F32, case + 50, low=-1, high=1)
    bias = arr((ws[1] * attrs.get("group", 1),), F32, 3)
    if const_w:
        prog = check_op("ConvTranspose", [x, bias], attrs, opset=11, const_inputs={1: w})
    else:
        prog = check_op("ConvTranspose", [x, w, bias], attrs, opset=11)
    assert Op.CONV2D in {i.op for i in prog.program(prog.main_programs[0]).instrs}
