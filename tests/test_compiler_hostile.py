"""Hostile models: every one must fail with a typed pyipu.Error naming the problem, quickly and
without allocating what the model asks for (sizes of 2^40 and more).

`HOSTILE` holds the models given to Compiler.compile (71 of them); the file and runner cases
follow.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyipu
from pyipu import errors
from pyipu.compiler import CompileError, Compiler, CompilerOptions
from pyipu.compiler.ops import REGISTRY
from pyipu.runtime import Runner

BIG = 1 << 40
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _vi(name: str, dtype: int = F, shape: tuple[int, ...] = (2, 3)) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, list(shape))


def _out(*names: str) -> list[onnx.ValueInfoProto]:
    return [helper.make_empty_tensor_value_info(n) for n in names]


def _c(name: str, value: object, dtype: type = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[onnx.TensorProto] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _node(op: str, ins: list[str], outs: list[str], **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs, **attrs)


def _relu(opset: int = 17, shape: tuple[int, ...] = (2, 3)) -> onnx.ModelProto:
    return _model(
        [_node("Relu", ["x"], ["y"])], [_vi("x", shape=shape)], [_vi("y", shape=shape)], opset=opset
    )


def _unary_const(
    op: str, const: onnx.TensorProto, shape=(2, 3), opset=17, **attrs
) -> onnx.ModelProto:
    node = _node(op, ["x", const.name], ["y"], **attrs)
    return _model([node], [_vi("x", shape=shape)], _out("y"), [const], opset)


def _resize(scale: float) -> onnx.ModelProto:
    node = _node("Resize", ["x", "", "s"], ["y"], mode="nearest")
    s = _c("s", [1, 1, scale, 1], np.float32)
    return _model([node], [_vi("x", shape=(1, 1, 2, 2))], _out("y"), [s], 13)


def _if(runtime_cond: bool) -> onnx.ModelProto:
    then = helper.make_graph(
        [_node("Identity", ["x"], ["a"]), _node("Identity", ["x"], ["b"])],
        "then",
        [],
        [_vi("a"), _vi("b")],
    )
    other = helper.make_graph([_node("Identity", ["x"], ["a2"])], "else", [], [_vi("a2")])
    node = _node("If", ["cond"], ["o1", "o2"], then_branch=then, else_branch=other)
    if runtime_cond:
        return _model([node], [_vi("x"), _vi("cond", TensorProto.BOOL, ())], _out("o1"))
    return _model([node], [_vi("x")], _out("o1"), [_c("cond", True, np.bool_)])


def _range(limit: int, delta: int = 1, via_constant: bool = False) -> onnx.ModelProto:
    nodes = [
        _node("Range", ["a", "b", "d"], ["r"]),
        _node("Cast", ["r"], ["rf"], to=F),
        _node("ReduceSum", ["rf"], ["s"], keepdims=0),
        _node("Add", ["x", "s"], ["y"]),
    ]
    inits = [_c("a", 0), _c("d", delta)]
    if via_constant:  # as torch exports it
        nodes.insert(0, _node("Constant", [], ["b"], value=_c("b", limit)))
    else:
        inits.append(_c("b", limit))
    return _model(nodes, [_vi("x")], [_vi("y")], inits)


def _huge_initializer() -> onnx.ModelProto:
    w = TensorProto(name="w", data_type=F, dims=[BIG, BIG])
    w.raw_data = b"\0" * 8
    return _model([_node("Add", ["x", "w"], ["y"])], [_vi("x")], _out("y"), [w])


def _generator(op: str, *values: tuple[str, object, type]) -> onnx.ModelProto:
    inits = [_c(n, v, t) for n, v, t in values]
    return _model([_node(op, [n for n, _, _ in values], ["y"])], [], _out("y"), inits)


# name -> (model, error class, words the message must contain)
HOSTILE: dict[str, tuple[Callable[[], object], type[pyipu.Error], str]] = {
    "truncated_bytes": (lambda: _relu().SerializeToString()[:20], CompileError, "not a valid ONNX"),
    "garbage_bytes": (lambda: b"\x00\xff" * 50, CompileError, "not a valid ONNX"),
    "popef_bytes": (lambda: Compiler.compile(_relu()).to_bytes(), CompileError, "PopEF executable"),
    "empty_bytes": (lambda: b"", CompileError, "opset"),
    "input_dims_2^40": (lambda: _relu(shape=(BIG, 2)), errors.ShapeError, "'x'"),
    "initializer_dims_2^40": (_huge_initializer, CompileError, "'w'"),
    "tile_2^40": (lambda: _unary_const("Tile", _c("r", [BIG, 1])), errors.ShapeError, "bytes"),
    "tile_2^40_both": (
        lambda: _unary_const("Tile", _c("r", [BIG, BIG])),
        errors.ShapeError,
        "bytes",
    ),
    "pad_2^40": (lambda: _unary_const("Pad", _c("p", [0, 0, BIG, 0])), errors.ShapeError, "bytes"),
    "pad_-2^40": (lambda: _unary_const("Pad", _c("p", [0, 0, -BIG, 0])), CompileError, "pads"),
    "dft_2^40": (
        lambda: _unary_const("DFT", _c("l", BIG), shape=(1, 4, 1), opset=20, onesided=0),
        errors.ShapeError,
        "bytes",
    ),
    "expand_2^40": (
        lambda: _unary_const("Expand", _c("s", [BIG, 2, 3])),
        errors.ShapeError,
        "bytes",
    ),
    "onehot_2^40": (
        lambda: _model(
            [_node("OneHot", ["i", "d", "v"], ["y"])],
            [_vi("i", I64, (2,))],
            _out("y"),
            [_c("d", BIG), _c("v", [0, 1], np.float32)],
        ),
        errors.ShapeError,
        "bytes",
    ),
    "eyelike_2^40": (
        lambda: _model([_node("EyeLike", ["x"], ["y"])], [_vi("x", shape=(BIG, BIG))], _out("y")),
        errors.ShapeError,
        "bytes",
    ),
    "upsample_1e12": (
        lambda: _unary_const("Upsample", _c("s", [1, 1, 1e12, 1e12], np.float32), (1, 1, 2, 2), 9),
        errors.ShapeError,
        "bytes",
    ),
    "resize_sizes_2^40": (
        lambda: _model(
            [_node("Resize", ["x", "", "", "sz"], ["y"], mode="nearest")],
            [_vi("x", shape=(1, 1, 2, 2))],
            _out("y"),
            [_c("sz", [1, 1, BIG, BIG])],
            13,
        ),
        errors.ShapeError,
        "bytes",
    ),
    "opset_2^40": (lambda: _relu(opset=BIG), errors.UnsupportedError, "opset"),
    "opset_-3": (lambda: _relu(opset=-3), errors.UnsupportedError, "opset"),
    "opset_0": (lambda: _relu(opset=0), errors.UnsupportedError, "opset"),
    "resize_scale_inf": (lambda: _resize(np.inf), errors.ShapeError, "finite"),
    "resize_scale_nan": (lambda: _resize(np.nan), errors.ShapeError, "finite"),
    "resize_scale_0": (lambda: _resize(0.0), errors.ShapeError, "positive"),
    "resize_scale_negative": (lambda: _resize(-2.0), errors.ShapeError, "positive"),
    "resize_scale_1e30": (lambda: _resize(1e30), errors.ShapeError, "too large"),
    "if_branch_outputs_differ_const_cond": (lambda: _if(False), CompileError, "else_branch"),
    "if_branch_outputs_differ_runtime_cond": (lambda: _if(True), CompileError, "else_branch"),
    "range_2^40": (lambda: _range(BIG), errors.ShapeError, "too large"),
    "range_2^40_constant_node": (
        lambda: _range(BIG, via_constant=True),
        errors.ShapeError,
        "too large",
    ),
    "range_delta_0": (lambda: _range(5, delta=0), errors.ShapeError, "delta"),
    "constant_of_shape_2^80": (
        lambda: _generator("ConstantOfShape", ("s", [BIG, BIG], np.int64)),
        errors.ShapeError,
        "too large",
    ),
    "constant_of_shape_negative": (
        lambda: _generator("ConstantOfShape", ("s", [-4], np.int64)),
        CompileError,
        "ConstantOfShape",
    ),
    "hann_window_2^40": (
        lambda: _generator("HannWindow", ("n", BIG, np.int64)),
        errors.ShapeError,
        "too large",
    ),
    "reshape_wrong_count": (
        lambda: _unary_const("Reshape", _c("s", [4, 4])),
        errors.ShapeError,
        "reshape",
    ),
    "reshape_two_minus_ones": (
        lambda: _unary_const("Reshape", _c("s", [-1, -1])),
        errors.ShapeError,
        "-1",
    ),
    "split_sizes_not_summing": (
        lambda: _model(
            [_node("Split", ["x", "s"], ["a", "b"], axis=1)],
            [_vi("x")],
            _out("a", "b"),
            [_c("s", [1, 5])],
        ),
        errors.ShapeError,
        "split",
    ),
    "tile_negative": (lambda: _unary_const("Tile", _c("r", [-1, 1])), errors.ShapeError, "repeats"),
    "transpose_bad_perm": (
        lambda: _model([_node("Transpose", ["x"], ["y"], perm=[0, 0])], [_vi("x")], _out("y")),
        errors.ShapeError,
        "perm",
    ),
    "concat_axis_2^40": (
        lambda: _model([_node("Concat", ["x", "x"], ["y"], axis=BIG)], [_vi("x")], _out("y")),
        errors.ShapeError,
        "axis",
    ),
    "gather_axis_2^40": (
        lambda: _unary_const("Gather", _c("i", [0]), axis=BIG),
        errors.ShapeError,
        "axis",
    ),
    "topk_k_2^40": (
        lambda: _model(
            [_node("TopK", ["x", "k"], ["v", "i"], axis=1)],
            [_vi("x")],
            _out("v", "i"),
            [_c("k", [BIG])],
        ),
        errors.ShapeError,
        "k =",
    ),
    "cumsum_axis_2^40": (lambda: _unary_const("CumSum", _c("a", BIG)), errors.ShapeError, "axis"),
    "conv_stride_0": (
        lambda: _unary_const(
            "Conv", _c("w", np.ones((1, 1, 2, 2)), np.float32), (1, 1, 4, 4), strides=[0, 0]
        ),
        CompileError,
        "strides",
    ),
}


def _conv(**attrs: object) -> onnx.ModelProto:
    return _unary_const("Conv", _c("w", np.ones((1, 1, 2, 2)), np.float32), (1, 1, 4, 4), **attrs)


def _plain(op: str, shape: tuple[int, ...] = (2, 3), opset: int = 17, **attrs) -> onnx.ModelProto:
    return _model(
        [_node(op, ["x"], ["y"], **attrs)], [_vi("x", shape=shape)], _out("y"), opset=opset
    )


# More of the same families: bad axes, indices, attributes, shapes and graphs.
HOSTILE.update(
    {
        "squeeze_axis_2^40": (
            lambda: _unary_const("Squeeze", _c("a", [BIG])),
            errors.ShapeError,
            "axis",
        ),
        "squeeze_dim_not_1": (
            lambda: _unary_const("Squeeze", _c("a", [0])),
            errors.ShapeError,
            "squeeze",
        ),
        "unsqueeze_repeated_axis": (
            lambda: _unary_const("Unsqueeze", _c("a", [0, 0])),
            errors.ShapeError,
            "repeat",
        ),
        "slice_step_0": (
            lambda: _model(
                [_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
                [_vi("x")],
                _out("y"),
                [_c("s", [0]), _c("e", [2]), _c("a", [0]), _c("st", [0])],
            ),
            errors.ShapeError,
            "steps",
        ),
        "gather_index_2^40": (
            lambda: _unary_const("Gather", _c("i", [BIG])),
            errors.ShapeError,
            "index",
        ),
        "scatternd_index_2^40": (
            lambda: _model(
                [_node("ScatterND", ["x", "i", "u"], ["y"])],
                [_vi("x")],
                _out("y"),
                [_c("i", [[BIG]]), _c("u", np.ones((1, 3)), np.float32)],
            ),
            errors.ShapeError,
            "index",
        ),
        "reducesum_axis_2^40": (
            lambda: _unary_const("ReduceSum", _c("a", [BIG])),
            errors.ShapeError,
            "axis",
        ),
        "conv_kernel_larger_than_input": (
            lambda: _unary_const("Conv", _c("w", np.ones((1, 1, 9, 9)), np.float32), (1, 1, 4, 4)),
            errors.ShapeError,
            "kernel",
        ),
        "conv_group_0": (lambda: _conv(group=0), errors.ShapeError, "group"),
        "conv_dilation_2^40": (lambda: _conv(dilations=[BIG, 1]), errors.ShapeError, "kernel"),
        "matmul_mismatch": (
            lambda: _unary_const("MatMul", _c("w", np.ones((5, 2)), np.float32)),
            errors.ShapeError,
            "matmul",
        ),
        "einsum_garbage": (
            lambda: _plain("Einsum", equation="ij->kk,,"),
            errors.ShapeError,
            "not valid",
        ),
        "cast_to_999": (lambda: _plain("Cast", to=999), errors.UnsupportedError, "999"),
        "attribute_of_wrong_type": (
            lambda: _plain("Softmax", axis=1.5),
            errors.UnsupportedError,
            "FLOAT",
        ),
        "value_written_twice": (
            lambda: _model(
                [_node("Relu", ["x"], ["y"]), _node("Neg", ["x"], ["y"])], [_vi("x")], _out("y")
            ),
            CompileError,
            "writes 'y'",
        ),
        "value_used_before_written": (
            lambda: _model(
                [_node("Relu", ["t"], ["y"]), _node("Neg", ["x"], ["t"])], [_vi("x")], _out("y")
            ),
            CompileError,
            "'t'",
        ),
        "depth_to_space_blocksize_0": (
            lambda: _plain("DepthToSpace", (1, 4, 2, 2), blocksize=0),
            errors.ShapeError,
            "blocksize",
        ),
        "depth_to_space_blocksize_2^40": (
            lambda: _plain("DepthToSpace", (1, 4, 2, 2), blocksize=BIG),
            errors.ShapeError,
            "blocksize",
        ),
        "maxpool_kernel_2^40": (
            lambda: _plain("MaxPool", (1, 1, 4, 4), kernel_shape=[BIG, BIG]),
            errors.ShapeError,
            "kernel",
        ),
        "averagepool_kernel_0": (
            lambda: _plain("AveragePool", (1, 1, 4, 4), kernel_shape=[0, 0]),
            errors.UnsupportedError,
            "kernel_shape",
        ),
        "lstm_hidden_size_2^40": (
            lambda: _model(
                [_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=BIG)],
                [_vi("x", shape=(1, 1, 2))],
                _out("y"),
                [_c("w", np.ones((1, 4, 2)), np.float32), _c("r", np.ones((1, 4, 1)), np.float32)],
            ),
            errors.ShapeError,
            "bytes",
        ),
        "onehot_depth_negative": (
            lambda: _model(
                [_node("OneHot", ["i", "d", "v"], ["y"])],
                [_vi("i", I64, (2,))],
                _out("y"),
                [_c("d", -3), _c("v", [0, 1], np.float32)],
            ),
            errors.ShapeError,
            "depth",
        ),
        "range_limit_inf": (
            lambda: _generator(
                "Range", ("a", 0.0, np.float32), ("b", np.inf, np.float32), ("d", 1.0, np.float32)
            ),
            errors.ShapeError,
            "finite",
        ),
        "resize_roi_nan": (
            lambda: _model(
                [
                    _node(
                        "Resize",
                        ["x", "r", "s"],
                        ["y"],
                        mode="linear",
                        coordinate_transformation_mode="tf_crop_and_resize",
                    )
                ],
                [_vi("x", shape=(1, 1, 2, 2))],
                _out("y"),
                [_c("r", [np.nan] * 8, np.float32), _c("s", [1, 1, 2, 2], np.float32)],
                13,
            ),
            errors.ShapeError,
            "roi",
        ),
        "gathernd_batch_dims_2^40": (
            lambda: _model(
                [_node("GatherND", ["x", "i"], ["y"], batch_dims=BIG)],
                [_vi("x")],
                _out("y"),
                [_c("i", [[0]])],
            ),
            errors.ShapeError,
            "batch_dims",
        ),
        "scan_num_scan_inputs_2^40": (
            lambda: _model(
                [
                    _node(
                        "Scan",
                        ["x"],
                        ["y"],
                        num_scan_inputs=BIG,
                        body=helper.make_graph([], "b", [], []),
                    )
                ],
                [_vi("x")],
                _out("y"),
            ),
            errors.UnsupportedError,
            "num_scan_inputs",
        ),
        "if_without_else_branch": (
            lambda: _model(
                [_node("If", ["c"], ["y"])], [_vi("c", TensorProto.BOOL, ())], _out("y")
            ),
            errors.UnsupportedError,
            "else_branch",
        ),
        "constant_of_shape_rank_100": (
            lambda: _generator("ConstantOfShape", ("s", [1] * 100, np.int64)),
            CompileError,
            "ConstantOfShape",
        ),
        "graph_input_dim_0": (lambda: _relu(shape=(0, 3)), errors.ShapeError, "'x'"),
    }
)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_model_gives_a_typed_error(name: str) -> None:
    build, cls, words = HOSTILE[name]
    with pytest.raises(cls) as info:
        Compiler.compile(build())
    assert words in str(info.value)


def test_truncated_onnx_file(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "model.onnx"
    path.write_bytes(_relu().SerializeToString()[:20])
    with pytest.raises(CompileError, match="is not a readable ONNX model"):
        Compiler.compile(str(path))


def test_popef_file_given_to_the_compiler(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "model.popef"
    Compiler.compile_and_export(_relu(), None, str(path))
    with pytest.raises(CompileError, match="PopEF executable, not an ONNX model"):
        Compiler.compile(str(path))


def test_onnx_file_given_to_the_runner(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "model.onnx"
    path.write_bytes(_relu().SerializeToString())
    with pytest.raises(errors.CorruptFileError, match="ONNX model, not a PopEF.*compile it first"):
        Runner(str(path))
    with pytest.raises(errors.CorruptFileError, match="ONNX model, not a PopEF"):
        Runner(_relu().SerializeToString())


def test_corrupt_popef_still_says_bad_magic(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "model.popef"
    path.write_bytes(b"\x00" * 256)
    with pytest.raises(errors.CorruptFileError, match="magic"):
        Runner(str(path))


def test_unexpected_exception_in_a_lowering_is_typed_and_keeps_its_cause(monkeypatch) -> None:  # noqa: ANN001
    def broken(n: object) -> None:
        raise IndexError("list index out of range")

    monkeypatch.setitem(REGISTRY, "Relu", {1: broken})
    with pytest.raises(
        CompileError, match=r"node \(opset 17\): cannot be lowered: IndexError"
    ) as info:
        Compiler.compile(_relu())
    assert isinstance(info.value.__cause__, IndexError)


def test_unexpected_exception_outside_lowering_is_typed_and_keeps_its_cause(monkeypatch) -> None:  # noqa: ANN001
    import pyipu.compiler.compiler as compiler

    def broken(*args: object, **kw: object) -> None:
        raise KeyError("tensor")

    monkeypatch.setattr(compiler, "build_ir", broken)
    with pytest.raises(CompileError, match="cannot be compiled: KeyError") as info:
        Compiler.compile(_relu())
    assert isinstance(info.value.__cause__, KeyError)


def test_a_failing_progress_logger_is_a_callback_error() -> None:
    opts = CompilerOptions()

    def logger(done: int, total: int) -> None:
        raise ValueError("disk full")

    opts.compilation_progress_logger = logger
    with pytest.raises(errors.CallbackError, match="compilation_progress_logger raised ValueError"):
        Compiler.compile(_relu(), None, opts)
