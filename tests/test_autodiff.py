"""Gradient rules (pyipu.training) of element-wise ops, matrix products, reshaping, reductions,
softmax, convolution, pooling, normalisation and the losses: each case checked against central
finite differences in float64, then its float32 backward graph run by pyipu
(tests/gradient_check.py)."""

from __future__ import annotations

import numpy as np
import pytest
from gradient_check import (
    F32,
    F64,
    Case,
    check_finite_differences,
    check_pyipu,
    feeds_of,
    model_of,
    with_outputs,
)
from gradient_check import const as _c
from gradient_check import ints as _i
from gradient_check import op as _n
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pyipu.compiler.errors import UnsupportedAttributeError, UnsupportedOpError
from pyipu.training import RULES, gradients

CASES = [
    Case(
        "add_broadcast",
        lambda t: [_n("Add", ["a", "b"])],
        {"a": (2, 3, 4), "b": (3, 1)},
        ("a", "b"),
    ),
    Case("sub", lambda t: [_n("Sub", ["a", "b"])], {"a": (3, 4), "b": (4,)}, ("a", "b")),
    Case("mul", lambda t: [_n("Mul", ["a", "b"])], {"a": (2, 3), "b": (1, 3)}, ("a", "b")),
    Case(
        "div",
        lambda t: [_n("Div", ["a", "b"])],
        {"a": (2, 3), "b": (2, 3)},
        ("a", "b"),
        positive=("b",),
    ),
    Case("sum3", lambda t: [_n("Sum", ["a", "b", "a"])], {"a": (2, 3), "b": (3,)}, ("a", "b")),
    Case("neg_exp", lambda t: [_n("Neg", ["a"], "m"), _n("Exp", ["m"])], {"a": (5,)}, ("a",)),
    Case("log", lambda t: [_n("Log", ["a"])], {"a": (5,)}, ("a",), positive=("a",)),
    Case("sqrt", lambda t: [_n("Sqrt", ["a"])], {"a": (5,)}, ("a",), positive=("a",)),
    Case("abs", lambda t: [_n("Abs", ["a"])], {"a": (6,)}, ("a",)),
    Case("reciprocal", lambda t: [_n("Reciprocal", ["a"])], {"a": (4,)}, ("a",), positive=("a",)),
    Case("sigmoid", lambda t: [_n("Sigmoid", ["a"])], {"a": (2, 5)}, ("a",)),
    Case("tanh", lambda t: [_n("Tanh", ["a"])], {"a": (2, 5)}, ("a",)),
    Case("sin_cos", lambda t: [_n("Sin", ["a"], "s"), _n("Cos", ["s"])], {"a": (5,)}, ("a",)),
    Case("relu", lambda t: [_n("Relu", ["a"])], {"a": (3, 4)}, ("a",)),
    Case("leaky_relu", lambda t: [_n("LeakyRelu", ["a"], alpha=0.2)], {"a": (3, 4)}, ("a",)),
    # onnx's reference Erf is an approximation (1e-8 off): a larger step
    Case("erf", lambda t: [_n("Erf", ["a"])], {"a": (6,)}, ("a",), eps=1e-3),
    Case(
        "pow",
        lambda t: [_c("p", 3.0, t), _n("Pow", ["a", "p"])],
        {"a": (4,)},
        ("a",),
        positive=("a",),
    ),
    Case(
        "clip",
        lambda t: [_c("lo", -0.5, t), _c("hi", 0.5, t), _n("Clip", ["a", "lo", "hi"])],
        {"a": (8,)},
        ("a",),
    ),
    Case(
        "clip_opset10",
        lambda t: [_n("Clip", ["a"], min=-0.5, max=0.5)],
        {"a": (8,)},
        ("a",),
        opset=10,
    ),
    Case(
        "where",
        lambda t: [_c("z", 0.0, t), _n("Greater", ["a", "z"], "c"), _n("Where", ["c", "a", "b"])],
        {"a": (3, 4), "b": (4,)},
        ("a", "b"),
    ),
    # linear, but through float32: a step far above float32's rounding
    Case(
        "cast_roundtrip",
        lambda t: [_n("Cast", ["a"], "f", to=F32), _n("Cast", ["f"], to=t)],
        {"a": (4,)},
        ("a",),
        eps=1e-2,
    ),
    Case("matmul", lambda t: [_n("MatMul", ["a", "b"])], {"a": (3, 4), "b": (4, 5)}, ("a", "b")),
    Case(
        "matmul_batched",
        lambda t: [_n("MatMul", ["a", "b"])],
        {"a": (2, 3, 4), "b": (4, 5)},
        ("a", "b"),
    ),
    Case(
        "matmul_rank4_by_matrix",
        lambda t: [_n("MatMul", ["a", "b"])],
        {"a": (2, 2, 3, 4), "b": (4, 5)},
        ("a", "b"),
    ),
    Case(
        "matmul_batched_opset9",  # no Gemm without C: batched MatMuls and a ReduceSum
        lambda t: [_n("MatMul", ["a", "b"])],
        {"a": (2, 3, 4), "b": (4, 5)},
        ("a", "b"),
        opset=9,
    ),
    Case(
        "matmul_vector",
        lambda t: [_n("MatMul", ["a", "b"])],
        {"a": (4,), "b": (2, 4, 3)},
        ("a", "b"),
    ),
    Case(
        "matmul_bcast",
        lambda t: [_n("MatMul", ["a", "b"])],
        {"a": (2, 1, 3, 4), "b": (3, 4, 2)},
        ("a", "b"),
    ),
    Case(
        "gemm",
        lambda t: [_n("Gemm", ["a", "b", "c"], alpha=0.5, beta=2.0)],
        {"a": (3, 4), "b": (4, 5), "c": (5,)},
        ("a", "b", "c"),
    ),
    Case(
        "gemm_trans",
        lambda t: [_n("Gemm", ["a", "b", "c"], transA=1, transB=1)],
        {"a": (4, 3), "b": (5, 4), "c": (3, 5)},
        ("a", "b", "c"),
    ),
    Case(
        "gemm_transA",
        lambda t: [_n("Gemm", ["a", "b", "c"], transA=1, alpha=1.5)],
        {"a": (4, 3), "b": (4, 5), "c": (5,)},
        ("a", "b", "c"),
    ),
    Case(
        "gemm_transB",  # torch's Linear
        lambda t: [_n("Gemm", ["a", "b", "c"], transB=1)],
        {"a": (3, 4), "b": (5, 4), "c": (5,)},
        ("a", "b", "c"),
    ),
    Case(
        "gemm_opset9",  # C required: the gradients are MatMuls and Transposes
        lambda t: [_n("Gemm", ["a", "b", "c"], transB=1, alpha=0.5)],
        {"a": (3, 4), "b": (5, 4), "c": (3, 5)},
        ("a", "b", "c"),
        opset=9,
    ),
    Case(
        "gather_rows",
        lambda t: [_i("idx", [[0, 2], [2, 3]]), _n("Gather", ["a", "idx"])],
        {"a": (4, 3)},
        ("a",),
    ),
    Case("max", lambda t: [_n("Max", ["a", "b"])], {"a": (3, 4), "b": (4,)}, ("a", "b")),
    Case(
        "min_opset11",
        lambda t: [_n("Min", ["a", "b"])],
        {"a": (3, 4), "b": (3, 4)},
        ("a", "b"),
        opset=11,
    ),
    Case(
        "slice",
        lambda t: [
            _i("st", [1, -3]),
            _i("en", [3, 100]),
            _i("ax", [0, 1]),
            _n("Slice", ["a", "st", "en", "ax"]),
        ],
        {"a": (4, 5)},
        ("a",),
    ),
    Case(
        "slice_opset9",
        lambda t: [_n("Slice", ["a"], starts=[1], ends=[-1], axes=[1])],
        {"a": (2, 5)},
        ("a",),
        opset=9,
    ),
    Case("pad", lambda t: [_i("p", [1, 0, 2, 3]), _n("Pad", ["a", "p"])], {"a": (2, 3)}, ("a",)),
    Case(
        "pad_opset10",
        lambda t: [_n("Pad", ["a"], pads=[0, 2, 1, 0])],
        {"a": (2, 3)},
        ("a",),
        opset=10,
    ),
    Case(
        "split",
        lambda t: [
            _i("sp", [1, 3]),
            helper.make_node("Split", ["a", "sp"], ["y", "unused"], axis=1),
        ],
        {"a": (2, 4)},
        ("a",),
    ),
    Case("tile", lambda t: [_i("r", [2, 1, 3]), _n("Tile", ["a", "r"])], {"a": (2, 3, 2)}, ("a",)),
    Case("reshape", lambda t: [_i("s", [4, 3]), _n("Reshape", ["a", "s"])], {"a": (2, 6)}, ("a",)),
    Case("flatten", lambda t: [_n("Flatten", ["a"], axis=2)], {"a": (2, 3, 4)}, ("a",)),
    Case(
        "squeeze_unsqueeze",
        lambda t: [_i("ax", [0]), _n("Unsqueeze", ["a", "ax"], "u"), _n("Squeeze", ["u", "ax"])],
        {"a": (3, 2)},
        ("a",),
    ),
    Case("expand", lambda t: [_i("s", [2, 3, 4]), _n("Expand", ["a", "s"])], {"a": (3, 1)}, ("a",)),
    Case("transpose", lambda t: [_n("Transpose", ["a"], perm=[2, 0, 1])], {"a": (2, 3, 4)}, ("a",)),
    Case(
        "concat",
        lambda t: [_n("Concat", ["a", "b", "a"], axis=1)],
        {"a": (2, 3), "b": (2, 2)},
        ("a", "b"),
    ),
    Case(
        "concat_opset11",
        lambda t: [_n("Concat", ["a", "b"], axis=0)],
        {"a": (2, 3), "b": (1, 3)},
        ("a", "b"),
        opset=11,
    ),
    Case(
        "reduce_sum",
        lambda t: [_i("ax", [1]), _n("ReduceSum", ["a", "ax"], keepdims=0)],
        {"a": (2, 3, 4)},
        ("a",),
    ),
    Case(
        "reduce_mean_opset11",
        lambda t: [_n("ReduceMean", ["a"], axes=[0, 2])],
        {"a": (2, 3, 4)},
        ("a",),
        opset=11,
    ),
    Case("reduce_all", lambda t: [_n("ReduceSum", ["a"], keepdims=0)], {"a": (2, 3)}, ("a",)),
    Case("softmax", lambda t: [_n("Softmax", ["a"], axis=1)], {"a": (2, 4, 3)}, ("a",)),
    # before opset 13 Softmax normalises over every axis from `axis` on (onnx's reference
    # evaluator normalises over `axis` only)
    Case(
        "softmax_opset11",
        lambda t: [_n("Softmax", ["a"], axis=1)],
        {"a": (2, 4, 3)},
        ("a",),
        opset=11,
        ort=True,
    ),
    Case("log_softmax", lambda t: [_n("LogSoftmax", ["a"], axis=-1)], {"a": (3, 5)}, ("a",)),
    Case(
        "conv",
        lambda t: [_n("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1])],
        {"x": (1, 2, 5, 5), "w": (3, 2, 3, 3), "b": (3,)},
        ("x", "w", "b"),
    ),
    Case(
        "conv_stride",
        lambda t: [_n("Conv", ["x", "w"], strides=[2, 2])],
        {"x": (2, 2, 7, 7), "w": (4, 2, 3, 3)},
        ("x", "w"),
    ),
    Case(
        "conv_leftover",
        lambda t: [_n("Conv", ["x", "w"], strides=[2, 2])],
        {"x": (1, 1, 6, 6), "w": (2, 1, 3, 3)},
        ("x", "w"),
    ),
    Case(
        "conv_group",
        lambda t: [_n("Conv", ["x", "w"], group=2, pads=[1, 0, 1, 0])],
        {"x": (2, 4, 5, 5), "w": (4, 2, 3, 3)},
        ("x", "w"),
        ort=True,
        fd_f32=True,
        eps=0.25,
    ),
    Case(
        "conv_depthwise",
        lambda t: [_n("Conv", ["x", "w"], group=3, pads=[1, 1, 1, 1], strides=[2, 2])],
        {"x": (1, 3, 6, 6), "w": (3, 1, 3, 3)},
        ("x", "w"),
    ),
    Case(
        "conv_dilated",
        lambda t: [_n("Conv", ["x", "w"], dilations=[2, 2])],
        {"x": (1, 2, 7, 7), "w": (2, 2, 3, 3)},
        ("x", "w"),
    ),
    Case(
        "conv_1d",
        lambda t: [_n("Conv", ["x", "w"], pads=[2, 0])],
        {"x": (2, 3, 8), "w": (4, 3, 3)},
        ("x", "w"),
    ),
    Case(
        "conv_same",
        lambda t: [_n("Conv", ["x", "w"], auto_pad="SAME_UPPER", strides=[2, 2])],
        {"x": (1, 2, 6, 6), "w": (2, 2, 3, 3)},
        ("x", "w"),
    ),
    Case(
        "max_pool_overlap",
        lambda t: [_n("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
        {"x": (1, 2, 6, 6)},
        ("x",),
        ort=True,
        fd_f32=True,
    ),
    Case(
        "max_pool_2x2",
        lambda t: [_n("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])],
        {"x": (2, 3, 4, 4)},
        ("x",),
        ort=True,
        fd_f32=True,
    ),
    Case(
        "max_pool_opset11",
        lambda t: [_n("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
        {"x": (1, 2, 5, 5)},
        ("x",),
        opset=11,
        ort=True,
        fd_f32=True,
    ),
    Case(
        "avg_pool_pad",
        lambda t: [_n("AveragePool", ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
        {"x": (1, 2, 5, 5)},
        ("x",),
        ort=True,
        fd_f32=True,
    ),
    Case(
        "avg_pool_include_pad",
        lambda t: [
            _n(
                "AveragePool",
                ["x"],
                kernel_shape=[3, 3],
                strides=[2, 2],
                pads=[1, 1, 1, 1],
                count_include_pad=1,
            )
        ],
        {"x": (1, 2, 5, 5)},
        ("x",),
        ort=True,
        fd_f32=True,
    ),
    Case(
        "avg_pool_2x2",
        lambda t: [_n("AveragePool", ["x"], kernel_shape=[2, 2], strides=[2, 2])],
        {"x": (1, 3, 4, 6)},
        ("x",),
        ort=True,
        fd_f32=True,
    ),
    Case(
        "global_avg_pool", lambda t: [_n("GlobalAveragePool", ["x"])], {"x": (2, 3, 4, 5)}, ("x",)
    ),
    Case(
        "batch_norm_inference",
        lambda t: [
            _c("m", [0.1, -0.2, 0.3], t),
            _c("v", [1.5, 0.7, 2.0], t),
            _n("BatchNormalization", ["x", "s", "b", "m", "v"]),
        ],
        {"x": (2, 3, 4, 4), "s": (3,), "b": (3,)},
        ("x", "s", "b"),
        ort=True,  # onnx's reference does not normalise with the given statistics
    ),
    Case(
        "batch_norm_training",
        lambda t: [
            _c("m", [0.1, -0.2, 0.3], t),
            _c("v", [1.5, 0.7, 2.0], t),
            helper.make_node(
                "BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1
            ),
        ],
        {"x": (4, 3, 2, 2), "s": (3,), "b": (3,)},
        ("x", "s", "b"),
        opset=15,
        ort=True,  # onnx's reference keeps the running statistics in its training mode
    ),
    Case(
        "layer_norm",
        lambda t: [_n("LayerNormalization", ["x", "s", "b"])],
        {"x": (2, 3, 5), "s": (5,), "b": (5,)},
        ("x", "s", "b"),
        opset=17,
    ),
    Case(
        "layer_norm_axis1",
        lambda t: [_n("LayerNormalization", ["x", "s"], axis=1)],
        {"x": (2, 3, 4), "s": (3, 4)},
        ("x", "s"),
        opset=17,
    ),
    Case(
        "dropout_training",
        lambda t: [
            _c("ratio", 0.5, t),
            helper.make_node(
                "Constant", [], ["train"], value=numpy_helper.from_array(np.array(True))
            ),
            helper.make_node("Dropout", ["x", "ratio", "train"], ["y", "mask"], seed=3),
        ],
        {"x": (4, 5)},
        ("x",),
        no_pyipu="random: pyipu draws other masks than onnx's reference",
    ),
    Case("dropout_inference", lambda t: [_n("Dropout", ["x"])], {"x": (4, 5)}, ("x",)),
    Case(
        "nll_loss",
        lambda t: [
            _i("lab", [0, 2, 1, 2]),
            _n("LogSoftmax", ["x"], "lp", axis=1),
            _n("NegativeLogLikelihoodLoss", ["lp", "lab"], ignore_index=1),
        ],
        {"x": (4, 3)},
        ("x",),
    ),
    Case(
        "softmax_cross_entropy",
        lambda t: [
            _i("lab", [[0, 2], [1, 1]]),
            _c("cw", [0.5, 1.0, 2.0], t),
            _n("SoftmaxCrossEntropyLoss", ["x", "lab", "cw"], reduction="sum"),
        ],
        {"x": (2, 3, 2)},
        ("x",),
    ),
    Case("erf_2d", lambda t: [_n("Erf", ["a"])], {"a": (3, 4)}, ("a",), eps=1e-3),
    Case(
        "pow_both",
        lambda t: [_n("Pow", ["a", "p"])],
        {"a": (3, 4), "p": (4,)},
        ("a", "p"),
        positive=("a",),
    ),
    Case(
        "pow_scalar_exponent",
        lambda t: [_n("Pow", ["a", "p"])],
        {"a": (5,), "p": (1,)},
        ("a", "p"),
        positive=("a", "p"),
    ),
    Case(
        "clip_bound_inputs",
        lambda t: [_n("Neg", ["p"], "lo"), _n("Clip", ["a", "lo", "q"])],
        {"a": (3, 4), "p": (), "q": ()},
        ("a", "p", "q"),
        positive=("p", "q"),
    ),
    Case(
        "clip_min_input_only",
        lambda t: [_n("Clip", ["a", "lo"])],
        {"a": (6,), "lo": ()},
        ("a", "lo"),
    ),
    Case(
        "clip_max_input_only",
        lambda t: [_n("Clip", ["a", "", "hi"])],
        {"a": (2, 3), "hi": ()},
        ("a", "hi"),
    ),
    Case(
        "where_cond_broadcast",
        lambda t: [_c("z", 0.0, t), _n("Greater", ["c0", "z"], "c"), _n("Where", ["c", "a", "b"])],
        {"c0": (4,), "a": (3, 1), "b": (2, 3, 4)},
        ("a", "b"),
    ),
    Case(
        "expand_both_ways",
        lambda t: [_i("s", [4, 1]), _n("Expand", ["a", "s"])],
        {"a": (2, 1, 3)},
        ("a",),
    ),
    Case(
        "gelu_exact",
        lambda t: [_n("Gelu", ["a"])],
        {"a": (3, 5)},
        ("a",),
        opset=20,
        eps=1e-3,  # onnx's reference Gelu is built on its approximate erf
    ),
    Case(
        "gelu_tanh",
        lambda t: [_n("Gelu", ["a"], approximate="tanh")],
        {"a": (2, 3, 4)},
        ("a",),
        opset=20,
    ),
    Case(
        "mlp",
        lambda t: [
            _n("MatMul", ["x", "w1"], "h"),
            _n("Add", ["h", "b1"], "hb"),
            _n("Relu", ["hb"], "r"),
            _n("MatMul", ["r", "w2"], "o"),
            _n("LogSoftmax", ["o"], "y", axis=1),
        ],
        {"x": (4, 6), "w1": (6, 5), "b1": (5,), "w2": (5, 3)},
        ("w1", "b1", "w2"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case: Case) -> None:
    check_finite_differences(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_pyipu_runs_the_backward_graph(case: Case) -> None:
    check_pyipu(case)


@pytest.mark.parametrize("op", ["Softplus", "Elu"])
def test_an_op_without_a_rule_is_named(op: str) -> None:
    case = Case(op, lambda t: [_n(op, ["a"], name="pick")], {"a": (4,)}, ("a",))
    assert op not in RULES
    with pytest.raises(UnsupportedOpError, match=f"no gradient for {op} \\(node 'pick'\\)"):
        gradients(model_of(case, F64), "loss", ["a"])


@pytest.mark.parametrize(
    ("name", "nodes", "message"),
    [
        (
            "resize_cubic",
            lambda t: [_c("sc", [1, 1, 2, 2], F32), _n("Resize", ["a", "", "sc"], mode="cubic")],
            "modes nearest and linear",
        ),
        (
            "resize_tf_crop",
            lambda t: [
                _c("sc", [1, 1, 2, 2], F32),
                _n("Resize", ["a", "", "sc"], coordinate_transformation_mode="tf_crop_and_resize"),
            ],
            "coordinate_transformation_mode 'tf_crop_and_resize'",
        ),
        (
            "resize_nearest_mode",
            lambda t: [
                _c("sc", [1, 1, 2, 2], F32),
                _n("Resize", ["a", "", "sc"], nearest_mode="up"),
            ],
            "unknown nearest_mode 'up'",
        ),
        (
            "scatter_mul",
            lambda t: [
                _i("ix", [[0, 1]]),
                _n("ScatterElements", ["a", "ix", "u"], axis=1, reduction="mul"),
            ],
            "reduction 'none' and 'add'",
        ),
        (
            "conv_transpose_output_shape",
            lambda t: [_n("ConvTranspose", ["a", "w"], output_shape=[4, 4])],
            "explicit pads",
        ),
    ],
)
def test_attributes_without_a_gradient_are_named(name: str, nodes, message: str) -> None:
    shapes = {"a": (1, 1, 2, 2), "u": (1, 2), "w": (1, 1, 3, 3)}
    if name == "scatter_mul":
        shapes["a"] = (2, 2)
    used = {v for node in nodes(F64) for v in node.input}
    case = Case(name, nodes, {k: v for k, v in shapes.items() if k in used}, ("a",))
    with pytest.raises(UnsupportedAttributeError, match=message):
        gradients(model_of(case, F64), "loss", ["a"])


def test_unused_and_integer_paths() -> None:
    case = Case("partial", lambda t: [_n("Mul", ["a", "a"])], {"a": (3,), "b": (2,)}, ("a", "b"))
    grad_model, names = gradients(model_of(case, F64), "loss", ["a", "b"])
    feeds = feeds_of(case, np.float64)
    ga, gb = ReferenceEvaluator(with_outputs(grad_model, [names["a"], names["b"]])).run(None, feeds)
    assert not gb.any() and gb.shape == (2,)  # the loss does not depend on b
    assert ga.shape == (3,)


def test_shapes_computed_in_the_graph_are_folded() -> None:
    """A Reshape to [batch, -1] with the batch read by Shape/Gather/Unsqueeze/Concat, as torch's
    exporter writes `x.view(x.shape[0], -1)`: shape inference leaves its output unknown, the
    differentiation folds the shape first. The weight stays an initializer, W's use unfolded."""
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 3, 4)), rng.standard_normal((12, 5))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "W"], ["y"]),
        helper.make_node("Mul", ["y", "y"], ["sq"]),
        helper.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0),
    ]
    inits = [
        numpy_helper.from_array(w, "W"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    g = helper.make_graph(
        nodes,
        "reshape",
        [helper.make_tensor_value_info("x", F64, x.shape)],
        [helper.make_tensor_value_info("loss", F64, [])],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    grad_model, names = gradients(model, "loss", ["W"])
    assert "W" in {i.name for i in grad_model.graph.initializer}
    assert "Shape" not in {n.op_type for n in grad_model.graph.node}
    (got,) = ReferenceEvaluator(with_outputs(grad_model, [names["W"]])).run(None, {"x": x})
    flat = x.reshape(2, 12)
    np.testing.assert_allclose(got, 2 * flat.T @ (flat @ w), rtol=1e-12)
