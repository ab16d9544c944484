"""Concatenations computed in place (compiler/rewrites/concat_inplace.py): the CONCAT disappears
where its inputs can be written straight into its output, stays where they cannot, and results
are identical to onnxruntime, the NumPy reference and the C kernels either way."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import F32, arr, assert_matches_reference, expected, run_c
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler, CompilerOptions
from pyipu.compiler.ir import ALIGN
from pyipu.compiler.sharding import Sharder
from pyipu.enums import Op


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int]],
    outputs: list[str],
    weights: dict[str, np.ndarray] | None = None,
) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "concat",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, n) for n, v in (weights or {}).items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _conv(x: str, w: str, y: str) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w], [y], pads=[1] * 4)


def _weights(**channels: tuple[int, int]) -> dict[str, np.ndarray]:
    return {
        n: arr((m, c, 3, 3), F32, i, low=-0.3, high=0.3)
        for i, (n, (m, c)) in enumerate(channels.items())
    }


def _concats(model: onnx.ModelProto, inputs: dict[str, list[int]], **options: object) -> int:
    """Compile, check against onnxruntime, the reference and the C runtime; count CONCATs."""
    opts = CompilerOptions()
    for name, value in options.items():
        setattr(opts, name, value)
    exe = Compiler.compile(model, None, opts)
    feeds = {n: arr(tuple(s), F32, 7 + i) for i, (n, s) in enumerate(inputs.items())}
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    for name, want in expected(model, feeds).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5)
    tensors = exe.program.tensors
    assert all(t.offset % ALIGN == 0 for t in tensors)
    return sum(Op(i.op) == Op.CONCAT for p in exe.program.programs for i in p.instrs)


X = {"x": [1, 4, 8, 8]}


def test_branches_are_written_into_the_concatenation() -> None:
    """An Inception-style block: three convolutions and a pooling, concatenated on channels."""
    nodes = [
        _conv("x", "w1", "a"),
        _conv("x", "w2", "b"),
        helper.make_node("Relu", ["b"], ["br"]),
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], pads=[1] * 4),
        _conv("x", "w3", "c"),
        helper.make_node("Concat", ["a", "br", "p", "c"], ["cat"], axis=1),
        helper.make_node("Relu", ["cat"], ["y"]),  # (an output anchor keeps its own storage)
    ]
    w = _weights(w1=(16, 4), w2=(8, 4), w3=(32, 4))
    assert _concats(_model(nodes, X, ["y"], w), X) == 0


def test_chained_concatenations_become_one_buffer() -> None:
    """DenseNet's pattern: each layer's output joins everything before it (negative axis)."""
    nodes = [_conv("x", "w0", "f0")]
    w = {"w0": (8, 4)}
    for i in range(1, 4):
        nodes += [
            helper.make_node("Relu", [f"f{i - 1}"], [f"r{i}"]),
            _conv(f"r{i}", f"w{i}", f"n{i}"),
            helper.make_node("Concat", [f"f{i - 1}", f"n{i}"], [f"f{i}"], axis=-3),
        ]
        w[f"w{i}"] = (8, 8 * i)
    nodes.append(helper.make_node("Relu", ["f3"], ["y"]))
    assert _concats(_model(nodes, X, ["y"], _weights(**w)), X) == 0


@pytest.mark.parametrize(
    "why,inputs,nodes,weights,outputs",
    [
        (  # the slabs are not contiguous: dims before the axis are not all 1
            "batch 2",
            {"x": [2, 4, 8, 8]},
            [_conv("x", "w1", "a"), _conv("x", "w2", "b")],
            _weights(w1=(16, 4), w2=(16, 4)),
            ["y"],
        ),
        (  # a graph input has its own storage (the caller's bytes)
            "graph input",
            X,
            [_conv("x", "w1", "a"), helper.make_node("Identity", ["x"], ["b"])],
            _weights(w1=(16, 4)),
            ["y"],
        ),
        (  # an output anchor owns its storage (kept simple: it is copied out after the run)
            "the output is an anchor",
            X,
            [_conv("x", "w1", "a"), _conv("x", "w2", "b")],
            _weights(w1=(16, 4), w2=(16, 4)),
            ["y"],
        ),
        (
            "an input is an anchor",
            X,
            [_conv("x", "w1", "a"), _conv("x", "w2", "b")],
            _weights(w1=(16, 4), w2=(16, 4)),
            ["y", "b"],
        ),
        (  # a constant is TENSOR_DATA
            "weight",
            X,
            [_conv("x", "w1", "a"), helper.make_node("Identity", ["k"], ["b"])],
            {**_weights(w1=(16, 4)), "k": arr((1, 3, 8, 8), F32, 3)},
            ["y"],
        ),
        (  # 3 channels of 5x5 float32: the second slab would start 300 bytes in
            "misaligned",
            {"x": [1, 4, 5, 5]},
            [_conv("x", "w1", "a"), _conv("x", "w2", "b")],
            _weights(w1=(3, 4), w2=(16, 4)),
            ["y"],
        ),
        (  # one tensor twice
            "repeated input",
            X,
            [_conv("x", "w1", "a"), helper.make_node("Identity", ["a"], ["b"])],
            _weights(w1=(16, 4)),
            ["y"],
        ),
    ],
)
def test_concat_stays_where_its_inputs_cannot_move(
    why: str,
    inputs: dict[str, list[int]],
    nodes: list[onnx.NodeProto],
    weights: dict[str, np.ndarray],
    outputs: list[str],
) -> None:
    cat = "y" if why == "the output is an anchor" else "cat"
    nodes = [*nodes, helper.make_node("Concat", ["a", "a" if "repeated" in why else "b"], [cat])]
    nodes[-1].attribute.append(helper.make_attribute("axis", 1))
    if cat != "y":
        nodes.append(helper.make_node("Relu", [cat], ["y"]))
    assert _concats(_model(nodes, inputs, outputs, weights), inputs) == 1, why


def test_a_tensor_in_two_concatenations_moves_into_the_first() -> None:
    nodes = [
        _conv("x", "w1", "a"),
        _conv("x", "w2", "b"),
        _conv("x", "w3", "c"),
        helper.make_node("Concat", ["a", "b"], ["c1"], axis=1),
        helper.make_node("Concat", ["c", "a"], ["c2"], axis=1),
        helper.make_node("Relu", ["c1"], ["y1"]),
        helper.make_node("Relu", ["c2"], ["y2"]),
    ]
    w = _weights(w1=(16, 4), w2=(16, 4), w3=(16, 4))
    assert _concats(_model(nodes, X, ["y1", "y2"], w), X) == 1


def test_manual_sharding_keeps_the_concatenation() -> None:
    """Stages exchange whole tensors, so a sharded model keeps its copies."""
    nodes = [
        _conv("x", "w1", "a"),
        _conv("x", "w2", "b"),
        helper.make_node("Concat", ["a", "b"], ["y"], axis=1),
    ]
    nodes[0].name = "first"
    model = Sharder({"first": 0}).run(_model(nodes, X, ["y"], _weights(w1=(16, 4), w2=(16, 4))))
    assert _concats(model, X, virtual_graph_mode="manual", num_ipus=2) == 1
