"""A convolution's activation as its CONV2D epilogue (activation UNARY, compiler/rewrites/
conv_epilogue.py): ReLU6, HardSwish, SiLU, Sigmoid, LeakyRelu, Tanh and HardSigmoid after every
convolution path (window, 1x1 GEMM, depthwise, strided; with a residual), float32 and float16,
bit-identical to the separate UNARY instruction and matching onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from models import F16, F32, arr, assert_matches_reference, run_c
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler
from pyipu.enums import ActFn, Op

C, HW = 16, 11


def _activation(kind: str, x: str, y: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    n = helper.make_node
    if kind == "relu6":
        lo, hi = (
            numpy_helper.from_array(np.array(v, np.float32), k) for k, v in (("lo", 0), ("hi", 6))
        )
        return [n("Clip", [x, "lo", "hi"], [y])], [lo, hi]  # fmt: skip
    if kind == "silu":
        return [n("Sigmoid", [x], ["sg"]), n("Mul", [x, "sg"], [y])], []
    op, attrs = {
        "hardswish": ("HardSwish", {}),
        "sigmoid": ("Sigmoid", {}),
        "leaky": ("LeakyRelu", {"alpha": 0.1}),
        "tanh": ("Tanh", {}),
        "hardsigmoid": ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    }[kind]
    return [n(op, [x], [y], **attrs)], []


def _model(
    dt: Any, act: str, conv: str, residual: bool, anchor_sums: bool = False, hw: int = HW
) -> onnx.ModelProto:
    """x[1,16,hw,hw] → Conv (conv: "3x3", "1x1", "dw3", "dw5s2", "3x3s2") + bias [→ Add(z)] →
    activation → y; anchor_sums also outputs the activation's input (blocks the fusion)."""
    onnx_dt = TensorProto.FLOAT16 if dt == F16 else TensorProto.FLOAT
    k, group, stride = {
        "3x3": (3, 1, 1), "1x1": (1, 1, 1), "dw3": (3, C, 1), "dw5s2": (5, C, 2),
        "3x3s2": (3, 1, 2),
    }[conv]  # fmt: skip
    w = arr((C, C // group, k, k), dt, 1, low=-0.4, high=0.4)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(arr((C,), dt, 2), "b")]
    nodes = [
        helper.make_node(
            "Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, strides=[stride] * 2, group=group
        )
    ]
    oh = (hw - 1) // stride + 1
    ins = [helper.make_tensor_value_info("x", onnx_dt, [1, C, hw, hw])]
    last = "c"
    if residual:
        nodes.append(helper.make_node("Add", ["c", "z"], ["a"]))
        ins.append(helper.make_tensor_value_info("z", onnx_dt, [1, C, oh, oh]))
        last = "a"
    act_nodes, act_inits = _activation(act, last, "y")
    if dt == F16:  # the Clip bounds in the model's dtype
        act_inits = [
            numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name)
            for t in act_inits
        ]
    outs = [helper.make_tensor_value_info("y", onnx_dt, None)]
    if anchor_sums:
        outs.append(helper.make_tensor_value_info(last, onnx_dt, None))
    g = helper.make_graph(nodes + act_nodes, "conv_act", ins, outs, inits + act_inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


def _feeds(dt: Any, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = arr(tuple(shape), dt, 3 + len(feeds), low=-3, high=3)
    return feeds


def _main(exe: Any) -> list[Any]:
    p = exe.program
    return list(p.program(p.main_programs[0]).instrs)


ACTS = ["relu6", "hardswish", "silu", "sigmoid", "leaky", "tanh", "hardsigmoid"]


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("conv", ["3x3", "1x1", "dw3", "dw5s2", "3x3s2"])
@pytest.mark.parametrize("act", ACTS)
def test_fused_activation_equals_the_separate_instruction(
    act: str, conv: str, residual: bool
) -> None:
    _check(F32, act, conv, residual)


@pytest.mark.parametrize("conv", ["3x3", "1x1", "dw3"])
@pytest.mark.parametrize("act", ["relu6", "hardswish", "silu"])
def test_fused_activation_float16(act: str, conv: str) -> None:
    _check(F16, act, conv, residual=True)


@pytest.mark.parametrize("hw", [1, 3, 4, 7, 30])  # small maps take the transposed path
@pytest.mark.parametrize("conv", ["3x3", "1x1", "dw3", "3x3s2"])
def test_fused_activation_map_sizes(conv: str, hw: int) -> None:
    _check(F32, "hardswish", conv, residual=True, hw=hw)


def _check(dt: Any, act: str, conv: str, residual: bool, hw: int = HW) -> None:
    model = _model(dt, act, conv, residual, hw=hw)
    exe = Compiler.compile(model)
    (ins,) = _main(exe)  # one instruction: the convolution with its epilogue
    assert ins.op == Op.CONV2D and ins.attrs[9] == ActFn.UNARY and ins.attrs[10] == residual
    feeds = _feeds(dt, model)
    got = run_c(exe, feeds)["y"]
    assert_matches_reference({"y": got}, exe.run_reference(feeds))
    unfused = Compiler.compile(_model(dt, act, conv, residual, anchor_sums=True, hw=hw))
    assert [i.op for i in _main(unfused)] == [Op.CONV2D, Op.UNARY]
    np.testing.assert_array_equal(got, run_c(unfused, feeds)["y"])  # bit-identical
    want = ort.InferenceSession(model.SerializeToString()).run(["y"], feeds)[0]
    tol = 1e-5 if dt == F32 else 1e-2
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


def test_a_second_reader_or_an_anchor_keeps_the_activation_separate() -> None:
    model = _model(F32, "hardswish", "3x3", residual=False, anchor_sums=True)
    ops = [(i.op, i.attrs[9] if i.op == Op.CONV2D and len(i.attrs) > 9 else 0)
           for i in _main(Compiler.compile(model))]  # fmt: skip
    assert ops == [(Op.CONV2D, 0), (Op.UNARY, 0)]
