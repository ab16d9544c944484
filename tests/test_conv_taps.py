"""Dead taps (compiler/rewrites/conv_taps.py): the kernel rows and columns of a convolution that
read only padding are cut from its weights and its pads. Each case checks the trimmed kernel
the CONV2D instruction gets, and the result against onnxruntime, the NumPy reference, and the
same model compiled without trimming (constant_weights off keeps the model's weights)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from models import F16, F32, arr, assert_matches_reference, run_c, run_ort
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler, CompilerOptions
from pyipu.compiler.rewrites.conv_taps import live_taps
from pyipu.enums import Op


def _model(
    x_shape: tuple[int, ...],
    m: int,
    kernel: tuple[int, ...],
    dt: Any = F32,
    tail: str = "",
    **attrs: Any,
) -> onnx.ModelProto:
    """x → Conv(w, b) [→ BatchNormalization → Add(x) → Relu when tail == "bn_res_relu"]."""
    onnx_dt = TensorProto.FLOAT16 if dt == F16 else TensorProto.FLOAT
    c = x_shape[1] // attrs.get("group", 1)
    inits = [
        numpy_helper.from_array(arr((m, c, *kernel), dt, 1, low=-0.5, high=0.5), "w"),
        numpy_helper.from_array(arr((m,), dt, 2), "b"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=list(kernel), **attrs)]
    out = "y"
    if tail == "bn_res_relu":
        for i, name in enumerate(["s", "o", "mu"]):
            inits.append(numpy_helper.from_array(arr((m,), dt, 3 + i), name))
        inits.append(numpy_helper.from_array(arr((m,), dt, 6, low=0.5, high=2), "var"))
        nodes += [
            helper.make_node("BatchNormalization", ["y", "s", "o", "mu", "var"], ["n"]),
            helper.make_node("Add", ["n", "x"], ["r"]),
            helper.make_node("Relu", ["r"], ["z"]),
        ]
        out = "z"
    g = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", onnx_dt, x_shape)],
        [helper.make_tensor_value_info(out, onnx_dt, None)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _conv_weight_shape(exe: Any) -> tuple[int, ...]:
    p = exe.program
    (conv,) = [i for i in p.program(p.main_programs[0]).instrs if i.op == Op.CONV2D]
    return tuple(p.tensors[conv.inputs[1]].shape)


def _check(model: onnx.ModelProto, dt: Any, want_kernel: tuple[int, ...]) -> None:
    exe = Compiler.compile(model)
    assert _conv_weight_shape(exe)[2:] == want_kernel
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    feeds = {"x": arr(shape, dt, 9, low=-2, high=2)}
    got = run_c(exe, feeds)
    assert_matches_reference(got, exe.run_reference(feeds))
    opts = CompilerOptions()
    opts.constant_weights = False
    full = Compiler.compile(model, None, opts)
    assert _conv_weight_shape(full)[2:] != want_kernel  # the model's own kernel
    tol = 1e-5 if dt == F32 else 1e-2
    for want in (run_c(full, feeds), run_ort(model, feeds)):
        for name, w in want.items():
            np.testing.assert_allclose(
                got[name].astype(np.float32), w.astype(np.float32), rtol=tol, atol=tol
            )


CASES = [
    # x shape, M, kernel, attrs, the kernel left
    ((1, 8, 28, 28), 6, (3, 3), {"pads": [36] * 4, "dilations": [36, 36]}, (1, 1)),  # ASPP
    ((1, 8, 1, 1), 5, (3, 3), {"pads": [1] * 4}, (1, 1)),  # SSD's last map
    ((1, 8, 2, 2), 5, (3, 3), {"pads": [1] * 4, "strides": [2, 2]}, (2, 2)),
    ((1, 4, 3, 3), 4, (5, 5), {"pads": [4, 4, 4, 4], "dilations": [2, 2]}, (3, 3)),
    ((1, 4, 3, 9), 3, (3, 3), {"pads": [5, 1, 5, 1], "dilations": [5, 1]}, (1, 3)),
    ((1, 4, 6, 6), 3, (3, 3), {"pads": [0, 4, 8, 4], "dilations": [4, 4]}, (2, 3)),
    ((1, 6, 7, 7), 6, (3, 3), {"pads": [24] * 4, "dilations": [24, 24], "group": 6}, (1, 1)),
    ((1, 4, 10), 3, (3,), {"pads": [12, 12], "dilations": [12]}, (1,)),  # 1-D
]


@pytest.mark.parametrize("x_shape,m,kernel,attrs,left", CASES)
def test_dead_taps_are_cut(
    x_shape: tuple[int, ...], m: int, kernel: tuple[int, ...], attrs: dict, left: tuple[int, ...]
) -> None:
    left_2d = (1, *left) if len(kernel) == 1 else left
    _check(_model(x_shape, m, kernel, **attrs), F32, left_2d)


def test_dead_taps_cut_under_a_fused_epilogue_and_in_float16() -> None:
    attrs = {"pads": [12] * 4, "dilations": [12, 12]}
    _check(_model((1, 6, 9, 9), 6, (3, 3), tail="bn_res_relu", **attrs), F32, (1, 1))
    _check(_model((1, 6, 9, 9), 6, (3, 3), F16, **attrs), F16, (1, 1))


@pytest.mark.parametrize(
    "x_shape,attrs",
    [
        ((1, 4, 28, 28), {"pads": [12] * 4, "dilations": [12, 12]}),  # every tap reads data
        ((1, 4, 5, 5), {"pads": [1] * 4}),
    ],
)
def test_live_taps_stay(x_shape: tuple[int, ...], attrs: dict) -> None:
    exe = Compiler.compile(_model(x_shape, 3, (3, 3), **attrs))
    assert _conv_weight_shape(exe) == (3, 4, 3, 3)


def test_non_finite_weights_stay() -> None:
    """0 · inf is NaN: a dead tap's infinite weight is kept, as is the NaN it gives."""
    model = _model((1, 2, 1, 1), 2, (3, 3), pads=[1] * 4)
    w = numpy_helper.to_array(model.graph.initializer[0]).copy()
    w[0, 0, 0, 0] = np.inf
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    exe = Compiler.compile(model)
    assert _conv_weight_shape(exe) == (2, 2, 3, 3)
    feeds = {"x": arr((1, 2, 1, 1), F32, 9)}
    got = run_c(exe, feeds)["y"]
    assert np.isnan(got[0, 0]).all() and np.isfinite(got[0, 1]).all()


@pytest.mark.parametrize(
    "size,out,k,s,d,pad,want",
    [
        (28, 28, 3, 1, 36, 36, (1, 1)),
        (28, 28, 3, 1, 24, 24, (0, 2)),
        (1, 1, 3, 1, 1, 1, (1, 1)),
        (2, 1, 3, 2, 1, 1, (1, 2)),
        (1, 1, 1, 1, 1, 0, (0, 0)),
        (3, 2, 3, 3, 1, 2, (0, 2)),
    ],
)
def test_live_taps(size: int, out: int, k: int, s: int, d: int, pad: int, want: tuple) -> None:
    assert live_taps(size, out, k, s, d, pad) == want
