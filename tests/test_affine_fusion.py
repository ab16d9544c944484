"""SCALE_SHIFT fusion (pyipu/compiler/rewrites/affine.py): chains of Mul/Add/Sub/Div by constants
and a final Relu compiled to one instruction, checked against onnxruntime, the NumPy reference
and the C kernels (2 workers, several work items); and the chains that must stay unfused."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from models import F16, F32, arr, assert_matches_reference, edited, expected, run_c, with_attr
from onnx import TensorProto, helper, numpy_helper

from pyipu import errors
from pyipu.compiler import Compiler
from pyipu.compiler.ir import Instr, TensorSpec
from pyipu.enums import DType, Op

C = 8


def _model(
    shape: tuple[int, ...],
    nodes: list[tuple[str, list[str]]],
    consts: dict[str, np.ndarray],
    dt: Any = F32,
    outputs: tuple[str, ...] = (),
) -> onnx.ModelProto:
    """x → nodes (node k writes "t{k}", its inputs name x, earlier t's or consts) → y."""
    onnx_dt = TensorProto.FLOAT16 if dt == F16 else TensorProto.FLOAT
    made = []
    for k, (op, ins) in enumerate(nodes):
        attrs = {"epsilon": 1e-3} if op == "BatchNormalization" else {}
        made.append(helper.make_node(op, ins, [f"t{k}"], **attrs))
    made.append(helper.make_node("Identity", [f"t{len(nodes) - 1}"], ["y"]))
    outs = [helper.make_tensor_value_info(n, onnx_dt, None) for n in ("y", *outputs)]
    g = helper.make_graph(
        made,
        "chain",
        [helper.make_tensor_value_info("x", onnx_dt, list(shape))],
        outs,
        [numpy_helper.from_array(v.astype(dt), n) for n, v in consts.items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _bn_consts(dt: Any = F32) -> dict[str, np.ndarray]:
    names = (("s", 0.5), ("o", -1), ("m", -1), ("v", 0.5))
    return {n: arr((C,), dt, 10 + i, low=lo, high=1.5) for i, (n, lo) in enumerate(names)}


BN = ("BatchNormalization", ["x", "s", "o", "m", "v"])


def _check(model: onnx.ModelProto, shape: tuple[int, ...], dt: Any = F32) -> list[Op]:
    """Compile, compare reference, C runtime and ORT; returns the main program's opcodes."""
    exe = Compiler.compile(model, None)
    feeds = {"x": arr(shape, dt, 0, low=-4, high=4)}
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    tol = 2e-2 if dt == F16 else 1e-5
    for name, w in expected(model, feeds).items():
        np.testing.assert_allclose(
            got[name].astype(np.float32), w.astype(np.float32), rtol=tol, atol=tol
        )
    return [Op(i.op) for i in exe.program.program(1).instrs]


@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize("shape", [(2, C, 5, 5), (2, C, 48, 48), (3, C)])
def test_batchnorm_relu_is_one_pass(dt: Any, shape: tuple[int, ...]) -> None:
    # (2, 8, 48, 48): 36 864 elements, three work items split over two workers
    model = _model(shape, [BN, ("Relu", ["t0"])], _bn_consts(dt), dt)
    assert _check(model, shape, dt) == [Op.SCALE_SHIFT]


def test_batchnorm_then_caffe_scale_layer_then_relu() -> None:
    consts = {**_bn_consts(), "k": arr((C, 1, 1), F32, 3), "b": arr((C, 1, 1), F32, 4)}
    nodes = [BN, ("Mul", ["t0", "k"]), ("Add", ["b", "t1"]), ("Relu", ["t2"])]
    assert _check(_model((1, C, 6, 6), nodes, consts), (1, C, 6, 6)) == [Op.SCALE_SHIFT]


def test_every_arithmetic_form_along_the_last_axis() -> None:
    # NHWC-style constants of shape [C] vary along axis 3; scalars fit any axis
    consts = {
        "m": arr((C,), F32, 1),
        "d": arr((C,), F32, 2, low=0.5, high=2),
        "two": np.array(2.0),
        "k": arr((1, 1, C), F32, 3),
    }
    nodes = [
        ("Sub", ["x", "m"]),
        ("Div", ["t0", "d"]),
        ("Mul", ["two", "t1"]),
        ("Sub", ["k", "t2"]),
        ("Add", ["t3", "two"]),
    ]
    assert _check(_model((2, 5, 3, C), nodes, consts), (2, 5, 3, C)) == [Op.SCALE_SHIFT]


def test_scalar_chain() -> None:
    consts = {"two": np.array(2.0), "one": np.array(1.0)}
    nodes = [("Mul", ["x", "two"]), ("Add", ["t0", "one"]), ("Relu", ["t1"])]
    assert _check(_model((4, 3), nodes, consts), (4, 3)) == [Op.SCALE_SHIFT]


@pytest.mark.parametrize(
    "nodes,consts,want",
    [
        # k / x is not affine: the Div stays, and the Add after it is a chain of one
        ([("Div", ["k", "x"]), ("Add", ["t0", "k"])], {"k": arr((C, 1, 1), F32, 1)}, 2),
        # constants varying along different axes of x
        (
            [("Mul", ["x", "k"]), ("Add", ["t0", "w"])],
            {"k": arr((C, 1, 1), F32, 1), "w": arr((5,), F32, 2)},
            2,
        ),
        # a constant varying along two axes
        ([("Mul", ["x", "k"]), ("Relu", ["t0"])], {"k": arr((C, 5, 1), F32, 1)}, 2),
        # a chain of one is left alone
        ([("Mul", ["x", "k"])], {"k": arr((C, 1, 1), F32, 1)}, 1),
        # a constant that grows x's shape
        ([("Mul", ["x", "k"]), ("Relu", ["t0"])], {"k": arr((2, 1, C, 1, 1), F32, 1)}, 2),
    ],
)
def test_chains_left_unfused(nodes: list, consts: dict, want: int) -> None:
    ops = _check(_model((1, C, 5, 5), nodes, consts), (1, C, 5, 5))
    assert Op.SCALE_SHIFT not in ops and len(ops) >= want, ops


def test_intermediate_with_another_reader_or_an_anchor_stays() -> None:
    consts = {"k": arr((C, 1, 1), F32, 1), "b": arr((C, 1, 1), F32, 2)}
    read_twice = [("Mul", ["x", "k"]), ("Add", ["t0", "b"]), ("Add", ["t1", "t0"])]
    ops = _check(_model((1, C, 4, 4), read_twice, consts), (1, C, 4, 4))
    assert Op.MUL in ops, ops
    anchored = [("Mul", ["x", "k"]), ("Add", ["t0", "b"])]
    ops = _check(_model((1, C, 4, 4), anchored, consts, outputs=("t0",)), (1, C, 4, 4))
    assert Op.SCALE_SHIFT not in ops, ops


def test_nan_and_negative_zero_through_relu() -> None:
    consts = {"k": np.ones((C, 1, 1)), "b": np.zeros((C, 1, 1))}
    model = _model(
        (1, C, 1, 2), [("Mul", ["x", "k"]), ("Add", ["t0", "b"]), ("Relu", ["t1"])], consts
    )
    exe = Compiler.compile(model, None)
    x = np.zeros((1, C, 1, 2), np.float32)
    x[0, :, 0, 0], x[0, :, 0, 1] = np.nan, -0.0
    y = run_c(exe, {"x": x})["y"]
    assert np.isnan(y[0, :, 0, 0]).all()
    assert (y[0, :, 0, 1] == 0).all() and not np.signbit(y[0, :, 0, 1]).any()
    np.testing.assert_array_equal(y, exe.run_reference({"x": x})["y"])


def test_channels_along_rows_split_mid_row() -> None:
    # [2500, 7]: the second work item (16 384 elements each) starts in the middle of a row
    consts = {"k": arr((7,), F32, 1), "b": arr((7,), F32, 2)}
    nodes = [("Mul", ["x", "k"]), ("Add", ["t0", "b"])]
    assert _check(_model((2500, 7), nodes, consts), (2500, 7)) == [Op.SCALE_SHIFT]


def test_model_weights_stay_unfolded_without_constant_weights() -> None:
    # constant_weights = False: a session may bind new values to k and b, so they are kept;
    # BatchNormalization's scale and shift are the compiler's own constants and still fuse
    from pyipu.compiler import CompilerOptions

    opts = CompilerOptions()
    opts.constant_weights = False
    consts = {**_bn_consts(), "k": arr((C, 1, 1), F32, 3), "b": arr((C, 1, 1), F32, 4)}
    nodes = [("Mul", ["x", "k"]), ("Add", ["t0", "b"]), BN, ("Relu", ["t2"])]
    nodes[2] = ("BatchNormalization", ["t1", "s", "o", "m", "v"])
    exe = Compiler.compile(_model((1, C, 4, 4), nodes, consts), None, opts)
    ops = [Op(i.op) for i in exe.program.program(1).instrs]
    assert ops == [Op.MUL, Op.ADD, Op.SCALE_SHIFT], ops


Edit = tuple[Callable[[Instr], Instr], Callable[[int, TensorSpec], TensorSpec]]


def _same_instr(i: Instr) -> Instr:
    return i


def _same_tensor(k: int, t: TensorSpec) -> TensorSpec:
    return t


def _edits(case: str, ins: Instr) -> Edit:
    """The SCALE_SHIFT instruction `ins` (x [2, C, 5], axis 1) made wrong in one way."""
    x, y = ins.inputs[0], ins.outputs[0]
    if case == "axis":
        return lambda i: with_attr(i, 0, 3), _same_tensor
    if case == "activation":
        return lambda i: with_attr(i, 1, 3), _same_tensor
    if case == "unary activation":
        return lambda i: with_attr(i, 1, 2), _same_tensor
    if case == "shift size":
        return lambda i: dataclasses.replace(i, inputs=(x, i.inputs[1], x)), _same_tensor
    if case == "output shape":
        return _same_instr, lambda k, t: dataclasses.replace(t, shape=(2, C * 5)) if k == y else t
    if case == "dtype":
        return (
            _same_instr,
            lambda k, t: dataclasses.replace(t, dtype=DType.INT32) if k in (y, *ins.inputs) else t,
        )
    assert case == "attribute count"
    return lambda i: dataclasses.replace(i, attrs=i.attrs[:1]), _same_tensor


# case -> the verifier's message
REJECTIONS = {
    "axis": r"axis 3 outside \[0, 3\)",
    "activation": r"activation must be one of 0 \(NONE\), 1 \(RELU\), 2 \(UNARY\), got 3",
    "unary activation": r"activation 2 \(UNARY\) is CONV2D's and GEMM's only",
    "shift size": r"shift has 80 elements, expected x.dims\[1\] = 8",
    "output shape": r"output y\[2,40\] differs from input x\[2,8,5\]",
    "dtype": "dtype int32 is not float32/float16",
    "attribute count": "1 attributes, expected 2",
}


@pytest.mark.parametrize("case", list(REJECTIONS))
def test_verifier_rejects(case: str) -> None:
    model = _model((2, C, 5), [BN], _bn_consts())
    exe = Compiler.compile(model, None)
    (ins,) = [i for i in exe.program.program(1).instrs if i.op == Op.SCALE_SHIFT]
    instr, tensor = _edits(case, ins)
    bad = edited(exe, lambda i: instr(i) if i.op == Op.SCALE_SHIFT else i, tensor)
    with pytest.raises(errors.BadProgramError, match=REJECTIONS[case]):
        run_c(bad, {"x": arr((2, C, 5), F32, 0)})
