"""LayerNormalization as one LAYER_NORM instruction (compiler/ops_nn.py, kernels/norm.c): every
axis, with and without B, scale shapes with leading 1s, row lengths around the 8-lane groups
and the float16 chunks, float32 and float16, against onnxruntime and the NumPy reference; the
forms that keep the ONNX function body (Mean / InvStdDev outputs, a broadcast Scale) still
match; the verifier refuses what the kernel cannot run; every instruction-set level gives the
same bits."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from models import F16, F32, arr, assert_matches_reference, edited, run_c
from onnx import TensorProto, helper, numpy_helper

from pyipu import _core, errors
from pyipu.compiler import Compiler
from pyipu.compiler.ir import f64_bits
from pyipu.enums import Op


def _model(
    dt: Any,
    shape: tuple[int, ...],
    axis: int = -1,
    bias: bool = True,
    scale_shape: tuple[int, ...] | None = None,
    stats: bool = False,
    eps: float = 1e-5,
) -> onnx.ModelProto:
    onnx_dt = TensorProto.FLOAT16 if dt == F16 else TensorProto.FLOAT
    trailing = shape[axis:] if axis != 0 else shape
    sshape = scale_shape or trailing
    inits = [numpy_helper.from_array(arr(sshape, dt, 1, low=0.5, high=1.5), "s")]
    ins = ["x", "s"]
    if bias:
        inits.append(numpy_helper.from_array(arr(sshape, dt, 2), "b"))
        ins.append("b")
    outs = ["y", "mean", "inv"] if stats else ["y"]
    node = helper.make_node("LayerNormalization", ins, outs, axis=axis, epsilon=eps)
    out_vi = [helper.make_tensor_value_info("y", onnx_dt, None)]
    if stats:
        out_vi += [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs[1:]]
    g = helper.make_graph(
        [node], "ln", [helper.make_tensor_value_info("x", onnx_dt, shape)], out_vi, inits
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _instrs(exe: Any) -> list[Any]:
    p = exe.program
    return list(p.program(p.main_programs[0]).instrs)


def _ops(exe: Any) -> list[Op]:
    return [i.op for i in _instrs(exe)]


def _check(model: onnx.ModelProto, dt: Any, fused: bool = True) -> dict[str, np.ndarray]:
    exe = Compiler.compile(model)
    assert (_ops(exe) == [Op.LAYER_NORM]) == fused, _ops(exe)
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    feeds = {"x": arr(shape, dt, 3, low=-4, high=4) + np.asarray(3, dt)}  # an offset mean
    got = run_c(exe, feeds)
    assert_matches_reference(got, exe.run_reference(feeds))
    names = [o.name for o in model.graph.output]
    want = ort.InferenceSession(model.SerializeToString()).run(names, feeds)
    tol = 1e-5 if dt == F32 else 1e-2
    for n, w in zip(names, want, strict=True):
        np.testing.assert_allclose(
            got[n].astype(np.float32), w.astype(np.float32), rtol=tol, atol=tol, err_msg=n
        )
    return got


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape,axis", [((3, 96), -1), ((2, 5, 384), -1), ((2, 3, 4, 5), 1),
                                         ((7, 3), 0), ((4, 1), -1), ((2, 13), -1)])  # fmt: skip
def test_layer_norm_is_one_instruction(shape: tuple[int, ...], axis: int, bias: bool) -> None:
    _check(_model(F32, shape, axis, bias), F32)


@pytest.mark.parametrize("length", [1, 7, 8, 9, 511, 512, 513, 1030])  # lanes, float16 chunks
@pytest.mark.parametrize("dt", [F32, F16])
def test_row_lengths(dt: Any, length: int) -> None:
    _check(_model(dt, (3, length)), dt)


def test_scale_with_leading_ones_and_epsilon() -> None:
    _check(_model(F32, (2, 6, 10), scale_shape=(1, 1, 10), eps=0.5), F32)


def test_statistics_outputs_and_broadcast_scale_take_the_function_body() -> None:
    got = _check(_model(F32, (4, 12), stats=True), F32, fused=False)
    assert set(got) == {"y", "mean", "inv"}
    _check(_model(F32, (4, 12), bias=False, scale_shape=(1,)), F32, fused=False)


def test_constant_rows_and_large_offsets_stay_finite() -> None:
    """var 0 (every element equal) gives 1/sqrt(eps) · 0; a mean of 1e4 is removed exactly
    enough (the variance is taken of the centred values)."""
    exe = Compiler.compile(_model(F32, (2, 64), bias=False))
    x = np.stack([np.full(64, 5.0, np.float32), 1e4 + np.linspace(-1, 1, 64, dtype=np.float32)])
    y = run_c(exe, {"x": x})["y"]
    s = arr((64,), F32, 1, low=0.5, high=1.5)  # the model's Scale
    np.testing.assert_array_equal(y[0], np.zeros(64, np.float32))
    want = (x[1] - x[1].mean()) / np.sqrt(x[1].var() + 1e-5) * s
    np.testing.assert_allclose(y[1], want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("dt", [F32, F16])
def test_every_isa_level_gives_the_same_bits(dt: Any) -> None:
    model = _model(dt, (5, 300))
    exe = Compiler.compile(model)
    x = {"x": arr((5, 300), dt, 4, low=-3, high=3)}
    outs = []
    try:
        for level in sorted(set(_core.ISA_LEVELS.values())):
            if level <= _core.isa_best():
                _core.set_isa(level)
                outs.append(run_c(exe, x)["y"])
    finally:
        _core.set_isa(0)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


@pytest.mark.parametrize(
    "attrs,scale_len,match",
    [((0, f64_bits(1e-5)), 12, "row length"), ((5, f64_bits(1e-5)), 12, "row length"),
     ((12, f64_bits(1e-5)), 6, "scale has 6"), ((12, f64_bits(-1.0)), 12, "epsilon"),
     ((12, f64_bits(float("nan"))), 12, "epsilon")],
)  # fmt: skip
def test_verifier_refuses_bad_attributes(
    attrs: tuple[int, int], scale_len: int, match: str
) -> None:
    exe = Compiler.compile(_model(F32, (4, 12), bias=False))
    (s,) = [i.inputs[1] for i in _instrs(exe)]
    data = np.ones(scale_len, np.float32).tobytes()
    bad = edited(
        exe,
        lambda i: dataclasses.replace(i, attrs=attrs) if i.op == Op.LAYER_NORM else i,
        lambda k, t: dataclasses.replace(t, shape=(scale_len,), data=data) if k == s else t,
    )
    with pytest.raises(errors.Error, match=match):
        run_c(bad, {"x": np.zeros((4, 12), np.float32)})
