"""Identical inputs at different positions give bit-identical outputs, at every instruction-set
level: a window repeated across a feature map, a row repeated down a matrix, a column repeated
across it, a value repeated along a vector. A kernel whose result for an element depended on
where the element sits (a SIMD body against its scalar tail, an edge tile against a full one, a
per-lane summation order) would order equal detector scores apart. The inputs repeat with a
period prime to every vector width and tile, so the copies fall at different offsets.

The Winograd path (3x3, stride 1, enough channels) is the one exception, by construction: each
output of a 2x2 tile has its own row of the output transform, so its rounding depends on the
output's position in the tile. The last test shows the check sees it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from models import F32, arr, compile_single_op, run_c

PERIOD = 5  # prime to the 4, 8 and 16 float lanes, the 6- and 12-row tiles and the 2x2 tiles


def _run(op: str, x: np.ndarray, attrs: dict[str, Any] | None = None, **consts: Any) -> np.ndarray:
    const_inputs = {int(k[1:]): v for k, v in consts.items()}
    exe, feeds, _ = compile_single_op(op, [x], attrs, const_inputs=const_inputs)
    return run_c(exe, feeds)["out0"]


def _repeat(block: np.ndarray, n: int, axis: int) -> np.ndarray:
    """`block` repeated along `axis` and cut to n: element i equals element i + len(block)."""
    reps = [1] * block.ndim
    reps[axis] = -(-n // block.shape[axis])
    return np.ascontiguousarray(np.take(np.tile(block, reps), np.arange(n), axis=axis))


def _assert_periodic(y: np.ndarray, period: int, axis: int) -> None:
    """y[..., i, ...] is bit-identical to y[..., i + period, ...] along `axis`."""
    n = y.shape[axis]
    assert n > period, (y.shape, axis, period)
    a = np.take(y, np.arange(n - period), axis=axis)
    b = np.take(y, np.arange(period, n), axis=axis)
    differ = np.moveaxis(a != b, axis, 0).reshape(n - period, -1).any(axis=1)
    assert not differ.any(), f"positions {np.nonzero(differ)[0].tolist()} differ from +{period}"


CONVS = {
    # the detectors' 1x1 heads: SSDLite's class head, Faster R-CNN's objectness
    "pointwise_ssd_head": (672, 546, 10, 1, 1, 1, 0),
    "pointwise_rpn_cls": (1280, 15, 10, 1, 1, 1, 0),
    "pointwise_expand": (160, 960, 12, 1, 1, 1, 0),
    # depthwise taps: 3x3 stride 1 and 2, 5x5
    "depthwise3x3": (96, 96, 23, 3, 96, 1, 1),
    "depthwise3x3_s2": (96, 96, 27, 3, 96, 2, 1),
    "depthwise5x5": (40, 40, 24, 5, 40, 1, 2),
    # the window plan: a 3x3 stride-2 stem
    "stem3x3_s2": (3, 16, 41, 3, 1, 2, 1),
}


@pytest.mark.parametrize("case", CONVS)
def test_conv_repeated_windows(case: str, isa_level: int) -> None:
    """A map whose every window recurs `period` pixels on, in both directions: the outputs
    away from the padded border recur with it (the output period is the input's / stride)."""
    cin, cout, size, k, group, stride, pad = CONVS[case]
    period = PERIOD * stride
    tile = arr((1, cin, period, period), F32, 1, low=-1, high=1)
    x = _repeat(_repeat(tile, size, 2), size, 3)
    w = arr((cout, cin // group, k, k), F32, 2, low=-0.3, high=0.3)
    attrs = {"group": group, "strides": [stride] * 2, "pads": [pad] * 4}
    y = _run("Conv", x, attrs, c1=w, c2=arr((cout,), F32, 3))
    lo, hi = -(-pad // stride), (size - k + pad) // stride  # outputs whose windows miss the pad
    inner = y[:, :, lo : hi + 1, lo : hi + 1]
    _assert_periodic(inner, PERIOD, 2)
    _assert_periodic(inner, PERIOD, 3)


MATMULS = {
    "fc_cls": (100, 1024, 91),  # Faster R-CNN's class scores
    "edge_tiles": (37, 300, 70),
    "k_past_kc": (13, 517, 47),
    "gemv": (2, 64, 1100),
}


@pytest.mark.parametrize("case", MATMULS)
def test_matmul_repeated_rows_and_columns(case: str, isa_level: int) -> None:
    """Rows of A that recur give rows of A @ B that recur, through full and edge tiles; the
    same for columns of B."""
    m, k, n = MATMULS[case]
    if m > PERIOD:
        a = _repeat(arr((PERIOD, k), F32, 1, low=-1, high=1), m, 0)
        _assert_periodic(_run("MatMul", a, c1=arr((k, n), F32, 2, low=-0.3, high=0.3)), PERIOD, 0)
    b = _repeat(arr((k, PERIOD), F32, 3, low=-0.3, high=0.3), n, 1)
    _assert_periodic(_run("MatMul", arr((m, k), F32, 4, low=-1, high=1), c1=b), PERIOD, 1)


def test_gemm_repeated_rows(isa_level: int) -> None:
    """Gemm with a transposed B and a bias (the detectors' fully connected layers)."""
    a = _repeat(arr((PERIOD, 1024), F32, 1, low=-1, high=1), 100, 0)
    w = arr((364, 1024), F32, 2, low=-0.1, high=0.1)
    y = _run("Gemm", a, {"transB": 1}, c1=w, c2=arr((364,), F32, 3))
    _assert_periodic(y, PERIOD, 0)


@pytest.mark.parametrize("shape", [(3234, 91), (6, 333)])
def test_softmax_repeated_rows_and_values(shape: tuple[int, int], isa_level: int) -> None:
    """SSDLite's [anchors, classes] softmax: rows that recur give rows that recur; values that
    recur along a row (vector body and tail alike) give probabilities that recur."""
    rows, cols = shape
    x = _repeat(arr((PERIOD, cols), F32, 1, low=-15, high=15), rows, 0)
    _assert_periodic(_run("Softmax", x, {"axis": -1}), PERIOD, 0)
    x = _repeat(arr((rows, PERIOD), F32, 2, low=-15, high=15), cols, 1)
    _assert_periodic(_run("Softmax", x, {"axis": -1}), PERIOD, 1)


@pytest.mark.parametrize("op", ["Exp", "Sigmoid", "Tanh", "Erf", "Log", "HardSwish", "Sqrt"])
def test_unary_repeated_values(op: str, isa_level: int) -> None:
    """The vectorised math over a vector as long as SSDLite's anchors (3234: body and tail)."""
    x = _repeat(arr((PERIOD,), F32, 1, low=0.05, high=4), 3234, 0)
    _assert_periodic(_run(op, x), PERIOD, 0)


@pytest.mark.parametrize("op", ["Div", "Mul", "Add", "Sub"])
def test_broadcast_binary_repeated_rows(op: str, isa_level: int) -> None:
    """Box decoding's arithmetic: rows that recur, against a broadcast row."""
    x = _repeat(arr((PERIOD, 4), F32, 1, low=-3, high=3), 3234, 0)
    y = _run(op, x, c1=np.array([10.0, 10.0, 5.0, 5.0], np.float32))
    _assert_periodic(y, PERIOD, 0)


def test_the_check_sees_winograd_tile_positions() -> None:
    """The Winograd path rounds by position in its 2x2 tile: windows that recur every 5 pixels
    (odd: the copies fall at other tile positions) give outputs that differ in the last bits,
    while a period of 4 (a whole number of tiles) recurs exactly."""
    w = arr((96, 64, 3, 3), F32, 2, low=-0.3, high=0.3)
    for period, exact in ((4, True), (PERIOD, False)):
        tile = arr((1, 64, period, period), F32, 1, low=-1, high=1)
        y = _run("Conv", _repeat(_repeat(tile, 26, 2), 26, 3), c1=w)
        same = np.array_equal(y[..., period:], y[..., :-period])
        assert same == exact, period
        np.testing.assert_allclose(y[..., period:], y[..., :-period], rtol=1e-5, atol=1e-5)
