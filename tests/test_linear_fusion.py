"""Linear layers as one GEMM (compiler/rewrites/linear.py): MatMul by a 2-D matrix + Add of a
bias row, a scalar or a residual of the output's shape, on 2-D to 4-D inputs, either Add operand
order, float32 and float16, with the activation after it fused as the GEMM's epilogue (GELU,
ReLU, Sigmoid, GELU's tanh form). Each fused program equals the unfused one bit for bit in
float32 (to half rounding in float16), matches the NumPy reference and onnxruntime; the patterns
that must stay apart do."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from models import F16, F32, arr, assert_matches_reference, edited, run_c
from onnx import TensorProto, helper, numpy_helper

from pyipu import errors
from pyipu.compiler import Compiler
from pyipu.compiler.ir import f64_bits
from pyipu.enums import ActFn, Op

K, N = 24, 40


def _model(
    dt: Any,
    lead: tuple[int, ...],
    addend: str = "row",
    act: str | None = None,
    bias_first: bool = False,
    anchor_sums: bool = False,
    w_shape: tuple[int, ...] = (K, N),
) -> onnx.ModelProto:
    """x[*lead, K] · w + c [→ act] → y. addend: "row" [N], "row3" [1, 1, N], "scalar" [],
    "full" (an input of y's shape), "col" [lead[-1], 1] (broadcast down the rows, kept apart
    beyond 2-D). anchor_sums also outputs the sum before the activation."""
    onnx_dt = TensorProto.FLOAT16 if dt == F16 else TensorProto.FLOAT
    out = (*lead, N)
    inits = [numpy_helper.from_array(arr(w_shape, dt, 1, low=-0.3, high=0.3), "w")]
    ins = [helper.make_tensor_value_info("x", onnx_dt, (*lead, K))]
    c_shape = {"row": (N,), "row3": (1, 1, N), "scalar": (), "col": (lead[-1], 1)}.get(addend)
    if c_shape is None:
        ins.append(helper.make_tensor_value_info("c", onnx_dt, out))
    else:
        inits.append(numpy_helper.from_array(arr(c_shape, dt, 2), "c"))
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["c", "m"] if bias_first else ["m", "c"], ["s"]),
    ]
    last = "s"
    if act is not None:
        op, attrs = {
            "gelu": ("Gelu", {}),
            "gelu_tanh": ("Gelu", {"approximate": "tanh"}),
            "relu": ("Relu", {}),
            "sigmoid": ("Sigmoid", {}),
        }[act]
        nodes.append(helper.make_node(op, ["s"], ["y"], **attrs))
        last = "y"
    outs = [helper.make_tensor_value_info(last, onnx_dt, None)]
    if anchor_sums and last != "s":
        outs.append(helper.make_tensor_value_info("s", onnx_dt, None))
    g = helper.make_graph(nodes, "linear", ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def _ops(exe: Any) -> list[Any]:
    p = exe.program
    return list(p.program(p.main_programs[0]).instrs)


def _feeds(dt: Any, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        feeds[vi.name] = arr(shape, dt, 3 + len(feeds), low=-2, high=2)
    return feeds


def _check(model: onnx.ModelProto, dt: Any, act: str | None) -> None:
    exe = Compiler.compile(model)
    (ins,) = _ops(exe)  # one instruction: the GEMM with its addend and activation
    assert ins.op == Op.GEMM and len(ins.inputs) == 3
    if act is None:
        assert len(ins.attrs) == 4
    else:
        assert ins.attrs[4] == (ActFn.RELU if act == "relu" else ActFn.UNARY)
    feeds = _feeds(dt, model)
    name = model.graph.output[0].name
    got = run_c(exe, feeds)[name]
    assert_matches_reference({name: got}, exe.run_reference(feeds))
    apart = onnx.ModelProto()
    apart.CopyFrom(model)  # the products anchored: MATMUL, ADD [, activation] stay apart
    apart.graph.output.append(
        helper.make_tensor_value_info("m", apart.graph.output[0].type.tensor_type.elem_type, None)
    )
    unfused = Compiler.compile(apart)
    assert Op.MATMUL in [i.op for i in _ops(unfused)]
    apart_got = run_c(unfused, feeds)[name]
    if dt == F32:
        np.testing.assert_array_equal(got, apart_got)  # bit-identical
    else:  # the fused sum is rounded to half once, after the addend, not before it too
        np.testing.assert_allclose(
            got.astype(np.float32), apart_got.astype(np.float32), rtol=4e-3, atol=4e-3
        )
    want = ort.InferenceSession(model.SerializeToString()).run([name], feeds)[0]
    tol = 1e-5 if dt == F32 else 1e-2
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


# (a [1, 1, N] addend would broadcast a 2-D product to 3-D: not a Linear layer)
SHAPES = [
    (lead, addend)
    for lead in [(7,), (1, 13), (2, 5, 3)]
    for addend in ["row", "row3", "scalar", "full"]
    if addend != "row3" or len(lead) > 1
]


@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("lead,addend", SHAPES)
def test_matmul_add_is_one_gemm(lead: tuple[int, ...], addend: str, bias_first: bool) -> None:
    _check(_model(F32, lead, addend, bias_first=bias_first), F32, None)


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "relu", "sigmoid"])
@pytest.mark.parametrize("lead", [(9,), (1, 197), (2, 3, 7)])
def test_linear_activation_is_the_gemm_epilogue(lead: tuple[int, ...], act: str) -> None:
    _check(_model(F32, lead, "row", act), F32, act)


@pytest.mark.parametrize("act", [None, "gelu", "relu"])
def test_linear_float16(act: str | None) -> None:
    _check(_model(F16, (1, 33), "row", act), F16, act)


def test_a_column_addend_is_fused_only_in_2d() -> None:
    exe = Compiler.compile(_model(F32, (6,), "col"))
    assert [i.op for i in _ops(exe)] == [Op.GEMM]
    model = _model(F32, (2, 6), "col")  # [6, 1] against [2, 6, N]: not GEMM's broadcast
    exe = Compiler.compile(model)
    assert [i.op for i in _ops(exe)] == [Op.MATMUL, Op.ADD]
    feeds = _feeds(F32, model)
    want = ort.InferenceSession(model.SerializeToString()).run(["s"], feeds)[0]
    np.testing.assert_allclose(run_c(exe, feeds)["s"], want, rtol=1e-5, atol=1e-5)


def test_an_anchored_product_or_a_batched_weight_keeps_matmul() -> None:
    anchored = Compiler.compile(_model(F32, (1, 5), "row", "gelu", anchor_sums=True))
    assert [i.op for i in _ops(anchored)] == [Op.GEMM, Op.UNARY]  # the sum is an output
    model = _model(F32, (3, 5), "row", w_shape=(3, K, N))  # a batched weight: no GEMM
    assert Op.GEMM not in [i.op for i in _ops(Compiler.compile(model))]


def test_gemm_verifier_refuses_what_it_cannot_broadcast() -> None:
    """An n-D GEMM written by hand with a [M, 1] addend beyond 2-D, or transA on n-D A."""
    one = f64_bits(1.0)
    model = _model(F32, (2, 5), "row")
    exe = Compiler.compile(model)
    (gemm,) = _ops(exe)
    c = gemm.inputs[2]
    for attrs, c_shape in (((0, 0, one, one), (10, 1)), ((1, 0, one, one), (N,))):
        bad = edited(
            exe,
            lambda i, attrs=attrs: dataclasses.replace(i, attrs=attrs) if i.op == Op.GEMM else i,
            lambda k, t, c_shape=c_shape: dataclasses.replace(t, shape=c_shape) if k == c else t,
        )
        with pytest.raises(errors.Error, match="broadcast|transA"):
            run_c(bad, _feeds(F32, model))
