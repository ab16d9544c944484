"""Gradient rules (pyipu.training) of cumulative sums, strided slicing, padding modes,
resizing, the index ops (GatherElements, TopK, the scatters) and ConvTranspose: each case
checked against central finite differences in float64, then its float32 backward graph run by
pyipu (tests/gradient_check.py)."""

from __future__ import annotations

import numpy as np
import pytest
from gradient_check import F32, Case, check_finite_differences, check_pyipu
from gradient_check import const as _c
from gradient_check import ints as _i
from gradient_check import op as _n
from onnx import helper

CASES = [
    Case(
        "cumsum",
        lambda t: [_i("ax", 1), _n("CumSum", ["a", "ax"])],
        {"a": (3, 4)},
        ("a",),
    ),
    Case(
        "cumsum_exclusive_reverse",
        lambda t: [_i("ax", -1), _n("CumSum", ["a", "ax"], exclusive=1, reverse=1)],
        {"a": (2, 3, 5)},
        ("a",),
    ),
    Case(
        "cumsum_exclusive_axis0",
        lambda t: [_i("ax", 0), _n("CumSum", ["a", "ax"], exclusive=1)],
        {"a": (4, 2)},
        ("a",),
    ),
    Case(
        "slice_strided",
        lambda t: [
            _i("st", [0, 1]),
            _i("en", [5, 100]),
            _i("ax", [0, 1]),
            _i("sp", [2, 3]),
            _n("Slice", ["a", "st", "en", "ax", "sp"]),
        ],
        {"a": (5, 7)},
        ("a",),
    ),
    Case(
        "slice_negative_step",
        lambda t: [
            _i("st", [-1]),
            _i("en", [-100]),
            _i("ax", [1]),
            _i("sp", [-1]),
            _n("Slice", ["a", "st", "en", "ax", "sp"]),
        ],
        {"a": (2, 5)},
        ("a",),
    ),
    Case(
        "slice_negative_stride_mixed",
        lambda t: [
            _i("st", [3, 1, 6]),
            _i("en", [0, 3, 0]),
            _i("ax", [0, 1, 2]),
            _i("sp", [-2, 1, -3]),
            _n("Slice", ["a", "st", "en", "ax", "sp"]),
        ],
        {"a": (4, 3, 7)},
        ("a",),
    ),
    Case(
        "pad_reflect",
        lambda t: [_i("p", [0, 2, 1, 0, 3, 2]), _n("Pad", ["a", "p"], mode="reflect")],
        {"a": (2, 4, 3)},
        ("a",),
    ),
    Case(
        "pad_edge",
        lambda t: [_i("p", [1, 2, 3, 0]), _n("Pad", ["a", "p"], mode="edge")],
        {"a": (3, 2)},
        ("a",),
    ),
    Case(
        "pad_edge_opset10",
        lambda t: [_n("Pad", ["a"], mode="edge", pads=[0, 3, 0, 1])],
        {"a": (2, 3)},
        ("a",),
        opset=10,
    ),
    Case(
        "pad_wrap_axes",
        lambda t: [
            _i("p", [2, 4]),
            _i("ax", [1]),
            _n("Pad", ["a", "p", "", "ax"], mode="wrap"),
        ],
        {"a": (2, 3)},
        ("a",),
        opset=19,
    ),
    Case(
        "resize_nearest_half_pixel_scales",
        lambda t: [_c("sc", [1, 1, 2, 1.5], F32), _n("Resize", ["x", "", "sc"])],
        {"x": (1, 2, 3, 4)},
        ("x",),
    ),
    Case(
        "resize_nearest_asymmetric_floor_down",
        lambda t: [
            _c("sc", [1, 1, 0.5, 0.5], F32),
            _n(
                "Resize",
                ["x", "", "sc"],
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            ),
        ],
        {"x": (2, 1, 4, 6)},
        ("x",),
    ),
    Case(
        "resize_nearest_align_corners_ceil_sizes",
        lambda t: [
            _i("sz", [1, 2, 5, 3]),
            _n(
                "Resize",
                ["x", "", "", "sz"],
                coordinate_transformation_mode="align_corners",
                nearest_mode="ceil",
            ),
        ],
        {"x": (1, 2, 3, 4)},
        ("x",),
    ),
    Case(
        "resize_linear_half_pixel_sizes",
        lambda t: [_i("sz", [1, 2, 5, 7]), _n("Resize", ["x", "", "", "sz"], mode="linear")],
        {"x": (1, 2, 3, 4)},
        ("x",),
    ),
    Case(
        "resize_linear_align_corners",
        lambda t: [
            _c("sc", [1, 1, 2, 2], F32),
            _n(
                "Resize",
                ["x", "", "sc"],
                mode="linear",
                coordinate_transformation_mode="align_corners",
            ),
        ],
        {"x": (2, 1, 3, 3)},
        ("x",),
    ),
    Case(
        "resize_linear_asymmetric_down",
        lambda t: [
            _i("sz", [1, 1, 3, 2]),
            _n(
                "Resize",
                ["x", "", "", "sz"],
                mode="linear",
                coordinate_transformation_mode="asymmetric",
            ),
        ],
        {"x": (1, 1, 4, 5)},
        ("x",),
    ),
    Case(
        "resize_linear_opset11_roi",
        lambda t: [
            _c("roi", np.zeros(0), F32),
            _c("sc", [1, 1, 1.5, 2], F32),
            _n("Resize", ["x", "roi", "sc"], mode="linear"),
        ],
        {"x": (1, 2, 2, 3)},
        ("x",),
        opset=11,
    ),
    Case(
        "resize_axes_opset19",
        lambda t: [
            _c("sc", [2, 0.5], F32),
            _n(
                "Resize",
                ["x", "", "sc"],
                axes=[2, 3],
                mode="linear",
                coordinate_transformation_mode="half_pixel_symmetric",
            ),
        ],
        {"x": (1, 1, 3, 4)},
        ("x",),
        opset=19,
    ),
    Case(
        "gather_elements_axis0",
        lambda t: [_i("ix", [[0, 2, -1], [3, 0, 2]]), _n("GatherElements", ["a", "ix"])],
        {"a": (4, 3)},
        ("a",),
    ),
    Case(
        "gather_elements_smaller_index",
        lambda t: [
            _i("ix", [[[1, 1], [0, 2]]]),
            _n("GatherElements", ["a", "ix"], axis=-1),
        ],
        {"a": (2, 3, 3)},
        ("a",),
        # onnx's reference wants indices as large as the data off the axis; ONNX Runtime has
        # no float64 OneHot (the op is linear: a large float32 step is exact)
        ort=True,
        fd_f32=True,
    ),
    Case(
        "topk",
        lambda t: [_i("k", [2]), helper.make_node("TopK", ["a", "k"], ["y", "i"])],
        {"a": (3, 5)},
        ("a",),
    ),
    Case(
        "topk_smallest_axis0",
        lambda t: [
            _i("k", [3]),
            helper.make_node("TopK", ["a", "k"], ["y", "i"], axis=0, largest=0),
        ],
        {"a": (4, 2, 3)},
        ("a",),
    ),
    Case(
        "scatter_elements",
        lambda t: [
            _i("ix", [[1, 0], [2, 3], [0, 1]]),
            _n("ScatterElements", ["a", "ix", "u"], axis=1),
        ],
        {"a": (3, 4), "u": (3, 2)},
        ("a", "u"),
    ),
    Case(
        "scatter_elements_axis0_negative",
        lambda t: [_i("ix", [[-1, 0, 1]]), _n("ScatterElements", ["a", "ix", "u"])],
        {"a": (3, 3), "u": (1, 3)},
        ("a", "u"),
    ),
    Case(
        "scatter_elements_add",
        lambda t: [
            _i("ix", [[1, 1, 0], [2, 0, 2]]),
            _n("ScatterElements", ["a", "ix", "u"], axis=1, reduction="add"),
        ],
        {"a": (2, 3), "u": (2, 3)},
        ("a", "u"),
        opset=16,
    ),
    Case(
        "scatter_nd_rows",
        lambda t: [_i("ix", [[2], [0]]), _n("ScatterND", ["a", "ix", "u"])],
        {"a": (4, 3), "u": (2, 3)},
        ("a", "u"),
    ),
    Case(
        "scatter_nd_elements",
        lambda t: [_i("ix", [[0, 1, 2], [1, 0, 0]]), _n("ScatterND", ["a", "ix", "u"])],
        {"a": (2, 2, 3), "u": (2,)},
        ("a", "u"),
    ),
    Case(
        "scatter_nd_add",
        lambda t: [
            _i("ix", [[1], [1], [0]]),
            _n("ScatterND", ["a", "ix", "u"], reduction="add"),
        ],
        {"a": (3, 2), "u": (3, 2)},
        ("a", "u"),
        opset=16,
    ),
    # onnx's reference ConvTranspose gets groups wrong, and ONNX Runtime has no float64 one
    Case(
        "conv_transpose",
        lambda t: [_n("ConvTranspose", ["x", "w", "b"], pads=[1, 0, 1, 1])],
        {"x": (1, 2, 4, 4), "w": (2, 3, 3, 3), "b": (3,)},
        ("x", "w", "b"),
        ort=True,
        fd_f32=True,
        eps=0.25,
    ),
    Case(
        "conv_transpose_stride_outpad",
        lambda t: [
            _n(
                "ConvTranspose",
                ["x", "w"],
                strides=[2, 2],
                pads=[1, 0, 0, 0],
                output_padding=[1, 1],
            )
        ],
        {"x": (2, 2, 3, 3), "w": (2, 2, 3, 2)},
        ("x", "w"),
        ort=True,
        fd_f32=True,
        eps=0.25,
    ),
    Case(
        "conv_transpose_group_dilated",
        lambda t: [
            _n(
                "ConvTranspose",
                ["x", "w"],
                group=2,
                dilations=[2, 1],
                strides=[1, 2],
                pads=[1, 1, 0, 1],
            )
        ],
        {"x": (1, 4, 3, 4), "w": (4, 3, 2, 3)},
        ("x", "w"),
        ort=True,
        fd_f32=True,
        eps=0.25,
    ),
    Case(
        "conv_transpose_1d_depthwise",
        lambda t: [_n("ConvTranspose", ["x", "w"], group=3, strides=[3], output_padding=[2])],
        {"x": (2, 3, 4), "w": (3, 1, 2)},
        ("x", "w"),
        ort=True,
        fd_f32=True,
        eps=0.25,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case: Case) -> None:
    check_finite_differences(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_pyipu_runs_the_backward_graph(case: Case) -> None:
    check_pyipu(case)
