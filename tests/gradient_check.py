"""What the gradient-rule tests share (tests/test_autodiff*.py): a `Case` declares a small graph
computing "y"; `check_finite_differences` compares the gradients `pyipu.training.gradients`
writes with central finite differences in float64 (onnx's reference evaluator runs both graphs,
ONNX Runtime where the reference gets an op wrong), `check_pyipu` runs the float32 backward
graph on pyipu against the same reference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pyipu.compiler import Compiler
from pyipu.runtime import Runner
from pyipu.training import gradients

F64, F32 = TensorProto.DOUBLE, TensorProto.FLOAT


@dataclass
class Case:
    """nodes(dtype) -> ONNX nodes computing "y" from the graph inputs; `inputs`: name -> shape;
    `wrt`: the inputs differentiated; `positive`: inputs drawn > 0.5 (Log, Sqrt, Pow...)."""

    name: str
    nodes: Callable[[int], list[onnx.NodeProto]]
    inputs: dict[str, tuple[int, ...]]
    wrt: tuple[str, ...]
    opset: int = 13
    positive: tuple[str, ...] = ()
    eps: float = 1e-6  # the finite-difference step
    # evaluate with ONNX Runtime where onnx's reference gets an op wrong (grouped
    # ConvTranspose, Softmax before opset 13, BatchNormalization's training mode)
    ort: bool = False
    no_pyipu: str = ""  # why the float32 backward graph is not run on pyipu, if it is not
    # finite differences in float32 with a step of at least 1e-2, for ops ONNX Runtime has no
    # float64 kernel for (ConvTranspose, AveragePool): they are piecewise linear, so a large
    # step costs no accuracy (a linear one, as Conv, takes a larger step still)
    fd_f32: bool = False


def op(op: str, ins: list[str], out: str = "y", **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ins, [out], **attrs)


def const(name: str, value, dtype) -> onnx.NodeProto:
    arr = np.asarray(value, helper.tensor_dtype_to_np_dtype(dtype))
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr))


def ints(name: str, value) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, np.int64))
    )


def model_of(case: Case, dtype: int) -> onnx.ModelProto:
    """The case's graph with loss = sum(y * r), r a fixed random weighting (so every element of
    y's gradient differs)."""
    rng = np.random.default_rng(1)
    nodes = case.nodes(dtype)
    probe = helper.make_model(
        helper.make_graph(
            nodes,
            "probe",
            [helper.make_tensor_value_info(n, dtype, s) for n, s in case.inputs.items()],
            [helper.make_tensor_value_info("y", dtype, None)],
        ),
        opset_imports=[helper.make_opsetid("", case.opset)],
    )
    shape = onnx.shape_inference.infer_shapes(probe).graph.output[0].type.tensor_type.shape
    yshape = [d.dim_value for d in shape.dim]
    r = rng.standard_normal(yshape).astype(helper.tensor_dtype_to_np_dtype(dtype))
    loss = [
        helper.make_node("Constant", [], ["loss_w"], value=numpy_helper.from_array(r)),
        op("Mul", ["y", "loss_w"], "loss_yr"),
        op("ReduceSum", ["loss_yr"], "loss", keepdims=0),
    ]
    g = helper.make_graph(
        nodes + loss,
        case.name,
        [helper.make_tensor_value_info(n, dtype, s) for n, s in case.inputs.items()],
        [helper.make_tensor_value_info("loss", dtype, [])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", case.opset)])


def feeds_of(case: Case, np_dtype) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for name, shape in case.inputs.items():
        v = np.asarray(rng.standard_normal(shape))
        if name in case.positive:
            v = 0.5 + np.abs(v)
        else:  # away from the kinks of Relu, Abs, Clip
            v = np.where(np.abs(v) < 0.05, v + 0.1, v)
            v = np.where(np.abs(np.abs(v) - 0.5) < 0.05, v + 0.1, v)
        out[name] = np.asarray(v).astype(np_dtype)
    return out


def evaluator(model: onnx.ModelProto, case: Case):
    if not case.ort:
        return ReferenceEvaluator(model)
    ort = pytest.importorskip("onnxruntime")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = min(m.ir_version, 10)
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    for n in names:
        m.graph.output.append(onnx.ValueInfoProto(name=n))
    return m


def check_finite_differences(case: Case) -> None:
    dtype, np_dtype = (F32, np.float32) if case.fd_f32 else (F64, np.float64)
    model = model_of(case, dtype)
    grad_model, names = gradients(model, "loss", list(case.wrt))
    feeds = feeds_of(case, np_dtype)
    got = evaluator(with_outputs(grad_model, [names[w] for w in case.wrt]), case).run(None, feeds)
    forward = evaluator(model, case)
    eps = max(case.eps, 1e-2) if case.fd_f32 else case.eps
    for w, g in zip(case.wrt, got, strict=True):
        assert g.shape == feeds[w].shape, f"{w}: gradient shape {g.shape}"
        numeric = np.zeros_like(feeds[w])
        for i in np.ndindex(feeds[w].shape):
            hi, lo = dict(feeds), dict(feeds)
            hi[w], lo[w] = feeds[w].copy(), feeds[w].copy()
            hi[w][i] += eps
            lo[w][i] -= eps
            diff = forward.run(None, hi)[0].astype(np.float64) - forward.run(None, lo)[0]
            numeric[i] = diff / (2 * eps)
        tol = 1e-3 if case.fd_f32 else 1e-5 if case.eps <= 1e-5 else 1e-4
        np.testing.assert_allclose(g, numeric, rtol=tol, atol=tol / 10, err_msg=f"d loss / d {w}")


def check_pyipu(case: Case) -> None:
    if case.no_pyipu:
        pytest.skip(case.no_pyipu)
    model = model_of(case, F32)
    grad_model, names = gradients(model, "loss", list(case.wrt))
    outs = [names[w] for w in case.wrt]
    feeds = feeds_of(case, np.float32)
    want = evaluator(with_outputs(grad_model, outs), case).run(None, feeds)
    exe = Compiler.compile(grad_model, outs)
    with Runner(exe) as runner:
        got = runner.run(outs, feeds)
    for w, a, b in zip(case.wrt, got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"d loss / d {w}")
