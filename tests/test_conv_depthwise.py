"""Depthwise float32 convolutions (group = channels; kernels/conv_dw.c) against the NumPy
reference at every instruction-set level: the stride-1 same-width path, which reads the input
plane in place (the pixels at the row ends and in the top and bottom rows summed again on their
own), over kernel sizes, symmetric, asymmetric and zero pads, tiny and odd-width maps, fused
bias, residual and ReLU; and its sums bit for bit: against the window path on the same input
padded by hand, and between identical windows anywhere in the plane."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import F32, arr, assert_parity, run_c
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler
from pyipu.enums import Op


def _model(
    c: int,
    h: int,
    w: int,
    k: tuple[int, int],
    pads: list[int],
    *,
    bias: bool = False,
    residual: bool = False,
    relu: bool = False,
    seed: int = 1,
    weights: np.ndarray | None = None,
) -> onnx.ModelProto:
    """x[2,c,h,w] → Conv (group c, kernel k, pads) [+ bias] [→ Add(z)] [→ Relu] → y."""
    kw = weights if weights is not None else arr((c, 1, *k), F32, seed, low=-1, high=1)
    inits = [numpy_helper.from_array(kw, "w")]
    conv_in = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(arr((c,), F32, seed + 1), "b"))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"], group=c, kernel_shape=list(k), pads=pads)]
    last = "c"
    oh, ow = h + pads[0] + pads[2] - k[0] + 1, w + pads[1] + pads[3] - k[1] + 1
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, h, w])]
    if residual:
        ins.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, c, oh, ow]))
        nodes.append(helper.make_node("Add", [last, "z"], ["a"]))
        last = "a"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        last = "r"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "dw", ins, [out], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _run(model: onnx.ModelProto, x: np.ndarray, z: np.ndarray | None = None) -> np.ndarray:
    """The C kernels' y, checked against the NumPy reference."""
    exe = Compiler.compile(model)
    feeds = {"x": x} if z is None else {"x": x, "z": z}
    got = run_c(exe, feeds)
    assert_parity(got, exe.run_reference(feeds))
    return got["y"]


# (h, w, kernel, pads [top, left, bottom, right]): the same-width path wherever
# left + right = kw - 1 (stride 1), the window path elsewhere
SHAPES = [
    (56, 56, (3, 3), [1, 1, 1, 1]),
    (14, 14, (3, 3), [1, 1, 1, 1]),
    (7, 7, (3, 3), [1, 1, 1, 1]),
    (17, 23, (3, 3), [1, 1, 1, 1]),  # odd widths, several row blocks
    (13, 11, (5, 5), [2, 2, 2, 2]),
    (14, 14, (5, 5), [2, 2, 2, 2]),
    (7, 7, (5, 5), [2, 2, 2, 2]),
    (9, 15, (7, 7), [3, 3, 3, 3]),
    (12, 31, (3, 3), [0, 2, 2, 0]),  # asymmetric: all left, all bottom
    (12, 31, (3, 3), [2, 0, 0, 2]),
    (10, 9, (5, 5), [0, 1, 4, 3]),
    (8, 19, (7, 7), [5, 6, 1, 0]),  # taller output than input
    (9, 10, (2, 2), [0, 0, 1, 1]),  # even kernels
    (9, 10, (4, 4), [2, 1, 1, 2]),
    (11, 12, (3, 5), [1, 2, 1, 2]),  # not square
    (12, 12, (3, 3), [0, 0, 0, 0]),  # narrower output: the window path
    (12, 12, (3, 3), [1, 0, 1, 0]),
    (1, 1, (3, 3), [1, 1, 1, 1]),  # tiny maps
    (2, 2, (3, 3), [1, 1, 1, 1]),
    (3, 3, (3, 3), [1, 1, 1, 1]),
    (3, 4, (5, 5), [2, 2, 2, 2]),  # narrower and shorter than the kernel
    (2, 3, (7, 7), [3, 3, 3, 3]),
    (8, 3, (5, 5), [2, 2, 2, 2]),
    (3, 8, (7, 7), [3, 3, 3, 3]),
    (1, 40, (3, 3), [1, 1, 1, 1]),
    (40, 1, (3, 3), [1, 1, 1, 1]),
]


@pytest.mark.parametrize("h,w,k,pads", SHAPES, ids=[f"{s[0]}x{s[1]}k{s[2]}p{s[3]}" for s in SHAPES])
def test_depthwise_shapes(
    isa_level: int, h: int, w: int, k: tuple[int, int], pads: list[int]
) -> None:
    x = arr((2, 6, h, w), F32, h * 100 + w, low=-1, high=1)
    _run(_model(6, h, w, k, pads, seed=h + w), x)


EPILOGUE_SHAPES = [
    (7, 7, (3, 3), [1, 1, 1, 1]),
    (20, 13, (5, 5), [2, 2, 2, 2]),
    (9, 9, (3, 3), [0, 2, 2, 0]),
    (2, 2, (3, 3), [1, 1, 1, 1]),
]


@pytest.mark.parametrize("bias,residual,relu", [(True, False, True), (True, True, True),
                                                (False, True, False), (True, False, False),
                                                (False, False, True)])  # fmt: skip
@pytest.mark.parametrize("h,w,k,pads", EPILOGUE_SHAPES)
def test_depthwise_epilogue(
    isa_level: int,
    h: int,
    w: int,
    k: tuple[int, int],
    pads: list[int],
    bias: bool,
    residual: bool,
    relu: bool,
) -> None:
    model = _model(5, h, w, k, pads, bias=bias, residual=residual, relu=relu)
    exe = Compiler.compile(model)
    (conv,) = [
        i for i in exe.program.program(exe.program.main_programs[0]).instrs if i.op == Op.CONV2D
    ]
    fused = (*conv.attrs[9:], 0, 0)[:2]  # (relu, residual), absent when neither
    assert fused == (int(relu), int(residual))  # fused into the convolution
    x = arr((2, 5, h, w), F32, 3, low=-1, high=1)
    oh, ow = h + pads[0] + pads[2] - k[0] + 1, w + pads[1] + pads[3] - k[1] + 1
    _run(model, x, arr((2, 5, oh, ow), F32, 4, low=-1, high=1) if residual else None)


def test_depthwise_specials_do_not_leak(isa_level: int) -> None:
    """Infinities and NaNs at the row ends: the same-width pass reads them for the neighbouring
    row's end pixels too, which are then summed again; only the reference's outputs see them."""
    x = arr((2, 4, 12, 10), F32, 7, low=-1, high=1)
    x[:, :, 3, 0] = np.inf
    x[:, :, 5, 9] = np.nan
    x[:, :, 8, 9] = -np.inf
    x[:, :, 0, 4] = np.nan
    y = _run(_model(4, 12, 10, (3, 3), [1, 1, 1, 1], bias=True, relu=True), x)
    assert np.isfinite(y[:, :, 3, 9]).all() and np.isfinite(y[:, :, 6, 0]).all()


@pytest.mark.parametrize("k,pads", [((3, 3), [1, 1, 1, 1]), ((5, 5), [2, 2, 2, 2]),
                                    ((7, 7), [3, 3, 3, 3]), ((3, 3), [0, 2, 2, 0]),
                                    ((4, 4), [1, 2, 2, 1])])  # fmt: skip
@pytest.mark.parametrize("hw", [(7, 7), (14, 14), (30, 29), (2, 3)])
def test_same_width_equals_window_path(
    isa_level: int, k: tuple[int, int], pads: list[int], hw: tuple[int, int]
) -> None:
    """The same sums bit for bit: the padded convolution (same-width path) and the unpadded one
    over the input padded with zeros by hand (the window path)."""
    h, w = hw
    c = 5
    wk = arr((c, 1, *k), F32, 11, low=-1, high=1)
    x = arr((2, c, h, w), F32, 12, low=-1, high=1)
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    y = _run(_model(c, h, w, k, pads, weights=wk), x)
    yp = _run(_model(c, *xp.shape[2:], k, [0, 0, 0, 0], weights=wk), xp)
    np.testing.assert_array_equal(y, yp)


@pytest.mark.parametrize("k", [3, 5, 7])
def test_identical_windows_identical_outputs(isa_level: int, k: int) -> None:
    """A motif in a zero plane at the corners, the edges and inside: every output whose window
    covers a copy of it (with the pads or the zeros around it) equals the same output at every
    other copy, bit for bit, whether its sums ran in the row pass or one pixel at a time."""
    h, w, m = 48, 47, 4
    gap = k - 1  # zeros around each copy: no output reaches two copies
    motif = arr((3, m, m), F32, k, low=-1, high=1)
    starts = [(0, 0), (0, w - m), (h - m, 0), (h - m, w - m), (0, 20), (22, 0), (22, w - m),
              (h - m, 21), (21, 20), (11, 32), (33, 10)]  # fmt: skip
    x = np.zeros((2, 3, h, w), np.float32)
    for a, b in starts:
        assert not x[:, :, max(a - gap, 0) : a + m + gap, max(b - gap, 0) : b + m + gap].any()
        x[:, :, a : a + m, b : b + m] = motif
    wk = arr((3, 1, k, k), F32, 20 + k, low=-1, high=1)
    y = _run(_model(3, h, w, (k, k), [k // 2] * 4, bias=True, relu=False, weights=wk), x)
    r = k // 2
    blocks = []
    for a, b in starts:  # the outputs within reach of the copy, where they exist at all copies
        block = np.full((2, 3, m + 2 * r, m + 2 * r), np.nan, np.float32)
        for i in range(-r, m + r):
            for j in range(-r, m + r):
                if 0 <= a + i < h and 0 <= b + j < w:
                    block[:, :, i + r, j + r] = y[:, :, a + i, b + j]
        blocks.append(block)
    inside = blocks[starts.index((21, 20))]
    assert not np.isnan(inside).any() and np.abs(inside).max() > 0
    for (a, b), block in zip(starts, blocks, strict=True):
        seen = ~np.isnan(block)
        assert seen[:, :, r : r + m, r : r + m].all()
        np.testing.assert_array_equal(block[seen], inside[seen], err_msg=f"copy at {(a, b)}")
