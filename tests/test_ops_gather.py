"""Gathers and scatters with run-time indices (GATHER, GATHER_ELEMENTS, GATHER_ND,
SCATTER_ELEMENTS, SCATTER_ND) and the ops composed from them (OneHot, Trilu, EyeLike): every
case compiled, run on the NumPy reference and compared with onnxruntime, and run on the C kernels
and compared with the reference. Indices are graph inputs, so they are only known at run time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from models import F16, F32, I32, I64, arr, check_op, compile_single_op, edited, run_c, with_attr

from pyipu import errors
from pyipu.compiler.errors import ShapeError, UnsupportedAttributeError, UnsupportedDTypeError
from pyipu.enums import Op

ALL = [F32, F16, I32, I64, np.int8, np.uint8, np.bool_]


def check_onnx_ref(op: str, inputs: list[np.ndarray], attrs: dict, opset: int) -> None:
    """check_op for the cases onnxruntime rejects (float16 scatter reductions, Scatter-11):
    the NumPy reference against onnx.reference, the C kernels against the NumPy reference."""
    from models import assert_matches_reference
    from onnx.reference import ReferenceEvaluator

    exe, feeds, model = compile_single_op(op, inputs, attrs, opset=opset)
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    assert got["out0"].dtype == want.dtype and got["out0"].shape == want.shape
    np.testing.assert_allclose(got["out0"].astype(F32), want.astype(F32), rtol=2e-2, atol=2e-2)


def idx(shape: tuple[int, ...], n: int, dt: Any = I64, seed: int = 1) -> np.ndarray:
    """Random indices in [-n, n): negative ones exercise the wrap."""
    return np.random.default_rng(seed).integers(-n, n, shape).astype(dt)


def perm_idx(shape: tuple[int, ...], axis: int, n: int, dt: Any = I64) -> np.ndarray:
    """Indices along `axis` without repeats (each line a slice of a permutation of range(n))."""
    rng = np.random.default_rng(2)
    lines = np.moveaxis(np.zeros(shape, np.int64), axis, -1)
    out = np.stack([rng.permutation(n)[: shape[axis]] for _ in range(lines[..., 0].size)])
    return np.ascontiguousarray(np.moveaxis(out.reshape(lines.shape), -1, axis).astype(dt))


# ---------------------------------------------------------------- Gather


@pytest.mark.parametrize("dt", ALL)
def test_gather_dtypes(dt: Any) -> None:
    check_op("Gather", [arr((5, 4), dt), idx((3,), 5)], {"axis": 0})


@pytest.mark.parametrize(
    "shape,axis,ishape",
    [
        ((6,), 0, ()),  # 0-d indices: the axis disappears
        ((4, 5, 3), 1, (2, 3)),
        ((4, 5, 3), -1, (7,)),
        ((4, 5, 3), 0, (2, 1, 2)),
        ((3, 2, 4, 5), 2, ()),
        ((100, 70), 0, (300,)),  # several work items
    ],
)
@pytest.mark.parametrize("it", [I32, I64])
def test_gather(shape: tuple[int, ...], axis: int, ishape: tuple[int, ...], it: Any) -> None:
    check_op("Gather", [arr(shape, F32), idx(ishape, shape[axis], it)], {"axis": axis})


@pytest.mark.parametrize("opset", [1, 11, 13])
def test_gather_opsets(opset: int) -> None:
    check_op("Gather", [arr((4, 3), I64), idx((2, 2), 3)], {"axis": 1}, opset=opset)


def test_gather_constant_indices() -> None:
    check_op("Gather", [arr((4, 3), F16)], {"axis": 0}, const_inputs={1: np.array([3, -4, 0])})


# ---------------------------------------------------------------- GatherElements / GatherND


@pytest.mark.parametrize(
    "shape,axis,ishape",
    [
        ((4, 5), 0, (6, 5)),
        ((4, 5), 1, (4, 2)),
        ((4, 5, 3), -2, (2, 7, 1)),  # indices smaller than data off the axis
        ((200, 90), 1, (200, 90)),  # several work items
    ],
)
@pytest.mark.parametrize("dt", [F32, I64, np.uint8])
def test_gather_elements(
    shape: tuple[int, ...], axis: int, ishape: tuple[int, ...], dt: Any
) -> None:
    check_op("GatherElements", [arr(shape, dt), idx(ishape, shape[axis], I32)], {"axis": axis})


@pytest.mark.parametrize(
    "shape,ishape,b",
    [
        ((4, 5), (3, 1), 0),
        ((4, 5), (3, 2), 0),
        ((4, 5, 6), (2, 3, 2), 0),
        ((2, 5, 6), (2, 4, 1), 1),
        ((2, 3, 5, 6), (2, 3, 2), 2),
        ((2, 3, 5, 6), (2, 7, 3), 1),
    ],
)
@pytest.mark.parametrize("dt", [F32, F16, I32, np.bool_])
def test_gather_nd(shape: tuple[int, ...], ishape: tuple[int, ...], b: int, dt: Any) -> None:
    k = ishape[-1]
    bound = np.array(shape[b : b + k])
    ind = (np.random.default_rng(3).integers(0, 1 << 20, ishape) % bound) - bound * (
        np.arange(np.prod(ishape)).reshape(ishape) % 3 == 0
    )
    check_op("GatherND", [arr(shape, dt), ind.astype(I64)], {"batch_dims": b}, opset=13)


# ---------------------------------------------------------------- ScatterElements / Scatter


REDS = ["none", "add", "mul", "max", "min"]


@pytest.mark.parametrize("red", REDS)
@pytest.mark.parametrize("dt", [F32, F16, I32, I64])
def test_scatter_elements_reductions(red: str, dt: Any) -> None:
    # duplicates along the axis except for "none", whose order ORT does not define
    shape, axis, ishape = (4, 6, 3), 1, (3, 5, 2)
    ind = perm_idx(ishape, axis, 6) if red == "none" else idx(ishape, 6)
    ups = arr(ishape, dt, seed=5, low=-2, high=2)
    check = check_onnx_ref if dt == F16 and red != "none" else check_op
    check("ScatterElements", [arr(shape, dt), ind, ups], {"axis": axis, "reduction": red}, opset=18)


@pytest.mark.parametrize("dt", [np.bool_, np.int8, F16])
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements_dtypes(dt: Any, axis: int) -> None:
    ind = perm_idx((3, 4), axis, 5)
    check_op("ScatterElements", [arr((5, 5), dt), ind, arr((3, 4), dt, seed=4)], {"axis": axis})


@pytest.mark.parametrize("opset", [9, 10])
def test_scatter_deprecated(opset: int) -> None:
    ind = perm_idx((2, 3), 1, 3, I32)
    check_op("Scatter", [arr((3, 3), F32), ind, arr((2, 3), F32)], {"axis": 1}, opset=opset)


def test_scatter_deprecated_opset11() -> None:
    """onnxruntime and onnx.reference reject Scatter-11: it must equal ScatterElements-11."""
    ins = [arr((3, 3), F32), np.array([[-1, 0, 2]], I64), arr((1, 3), F32)]
    exe, feeds, _ = compile_single_op("Scatter", ins, {"axis": 1}, opset=11)
    check_op("ScatterElements", ins, {"axis": 1}, opset=11)
    want = compile_single_op("ScatterElements", ins, {"axis": 1}, opset=11)[0].run_reference(feeds)
    np.testing.assert_array_equal(exe.run_reference(feeds)["out0"], want["out0"])
    np.testing.assert_array_equal(run_c(exe, feeds)["out0"], want["out0"])


def test_scatter_elements_duplicates_last_wins() -> None:
    """reduction none: a repeated destination keeps the last update (documented)."""
    data = np.zeros((2, 4), F32)
    ind = np.array([[1, 1, 3], [0, 0, 0]], I64)
    ups = np.arange(6, dtype=F32).reshape(2, 3) + 1
    exe, feeds, _ = compile_single_op("ScatterElements", [data, ind, ups], {"axis": 1}, opset=13)
    want = np.array([[0, 2, 0, 3], [6, 0, 0, 0]], F32)
    ref = exe.run_reference(feeds)
    np.testing.assert_array_equal(ref["out0"], want)
    np.testing.assert_array_equal(run_c(exe, feeds)["out0"], want)


# ---------------------------------------------------------------- ScatterND


@pytest.mark.parametrize("red", REDS)
@pytest.mark.parametrize("dt", [F32, F16, I32, I64])
def test_scatter_nd_reductions(red: str, dt: Any) -> None:
    ind = np.array([[0, 1], [2, 3], [0, 1] if red != "none" else [1, 1], [-1, -4]], I64)
    check = check_onnx_ref if dt == F16 and red != "none" else check_op
    ins = [arr((3, 4, 5), dt), ind, arr((4, 5), dt, seed=4, low=-2, high=2)]
    check("ScatterND", ins, {"reduction": red}, opset=18)


@pytest.mark.parametrize(
    "shape,ishape",
    [((8,), (3, 1)), ((4, 5, 6), (2, 3)), ((4, 5, 6), (2, 2, 1)), ((3, 3000), (2, 1))],
)
@pytest.mark.parametrize("dt", [F32, np.uint8])
def test_scatter_nd(shape: tuple[int, ...], ishape: tuple[int, ...], dt: Any) -> None:
    k = ishape[-1]
    rows = np.random.default_rng(7).permutation(int(np.prod(shape[:k])))[
        : int(np.prod(ishape[:-1]))
    ]
    ind = np.stack(np.unravel_index(rows, shape[:k]), -1).reshape(ishape).astype(I64)
    upd = arr((*ishape[:-1], *shape[k:]), dt, seed=8)
    check_op("ScatterND", [arr(shape, dt), ind, upd], opset=13)


# ---------------------------------------------------------------- composed ops


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("it", [I64, I32, F32])
def test_onehot(axis: int, it: Any) -> None:
    ind = np.array([[0, 3, -1], [9, -5, 2]]).astype(it)  # 9 and -5: out of range, all off
    values = np.array([2, 7], I64)
    check_op("OneHot", [ind, values], {"axis": axis}, opset=11, const_inputs={1: np.array(5)})


@pytest.mark.parametrize("opset", [9, 11])
def test_onehot_constant_values(opset: int) -> None:
    check_op(
        "OneHot",
        [np.array([1, 0, 2], I64)],
        opset=opset,
        const_inputs={1: np.array([3.0], F32), 2: np.array([0.5, -1.0], F32)},
    )


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2, 7])
@pytest.mark.parametrize("shape,dt", [((4, 6), F32), ((2, 5, 3), I64), ((3, 3), np.bool_)])
def test_trilu(upper: int, k: int | None, shape: tuple[int, ...], dt: Any) -> None:
    consts = {} if k is None else {1: np.array(k, I64)}
    check_op("Trilu", [arr(shape, dt)], {"upper": upper}, opset=14, const_inputs=consts)


@pytest.mark.parametrize("attrs", [{}, {"k": 1}, {"k": -2, "dtype": 6}, {"dtype": 9}])
def test_eyelike(attrs: dict) -> None:
    check_op("EyeLike", [arr((3, 5), F32)], attrs, opset=9)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "op,inputs,attrs",
    [
        ("Gather", [arr((4, 3), F32), np.array([0, 4], I64)], {"axis": 0}),
        ("Gather", [arr((4, 3), F32), np.array([-4, 0, -4, -5], I32)], {"axis": 1}),
        ("GatherElements", [arr((4, 3), F32), np.array([[0], [-5]], I64)], {"axis": 0}),
        ("GatherND", [arr((4, 3), I64), np.array([[1, 3]], I64)], {}),
        ("ScatterElements", [arr((4, 3), F32), np.array([[4]], I64), arr((1, 1), F32)], {}),
        ("ScatterND", [arr((4, 3), F16), np.array([[0], [4]], I64), arr((2, 3), F16)], {}),
    ],
)
def test_index_out_of_range_at_run_time(op: str, inputs: list[np.ndarray], attrs: dict) -> None:
    exe, feeds, _ = compile_single_op(op, inputs, attrs, opset=13)
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        exe.run_reference(feeds)
    with pytest.raises(errors.InvalidArgumentError, match="index -?[0-9]+ .*out of range"):
        run_c(exe, feeds)


def test_compile_errors() -> None:
    with pytest.raises(UnsupportedDTypeError, match="indices have dtype float32"):
        compile_single_op("Gather", [arr((4, 3), F32), np.array([0.0], F32)])
    with pytest.raises(ShapeError, match="index 5 at \\[1\\] is out of range"):
        compile_single_op("Gather", [arr((4, 3), F32)], const_inputs={1: np.array([0, 5])})
    with pytest.raises(UnsupportedAttributeError, match="reduction 'max' is not defined"):
        compile_single_op(
            "ScatterND",
            [arr((4,), F32), np.array([[0]], I64), arr((1,), F32)],
            {"reduction": "max"},
            opset=16,
        )
    with pytest.raises(UnsupportedDTypeError, match="reduction 'add' on dtype bool"):
        compile_single_op(
            "ScatterND",
            [arr((4,), np.bool_), np.array([[0]], I64), arr((1,), np.bool_)],
            {"reduction": "add"},
            opset=16,
        )
    with pytest.raises(ShapeError, match="batch_dims 2"):
        compile_single_op("GatherND", [arr((4, 3), F32), np.array([[0]], I64)], {"batch_dims": 2})


def _tampered(op: str, inputs: list[np.ndarray], pos: int, value: int) -> Any:
    exe, feeds, _ = compile_single_op(op, inputs, opset=13)
    return edited(exe, lambda i: with_attr(i, pos, value) if i.op >= Op.GATHER else i), feeds


@pytest.mark.parametrize(
    "op,pos,value,text",
    [
        ("Gather", 1, 5, r"outer\*n\*inner"),
        ("Gather", 0, -1, "must be >= 0"),
        ("GatherElements", 0, 2, "axis 2 out of range"),
        ("GatherND", 0, 2, "batch_dims 2 must be in"),
        ("ScatterElements", 1, 5, "reduction 5"),
        ("ScatterND", 0, -1, "reduction -1"),
    ],
)
def test_verifier_rejects(op: str, pos: int, value: int, text: str) -> None:
    data, ind = arr((4, 3), F32), np.array([[1, 0]], I64)
    inputs = {
        "Gather": [data, ind],
        "GatherElements": [data, ind],
        "GatherND": [data, ind],
        "ScatterElements": [data, ind, arr((1, 2), F32)],
        "ScatterND": [data, ind, arr((1,), F32)],
    }[op]
    exe, feeds = _tampered(op, inputs, pos, value)
    with pytest.raises(errors.BadProgramError, match=text):
        run_c(exe, feeds)
