"""The reduction family (REDUCE, ARG_REDUCE, CUMSUM, TOPK, LOG_SOFTMAX, HARDMAX; LpNormalization
composed): every case compiled, run on the NumPy reference and compared with onnxruntime (or
onnx.reference where ORT lacks the kernel), and run on the C kernels and compared with the
reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from models import (
    F16,
    F32,
    I32,
    I64,
    arr,
    assert_matches_reference,
    check_op,
    compile_single_op,
    edited,
    expected,
    feeds_of,
    run_c,
    single_node,
    with_attr,
)

from pyipu.compiler import (
    Compiler,
    Executable,
    ShapeError,
    UnsupportedAttributeError,
    UnsupportedDTypeError,
)
from pyipu.enums import Op, ReduceFn

I8, U8 = np.int8, np.uint8
REDUCE_OPS = [
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceSumSquare",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
]
FLOAT_ONLY = {"ReduceLogSum", "ReduceLogSumExp"}
# (shape, axes, keepdims): one axis, adjacent axes, non-adjacent axes (TRANSPOSE), all axes,
# negative axis, an inner size over one 256-column block
REDUCE_CASES = [
    ((3, 4, 5), [1], 1),
    ((2, 3, 4, 5), [1, 2], 0),
    ((2, 3, 4, 5), [0, 2], 1),
    ((4, 6), None, 0),
    ((3, 7, 2), [-1], 1),
    ((2, 5, 300), [1], 0),
]


def _input(op: str, shape: tuple[int, ...], dt: Any, seed: int = 0) -> np.ndarray:
    if op == "ReduceProd":  # keep products in range
        x = (
            arr(shape, dt, seed, low=0.5, high=1.5)
            if dt in (F32, F16)
            else arr(shape, dt, seed, low=-2, high=2)
        )
    elif op == "ReduceLogSum":
        x = arr(shape, dt, seed, low=0.1, high=3)
    else:
        x = arr(shape, dt, seed, low=-9, high=9)
    return x


@pytest.mark.parametrize("case", range(len(REDUCE_CASES)))
@pytest.mark.parametrize("dt", [F32, F16, I32, I64])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce(op: str, dt: Any, case: int) -> None:
    if op in FLOAT_ONLY and dt in (I32, I64):
        pytest.skip("float only")
    shape, axes, keep = REDUCE_CASES[case]
    x = _input(op, shape, dt, case)
    attrs: dict[str, Any] = {"keepdims": keep}
    tol = 2e-2 if dt == F16 else 1e-4
    if case % 2:  # opset 13: axes attribute
        if axes is not None:
            attrs["axes"] = axes
        check_op(op, [x], attrs, opset=13, tol=tol)
    else:  # opset 18: axes input
        consts = {1: np.array(axes, np.int64)} if axes is not None else {}
        check_op(op, [x], attrs, opset=18, const_inputs=consts, tol=tol)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dt", [I8, U8, np.uint32])
def test_reduce_max_min_small_ints(op: str, dt: Any) -> None:
    x = arr((3, 4, 5), dt, 1, low=0 if dt != I8 else -100, high=100)
    check_op(op, [x], {"axes": [1]}, opset=13)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_max_min_bool(op: str) -> None:
    x = arr((4, 5), np.bool_, 2)
    x[0] = True
    x[1] = False
    check_op(op, [x], {"keepdims": 0}, opset=20, const_inputs={1: np.array([1], np.int64)})


def _reference_and_c(op: str, x: np.ndarray, attrs: dict, opset: int, **kw: Any) -> np.ndarray:
    exe, feeds, _ = compile_single_op(op, [x], attrs, opset=opset, **kw)
    ref = exe.run_reference(feeds)["out0"]
    got = run_c(exe, feeds)["out0"]  # compared here: infinities would void the usual tolerance
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=2e-3)
    return ref


@pytest.mark.parametrize("dt", [F32, F16])
def test_reduce_nan(dt: Any) -> None:
    """Max/Min propagate NaN; the sums give NaN."""
    x = arr((3, 6, 2), dt, 3)
    x[1, 2, 0] = np.nan
    for op in ("ReduceMax", "ReduceMin", "ReduceL2", "ReduceLogSumExp"):
        y = _reference_and_c(op, x, {"axes": [1], "keepdims": 0}, 13)
        assert (
            np.isnan(y[1, 0]) and not np.isnan(y[[0, 2], 0]).any() and not np.isnan(y[:, 1]).any()
        )


def test_reduce_log_sum_exp_stable() -> None:
    x = np.array([[1000.0, 1000.0, -1000.0], [-np.inf, -np.inf, -np.inf]], np.float32)
    y = _reference_and_c("ReduceLogSumExp", x, {"axes": [1], "keepdims": 0}, 13)
    np.testing.assert_allclose(y, [1000.0 + np.log(2.0), -np.inf], rtol=1e-6)


@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp"])
def test_reduce_noop_with_empty_axes(op: str) -> None:
    """axes empty + noop_with_empty_axes: f applied to each element (numpy's axis=())."""
    check_op(op, [arr((3, 4), F32, 4, low=0.5, high=3)], {"noop_with_empty_axes": 1}, opset=18)


def test_reduce_instruction() -> None:
    exe, _, _ = compile_single_op("ReduceL2", [arr((2, 3, 4), F32)], {"axes": [1]}, opset=13)
    (ins,) = [i for p in exe.program.programs for i in p.instrs if i.op == Op.REDUCE]
    assert ins.attrs == (int(ReduceFn.L2), 2, 3, 4)


# ---------------------------------------------------------------- ArgMax / ArgMin


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dt", [F32, F16, I32, I64, I8, U8])
@pytest.mark.parametrize(
    "attrs", [{}, {"axis": 1, "keepdims": 0}, {"axis": -1, "select_last_index": 1}], ids=str
)
def test_arg(op: str, dt: Any, attrs: dict) -> None:
    x = arr((4, 5, 300), dt, 5, low=0, high=4)  # small range: many ties
    check_op(op, [x], attrs, opset=13)


@pytest.mark.parametrize("opset", [1, 11, 12])
def test_arg_old_opsets(opset: int) -> None:
    check_op("ArgMax", [arr((3, 4), F32, 6)], {"axis": 1}, opset=opset)


@pytest.mark.parametrize("last", [0, 1])
def test_arg_nan(last: int) -> None:
    """NaN wins both ArgMax and ArgMin (numpy's rule): the first NaN, or the last one."""
    x = np.array([[1.0, np.nan, 3.0, np.nan, 0.0], [1.0, 3.0, 3.0, 0.0, 0.0]], np.float32)
    for op, want in (("ArgMax", [[1, 3], [1, 2]]), ("ArgMin", [[1, 3], [3, 4]])):
        y = _reference_and_c(op, x, {"axis": 1, "keepdims": 0, "select_last_index": last}, 13)
        np.testing.assert_array_equal(y, [want[0][last], want[1][last]])


# ---------------------------------------------------------------- CumSum


@pytest.mark.parametrize("dt", [F32, F16, I32, I64, np.uint32])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("flags", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(dt: Any, axis: int, flags: tuple[int, int]) -> None:
    x = arr((3, 4, 5), dt, 7, low=0 if dt == np.uint32 else -5, high=5)
    attrs = {"exclusive": flags[0], "reverse": flags[1]}
    check_op("CumSum", [x], attrs, opset=14, const_inputs={1: np.array(axis, np.int32)})


@pytest.mark.parametrize("dt", [F32, I64])
@pytest.mark.parametrize("flags", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod(dt: Any, flags: tuple[int, int]) -> None:
    """CUMPROD shares CUMSUM's plan and kernel; checked against onnx.reference (ORT has none)."""
    from onnx.reference import ReferenceEvaluator

    x = arr((3, 4, 5), dt, 9, low=-2, high=2)
    attrs = {"exclusive": flags[0], "reverse": flags[1]}
    exe, feeds, model = compile_single_op(
        "CumProd", [x], attrs, opset=26, const_inputs={1: np.array(1, np.int64)}
    )
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-6)
    assert Op.CUMPROD in {i.op for i in exe.program.program(exe.program.main_programs[0]).instrs}


def test_cumsum_wide() -> None:
    x = arr((2, 40, 600), F32, 8)
    check_op("CumSum", [x], {}, opset=11, const_inputs={1: np.array([1], np.int64)}, tol=1e-4)


# ---------------------------------------------------------------- TopK


def _check_multi(
    op: str, inputs: list[np.ndarray], attrs: dict, opset: int, consts: dict, n_out: int
) -> None:
    model = single_node(op, inputs, attrs, opset=opset, const_inputs=consts, num_outputs=n_out)
    exe = Compiler.compile(model)
    feeds = feeds_of(model, inputs)
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    want = expected(model, feeds)
    assert set(got) == set(want)
    for name, w in want.items():
        assert got[name].dtype == w.dtype and got[name].shape == w.shape, name
        np.testing.assert_array_equal(got[name], w, err_msg=name)


@pytest.mark.parametrize("dt", [F32, F16, I32, I64, I8, U8])
@pytest.mark.parametrize("axis,k", [(-1, 3), (1, 1), (0, 4)])
@pytest.mark.parametrize("largest", [1, 0])
def test_topk(dt: Any, axis: int, k: int, largest: int) -> None:
    x = arr((4, 6, 7), dt, 9, low=0, high=5)  # ties: lower index first
    attrs = {"axis": axis, "largest": largest}
    _check_multi("TopK", [x], attrs, 11, {1: np.array([k], np.int64)}, 2)


def _topk_column(dt: Any, n: int, order: str) -> np.ndarray:
    """n values with many ties; floats also -0/+0, infinities and NaNs; sorted or not."""
    v = np.random.default_rng(n).integers(-40, 40, n)
    if order == "ascending":
        v = np.sort(v)
    elif order == "descending":
        v = np.sort(v)[::-1]
    x = v.astype(dt)
    if np.dtype(dt).kind == "f":
        x[::7] = -0.0
        x[3::11] = np.inf
        x[5::13] = -np.inf
        x[9::17] = np.nan
    return x


@pytest.mark.parametrize("dt", [F32, F16, I32, I64, I8, U8, np.uint32])
@pytest.mark.parametrize("order", ["random", "ascending", "descending"])
def test_topk_large_k(dt: Any, order: str) -> None:
    """k near n: the selection and then the sort of thousands of entries (quicksort, and its
    heapsort fallback on ordered input), along the last axis and along a strided one."""
    n = 3000
    x = _topk_column(dt, n, order)
    for k, largest in [(n, 1), (n, 0), (n // 3, 1), (n - 1, 0)]:
        rows = np.stack([x, x[::-1]])
        _check_multi(
            "TopK", [rows], {"axis": 1, "largest": largest}, 11, {1: np.array([k], np.int64)}, 2
        )
    cols = np.stack([x, x[::-1], np.roll(x, 5)], axis=1)  # [n, 3]: columns 3 elements apart
    _check_multi("TopK", [cols], {"axis": 0}, 11, {1: np.array([n // 2], np.int64)}, 2)


def test_topk_opsets() -> None:
    x = arr((5, 300), F32, 10)  # several heap levels and many columns of work
    _check_multi("TopK", [x], {"axis": 1, "k": 17}, 1, {}, 2)
    _check_multi("TopK", [x], {"axis": 0}, 10, {1: np.array([5], np.int64)}, 2)


def test_topk_nan() -> None:
    """NaN ranks above +inf: first for largest, last for smallest."""
    x = np.array([[1.0, np.nan, np.inf, -1.0, np.nan]], np.float32)
    model = single_node(
        "TopK",
        [x],
        {"largest": 1},
        opset=11,
        const_inputs={1: np.array([5], np.int64)},
        num_outputs=2,
    )
    exe = Compiler.compile(model)
    feeds = feeds_of(model, [x])
    ref = exe.run_reference(feeds)
    got = run_c(exe, feeds)
    for name in ("out0", "out1"):
        np.testing.assert_array_equal(got[name], ref[name])
    np.testing.assert_array_equal(ref["out1"], [[1, 4, 2, 0, 3]])


def test_topk_values_only() -> None:
    """An unused indices output still gets storage: the instruction writes both."""
    x = arr((3, 8), F32, 11)
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("TopK", ["x", "k"], ["v", ""])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, (3, 8))],
        [onnx.helper.make_tensor_value_info("v", onnx.TensorProto.FLOAT, (3, 2))],
        [onnx.numpy_helper.from_array(np.array([2], np.int64), "k")],
    )
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 11)])
    exe = Compiler.compile(m)
    got = run_c(exe, {"x": x})["v"]
    np.testing.assert_array_equal(got, -np.sort(-x, axis=1)[:, :2])


# ---------------------------------------------------------------- LogSoftmax, Hardmax, LpNorm


@pytest.mark.parametrize("op", ["LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, -1), (13, 1), (13, 0), (13, -1)])
def test_softmax_like(op: str, dt: Any, opset: int, axis: int) -> None:
    x = arr((3, 4, 300), dt, 12, low=-5, high=5)
    if op == "Hardmax":
        x = np.round(x).astype(dt)  # ties: the first max
    check_op(op, [x], {"axis": axis}, opset=opset, tol=2e-2 if dt == F16 else 1e-5)


def test_log_softmax_rows_with_infinities_and_nan() -> None:
    """float32 rows (the vectorised path): -inf entries stay -inf, a NaN makes its row NaN,
    a row longer than one chunk of the stop hook, large magnitudes without overflow."""
    x = arr((4, 70000), F32, 14, low=-5, high=5)
    x[0, :3] = -np.inf
    x[1, 5] = np.nan
    x[2] *= 1e4
    exe, feeds, _ = compile_single_op("LogSoftmax", [x], {"axis": 1})
    got = run_c(exe, feeds)["out0"]
    x64 = x.astype(np.float64)
    m = np.nanmax(x64, axis=1, keepdims=True)
    want = x64 - m - np.log(np.exp(x64 - m).sum(1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert np.isneginf(got[0, :3]).all() and np.isnan(got[1]).all()


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize("axis", [0, -1])
def test_lp_normalization(p: int, dt: Any, axis: int) -> None:
    x = arr((4, 5), dt, 13)
    x[:, 0] = 0  # a zero norm gives 0
    x[0, :] = 0
    check_op(
        "LpNormalization", [x], {"p": p, "axis": axis}, opset=13, tol=2e-2 if dt == F16 else 1e-5
    )


# ---------------------------------------------------------------- errors


def test_errors() -> None:
    with pytest.raises(UnsupportedDTypeError, match="int32 is not supported"):
        compile_single_op("ReduceLogSum", [arr((3, 4), I32)], opset=13)
    with pytest.raises(UnsupportedDTypeError, match="int8"):
        compile_single_op("ReduceMax", [arr((3, 4), I8)], opset=11)  # int8 from opset 12
    with pytest.raises(UnsupportedDTypeError, match="float16"):
        compile_single_op("CumSum", [arr((3, 4), F16)], opset=11, const_inputs={1: np.array(0)})
    with pytest.raises(ShapeError, match="k = 9 outside"):
        k9 = {1: np.array([9], np.int64)}
        Compiler.compile(single_node("TopK", [arr((3, 4), F32)], const_inputs=k9, num_outputs=2))
    with pytest.raises(UnsupportedAttributeError, match="p = 3"):
        compile_single_op("LpNormalization", [arr((3, 4), F32)], {"p": 3}, opset=1)
    with pytest.raises(ShapeError, match="out of range"):
        compile_single_op("ArgMax", [arr((3, 4), F32)], {"axis": 2}, opset=13)
    h = onnx.helper

    def run_time_k(declared: tuple[int, ...] | None) -> onnx.ModelProto:
        g = h.make_graph(
            [h.make_node("TopK", ["x", "k"], ["v", "i"])],
            "g",
            [
                h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, (3, 4)),
                h.make_tensor_value_info("k", onnx.TensorProto.INT64, (1,)),
            ],
            [h.make_tensor_value_info("v", onnx.TensorProto.FLOAT, declared)],
        )
        return h.make_model(g, opset_imports=[h.make_opsetid("", 11)])

    # a run-time K is a data-dependent extent (tests/test_ops_detect.py), unless a graph
    # output declares that extent: then K's value is needed when compiling
    assert Compiler.compile(run_time_k(None)).output_names == ["v", "v:count"]
    with pytest.raises(UnsupportedAttributeError, match="must be a constant"):
        Compiler.compile(run_time_k((3, 2)))


def _tampered(exe: Executable, op: Op, pos: int, value: int) -> Executable:
    return edited(exe, lambda i: with_attr(i, pos, value) if i.op == op else i)


@pytest.mark.parametrize(
    "onnx_op,op,pos,value,text",
    [
        ("ReduceL2", Op.REDUCE, 0, 10, "unknown reduce function 10"),
        ("ReduceLogSum", Op.REDUCE, 2, 5, r"outer\*n\*inner = 3\*5\*1 != input numel 12"),
        ("ReduceMax", Op.REDUCE, 3, 0, "inner = 0 must be >= 1"),
        ("ArgMax", Op.ARG_REDUCE, 1, 2, "select_last_index must be 0 or 1"),
        ("CumSum", Op.CUMSUM, 4, 7, "reverse must be 0 or 1"),
        ("TopK", Op.TOPK, 3, 5, r"k = 5 outside \[1, n = 4\]"),
        ("TopK", Op.TOPK, 3, 3, r"outer\*k\*inner = 9 != output numel 6"),
        ("LogSoftmax", Op.LOG_SOFTMAX, 0, 4, "outer"),
    ],
)
def test_verifier_rejects(onnx_op: str, op: Op, pos: int, value: int, text: str) -> None:
    x = arr((3, 4), F32, 14, low=0.5, high=2)
    consts: dict[int, Any] = {}
    attrs: dict[str, Any] = {"axis": 1} if onnx_op in ("ArgMax", "LogSoftmax") else {}
    if onnx_op.startswith("Reduce"):
        attrs = {"axes": [1], "keepdims": 0}
    if onnx_op == "CumSum":
        consts = {1: np.array(1)}
    n_out = 1
    if onnx_op == "TopK":
        consts, n_out = {1: np.array([2], np.int64)}, 2
    model = single_node(onnx_op, [x], attrs, opset=13, const_inputs=consts, num_outputs=n_out)
    exe = _tampered(Compiler.compile(model), op, pos, value)
    with pytest.raises(Exception, match=text):
        run_c(exe, feeds_of(model, [x]))
