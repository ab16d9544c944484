"""MatMul and Gemm through the C kernels' float32 paths, against the NumPy reference and ORT:
weights in the executable (B packed at load) and B fed at run time, the GEMV path for at most
4 rows (batch-1 fully connected layers), transA / transB, alpha / beta, bias broadcasts,
batched broadcast MatMul, float16, and a session that binds its own values for a packed weight."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from models import F16, F32, arr, assert_matches_reference, check_op, run_c, run_ort
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler, CompilerOptions
from pyipu.model_runtime import AnchorCallbackPolicy, Session


@pytest.mark.parametrize("m", [1, 3, 4, 5, 70])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("const_b", [False, True])
def test_gemm_paths(m: int, trans_b: int, const_b: bool) -> None:
    k, n = 300, 130
    a = arr((m, k), F32, 1, low=-1, high=1)
    b = arr((n, k) if trans_b else (k, n), F32, 2, low=-1, high=1)
    c = arr((n,), F32, 3)
    attrs = {"transB": trans_b, "alpha": 0.75, "beta": -1.5}
    if const_b:
        check_op("Gemm", [a], attrs, opset=13, const_inputs={1: b, 2: c})
    else:
        check_op("Gemm", [a, b, c], attrs, opset=13)


@pytest.mark.parametrize("m", [1, 70])  # the GEMV and the packed path
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dt", [F32, F16])
def test_gemm_relu_fused(m: int, bias: bool, dt: Any) -> None:
    """Gemm → Relu (an MLP layer) compiles to one GEMM with activation = 1; NaN stays NaN."""
    k, n = 300, 130
    a = arr((m, k), dt, 1, low=-1, high=1)
    a[0, 5] = np.nan  # row 0 of the output is all NaN, as after RELU
    inits = [numpy_helper.from_array(arr((k, n), dt, 2, low=-1, high=1), "b")]
    gemm_in = ["a", "b"]
    if bias:
        inits.append(numpy_helper.from_array(arr((n,), dt, 3), "c"))
        gemm_in.append("c")
    t = TensorProto.FLOAT16 if dt == F16 else TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("Gemm", gemm_in, ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "gemm_relu",
        [helper.make_tensor_value_info("a", t, (m, k))],
        [helper.make_tensor_value_info("y", t, (m, n))],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    exe = Compiler.compile(model, None)
    main = exe.program.program(1).instrs
    assert [(i.op.name, i.attrs[4:]) for i in main] == [("GEMM", (1,))]
    feeds = {"a": a}
    got, ref = run_c(exe, feeds), exe.run_reference(feeds)
    assert_matches_reference(got, ref)
    assert np.isnan(got["y"][0]).all() and (got["y"][1:] >= 0).all()
    want = run_ort(model, feeds)["y"]
    tol = 2e-2 if dt == F16 else 1e-4
    np.testing.assert_allclose(got["y"][1:], want[1:], rtol=tol, atol=tol)


@pytest.mark.parametrize("m", [1, 4, 9])
@pytest.mark.parametrize("c_shape", [(1, 1), (1, 40), None], ids=str)
def test_gemm_trans_a_const_b(m: int, c_shape: tuple | None) -> None:
    a = arr((50, m), F32, 1, low=-1, high=1)
    const: dict[int, Any] = {1: arr((50, 40), F32, 2, low=-1, high=1)}
    if c_shape is not None:
        const[2] = arr(c_shape, F32, 3)
    check_op("Gemm", [a], {"transA": 1, "alpha": 2.0, "beta": 0.5}, opset=13, const_inputs=const)


@pytest.mark.parametrize(
    "a_shape,w_shape",
    [
        ((2, 3, 7, 40), (40, 50)),
        ((2, 1, 40), (40, 900)),
        ((3, 1, 40), (3, 40, 20)),
        ((2, 3, 6, 40), (3, 40, 50)),
    ],
    ids=str,
)
def test_matmul_const_weight_batched(a_shape: tuple, w_shape: tuple) -> None:
    check_op("MatMul", [arr(a_shape, F32, 1)], opset=13, const_inputs={1: arr(w_shape, F32, 2)})


@pytest.mark.parametrize("m", [1, 8])
def test_gemm_f16_const_weight(m: int) -> None:
    a = arr((m, 64), F16, 1, low=-1, high=1)
    w = arr((48, 64), F16, 2, low=-1, high=1)
    check_op("Gemm", [a], {"transB": 1}, opset=13, const_inputs={1: w, 2: arr((48,), F16, 3)})


def _matmul_weight_model(w: np.ndarray, m: int) -> onnx.ModelProto:
    k, n = w.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "mm",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (m, k))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (m, n))],
        [onnx.numpy_helper.from_array(w, "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("m", [1, 8])
def test_session_bound_weight_replaces_the_packed_one(m: int) -> None:
    w = arr((64, 40), F32, 2)
    exe = Compiler.compile(_matmul_weight_model(w, m), None, CompilerOptions())
    mine = arr((64, 40), F32, 5)
    x = arr((m, 64), F32, 1)
    for bind_w, want_w in ((False, w), (True, mine)):
        with Session(exe) as session:

            def policy(anchor: Any, bind_w: bool = bind_w) -> AnchorCallbackPolicy:
                if anchor.name == "W" and bind_w or not anchor.popef_contains_tensor_data:
                    return AnchorCallbackPolicy.BIND_USER_CB
                return AnchorCallbackPolicy.BIND_TENSOR_DATA

            qm = session.create_queue_manager(input_predicate=policy)
            if bind_w:
                qm.input_queue("W").enqueue(mine)
            session.run_load_programs()
            y = np.zeros((m, 40), np.float32)
            qm.input_queue("X").enqueue(x)
            qm.output_queue("Y").enqueue(y)
            session.run_main_programs()
        np.testing.assert_allclose(y, x @ want_w, rtol=1e-5, atol=1e-4)
