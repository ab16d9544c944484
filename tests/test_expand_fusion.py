"""Dropping EXPANDs whose reader broadcasts (pyipu/compiler/rewrites/expand.py): the programs lose
the copy, results stay identical to onnxruntime, the NumPy reference and the C kernels."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import F32, arr, assert_matches_reference, expected, run_c, seed_overlap_io_model
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler
from pyipu.enums import Op


def _model(x_shape: list[int], target: list[int], op: str, other: np.ndarray, twice: bool = False):
    nodes = [
        helper.make_node("Expand", ["x", "shape"], ["e"]),
        helper.make_node(op, ["e", "w"], ["y"]),
    ]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if twice:  # a second reader of the expanded tensor
        nodes.append(helper.make_node("Relu", ["e"], ["r"]))
        outs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    g = helper.make_graph(
        nodes,
        "expand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        outs,
        [
            numpy_helper.from_array(np.array(target, np.int64), "shape"),
            numpy_helper.from_array(other, "w"),
        ],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _ops(model: onnx.ModelProto, x_shape: list[int]) -> list[Op]:
    exe = Compiler.compile(model, None)
    feeds = {"x": arr(tuple(x_shape), F32, 0)}
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    for name, w in expected(model, feeds).items():
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)
    return [Op(i.op) for i in exe.program.program(1).instrs]


@pytest.mark.parametrize(
    "x_shape,target,op,w_shape",
    [
        ([8, 8], [2, 3, 8, 8], "MatMul", (2, 3, 8, 5)),
        ([1, 8, 8], [3, 8, 8], "MatMul", (3, 8, 4)),
        ([4, 1], [4, 6], "Add", (6,)),
        ([5], [2, 5], "Mul", (2, 1)),
    ],
)
def test_expand_before_a_broadcasting_reader_is_dropped(
    x_shape: list[int], target: list[int], op: str, w_shape: tuple[int, ...]
) -> None:
    ops = _ops(_model(x_shape, target, op, arr(w_shape, F32, 1)), x_shape)
    assert Op.EXPAND not in ops, ops


@pytest.mark.parametrize(
    "x_shape,target,w_shape,twice",
    [
        ([1, 4], [3, 4], (4,), False),  # without the Expand the result would be [1, 4]
        ([4, 1], [4, 6], (6,), True),  # the expanded tensor has another reader
    ],
)
def test_expand_kept_when_needed(
    x_shape: list[int], target: list[int], w_shape: tuple[int, ...], twice: bool
) -> None:
    ops = _ops(_model(x_shape, target, "Add", arr(w_shape, F32, 1), twice), x_shape)
    assert Op.EXPAND in ops, ops


def test_seed_model_runs_its_matmuls_on_the_unexpanded_input() -> None:
    exe = Compiler.compile(seed_overlap_io_model(), None)
    ops = [Op(i.op) for i in exe.program.program(1).instrs]
    assert ops == [Op.MATMUL] * 4 + [Op.REDUCE_MEAN], ops
