"""CONV2D epilogue fusion (compiler/rewrites/conv_epilogue.py): Conv → BatchNormalization → Add
(residual) → Relu compiled to one instruction, checked against onnxruntime, the NumPy reference
and the C kernels; and convolutions with constant weights (packed once at load) for every
CONV_CASES shape."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import onnx
import pytest
from models import F16, F32, arr, assert_matches_reference, compile_single_op, expected, run_c
from onnx import TensorProto, helper, numpy_helper
from test_compiler_conv import CONV_CASES

from pyipu.compiler import Compiler
from pyipu.compiler.rewrites.conv_epilogue import ACT_RELU
from pyipu.enums import ActFn, Op, UnaryFn


def _block(
    dt: Any,
    *,
    bn: bool,
    residual: bool,
    relu: bool,
    bias: bool,
    k: int = 3,
    hw: int = 9,
    stride: int = 1,
) -> onnx.ModelProto:
    """x[1,8,hw,hw] → Conv kxk (16 ch, same padding) [→ BN] [→ Add(z)] [→ Relu] → y."""
    onnx_dt = TensorProto.FLOAT16 if dt == F16 else TensorProto.FLOAT
    inits = [numpy_helper.from_array(arr((16, 8, k, k), dt, 1, low=-0.3, high=0.3), "w")]
    if bias:
        inits.append(numpy_helper.from_array(arr((16,), dt, 2), "b"))
    conv_in = ["x", "w"] + (["b"] if bias else [])
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=[k // 2] * 4, strides=[stride] * 2)]
    last = "c"
    if bn:
        for i, (name, lo) in enumerate((("s", 0.5), ("o", -1), ("m", -1), ("v", 0.5))):
            inits.append(numpy_helper.from_array(arr((16,), dt, 10 + i, low=lo, high=1.5), name))
        nodes.append(helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["n"]))
        last = "n"
    if residual:
        nodes.append(helper.make_node("Add", [last, "z"], ["a"]))
        last = "a"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        last = "r"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    oh = (hw - 1) // stride + 1
    ins = [helper.make_tensor_value_info("x", onnx_dt, [1, 8, hw, hw])]
    if residual:
        ins.append(helper.make_tensor_value_info("z", onnx_dt, [1, 16, oh, oh]))
    g = helper.make_graph(
        nodes, "block", ins, [helper.make_tensor_value_info("y", onnx_dt, None)], inits
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("k", [3, 1])  # 3x3: the window path; 1x1: the GEMM path
@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize(
    "bn,residual,relu,bias",
    [
        (True, False, True, False),
        (True, True, True, True),
        (False, True, False, True),
        (False, False, True, True),
        (True, True, False, False),
    ],
)
def test_fused_block(dt: Any, bn: bool, residual: bool, relu: bool, bias: bool, k: int) -> None:
    model = _block(dt, bn=bn, residual=residual, relu=relu, bias=bias, k=k)
    exe = Compiler.compile(model)
    ops = [i.op for i in exe.program.program(exe.program.main_programs[0]).instrs]
    assert Op.MUL not in ops and Op.ADD not in ops and Op.RELU not in ops, ops
    (conv,) = [
        i for i in exe.program.program(exe.program.main_programs[0]).instrs if i.op == Op.CONV2D
    ]
    assert conv.attrs[9:] == (int(relu), int(residual))
    feeds = {"x": arr((1, 8, 9, 9), dt, 3, low=-1, high=1)}
    if residual:
        feeds["z"] = arr((1, 16, 9, 9), dt, 4, low=-1, high=1)
    ref = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), ref)
    want = expected(model, feeds)["y"].astype(np.float32)
    tol = 3e-2 if dt == F16 else 1e-4
    np.testing.assert_allclose(ref["y"].astype(np.float32), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("hw", [1, 8, 13, 27])  # rows of no, one, one and a part, 3+ vectors
@pytest.mark.parametrize("k,stride", [(3, 1), (3, 2), (1, 1)])  # Winograd, window, GEMM paths
@pytest.mark.parametrize("residual", [False, True])
def test_epilogue_row_ends_nan_and_zero(hw: int, k: int, stride: int, residual: bool) -> None:
    """The float32 epilogue (conv.c, epilogue_avx2: 8-lane runs, the end of a row under a mask)
    on rows of every length class: NaN and infinity propagate where the reference has them (on
    the Winograd path too: blocks with a non-finite input take the direct sums, as its
    transforms would spread it over whole tiles), Relu writes +0.0 (never -0.0) for negative
    sums."""
    model = _block(F32, bn=False, residual=residual, relu=True, bias=True, k=k, hw=hw,
                   stride=stride)  # fmt: skip
    exe = Compiler.compile(model)
    x = arr((1, 8, hw, hw), F32, hw, low=-1, high=1)
    if hw > 1:  # (one pixel: every output would read them)
        x[0, 3, hw // 2, hw - 1] = np.nan
        x[0, 5, 0, hw // 3] = np.inf
    feeds = {"x": x}
    if residual:
        oh = (hw - 1) // stride + 1
        feeds["z"] = arr((1, 16, oh, oh), F32, 7, low=-1, high=1)
    (got,) = run_c(exe, feeds).values()
    (want,) = exe.run_reference(feeds).values()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any() == (hw > 1) and (got == 0).any()
    assert not np.signbit(got[got == 0]).any()
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-4)


def test_fused_away_intermediates_take_no_arena() -> None:
    """The tensors between Conv, BatchNorm and Relu are written by no instruction once fused:
    the memory plan gives them no storage, so the block needs the arena of a plain Conv."""
    fused = Compiler.compile(_block(F32, bn=True, residual=False, relu=True, bias=False))
    plain = Compiler.compile(_block(F32, bn=False, residual=False, relu=False, bias=True))
    assert fused.program.arena_size == plain.program.arena_size


def test_not_fused_when_intermediate_is_an_output() -> None:
    model = _block(F32, bn=False, residual=False, relu=True, bias=True)
    model.graph.output.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
    exe = Compiler.compile(model)
    ops = [i.op for i in exe.program.program(exe.program.main_programs[0]).instrs]
    assert Op.RELU in ops
    feeds = {"x": arr((1, 8, 9, 9), F32, 3)}
    assert_matches_reference(run_c(exe, feeds), exe.run_reference(feeds))


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_constant_weights(case: int) -> None:
    """Weights in TENSOR_DATA take the packed-at-load path of the float32 kernel."""
    xs, ws, attrs = CONV_CASES[case]
    x = arr(xs, F32, case, low=-1, high=1)
    w = arr(ws, F32, case + 100, low=-1, high=1)
    exe, feeds, model = compile_single_op("Conv", [x], attrs, opset=11, const_inputs={1: w})
    got = run_c(exe, feeds)
    assert_matches_reference(got, exe.run_reference(feeds))
    k = ws[1] * ws[2] * ws[3]
    tol = 1e-5 * max(1.0, k / 16)
    for name, want in expected(model, feeds).items():
        np.testing.assert_allclose(got[name], want, rtol=tol, atol=tol)


def test_activation_values_come_from_the_c_table() -> None:
    assert [(a.name, a.value) for a in ActFn] == [("NONE", 0), ("RELU", 1), ("UNARY", 2)]
    assert ACT_RELU == ActFn.RELU


# the verifier lists the table it checks against: every activation, value and name
ACT_TABLE = re.escape("".join(f"{a.value} ({a.name}), " for a in ActFn))


@pytest.mark.parametrize(
    "attrs,text",
    [
        ((len(ActFn), 0), f"activation must be one of {ACT_TABLE}got {len(ActFn)}"),
        ((0, 2), "residual"),
        ((int(ActFn.UNARY), 0), "go together"),
        ((int(ActFn.RELU), 0, int(UnaryFn.TANH), 0, 0), "go together"),
        ((int(ActFn.UNARY), 0, int(UnaryFn.ISNAN), 0, 0), "not a float unary function"),
        ((int(ActFn.UNARY), 0, 999, 0, 0), "not a float unary function"),
        ((0, 0, 0), "12 attributes, expected 9, 11 or 14"),
    ],
)
def test_verifier_rejects_epilogue_attrs(attrs: tuple[int, ...], text: str) -> None:
    import dataclasses

    from pyipu.compiler import Executable

    model = _block(F32, bn=False, residual=False, relu=True, bias=True)
    ir = Compiler.compile(model).program
    progs = tuple(
        dataclasses.replace(
            p,
            instrs=tuple(
                dataclasses.replace(i, attrs=i.attrs[:9] + attrs) if i.op == Op.CONV2D else i
                for i in p.instrs
            ),
        )
        for p in ir.programs
    )
    exe = Executable.from_program(dataclasses.replace(ir, programs=progs))
    with pytest.raises(Exception, match=text):
        run_c(exe, {"x": arr((1, 8, 9, 9), F32, 3)})
