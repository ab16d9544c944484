"""Malformed and unusual run-time inputs (docs/runtime.md, "Input and output arrays"): each
gives a typed pyipu error or the documented behaviour. Wrong dtype, shape, non-contiguous
strides and read-only outputs are covered for both execution paths in test_runtime.py and
test_fast_path.py; this file adds zero-size arrays, NaN/Inf, odd array kinds and aliasing."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyipu import errors, runtime
from pyipu.compiler import Compiler

W = (np.arange(16, dtype=np.float32).reshape(4, 4) - 7.5) / 8


@pytest.fixture(scope="module")
def exe():
    """Y = X @ W: every output element reads a whole input row (aliasing would show)."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "mm",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(W, "W")],
    )
    return Compiler.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


@pytest.fixture(params=["one_batch", "two_batches"])
def rows(request) -> int:
    """One batch may take the calling-thread fast path; two batches take the queued path."""
    return 2 if request.param == "one_batch" else 4


def x_of(rows: int) -> np.ndarray:
    return np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)


def test_same_array_as_input_and_output_gives_the_out_of_place_result(exe, rows):
    a = x_of(rows)
    want = a @ W
    with runtime.Runner(exe) as r:
        r.execute({"X": a}, {"Y": a})
    np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)


def test_overlapping_views_as_input_and_output(exe):
    buf = np.random.default_rng(0).standard_normal(12).astype(np.float32)
    x, y = buf[:8].reshape(2, 4), buf[4:].reshape(2, 4)  # share buf[4:8]
    want = x @ W
    with runtime.Runner(exe) as r:
        r.execute({"X": x}, {"Y": y})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_nan_and_inf_propagate_as_ieee(exe, rows):
    x = x_of(rows)
    x[0, 0], x[1, 2] = np.nan, np.inf
    y = np.zeros_like(x)
    with runtime.Runner(exe) as r:
        r.execute({"X": x}, {"Y": y})
    assert np.isnan(y[0]).all()  # NaN * w is NaN in every column
    with np.errstate(invalid="ignore"):
        want = x @ W
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(want))


@pytest.mark.parametrize(
    ("x", "y", "exc", "text"),
    [
        (np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32), errors.ShapeError, "[0, 4]"),
        (np.zeros((2, 4), np.float32), np.zeros((0, 4), np.float32), errors.ShapeError, "[0, 4]"),
        (np.zeros((2, 0), np.float32), np.zeros((2, 4), np.float32), errors.ShapeError, "[2, 0]"),
        (np.float32(1.0), np.zeros((2, 4), np.float32), errors.InvalidArgumentError, "ndarray"),
        (np.zeros((), np.float32), np.zeros((2, 4), np.float32), errors.ShapeError, "[]"),
        (np.zeros((1, 2, 4), np.float32), np.zeros((2, 4), np.float32), errors.ShapeError, ""),
        (np.zeros((2, 4), bool), np.zeros((2, 4), np.float32), errors.DTypeError, "bool"),
        (np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float16), errors.DTypeError, ""),
        (
            np.zeros((2, 4), np.float32),
            np.zeros((4, 2), np.float32).T,
            errors.InvalidArgumentError,
            "C-contiguous",
        ),
        (
            np.zeros((2, 4), np.float32, order="F")[:, ::-1],
            np.zeros((2, 4), np.float32),
            errors.InvalidArgumentError,
            "C-contiguous",
        ),
        (np.ma.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32), None, None),
    ],
)
def test_unusual_arrays(exe, x, y, exc, text):
    with runtime.Runner(exe) as r:
        if exc is None:  # an ndarray subclass of the right dtype and layout is accepted
            r.execute({"X": x}, {"Y": y})
            return
        with pytest.raises(exc) as info:
            r.execute({"X": x}, {"Y": y})
        assert text in str(info.value)


def test_read_only_input_is_fine(exe):
    x = x_of(2)
    x.flags.writeable = False
    y = np.zeros_like(x)
    with runtime.Runner(exe) as r:
        r.execute({"X": x}, {"Y": y})
    np.testing.assert_allclose(y, x @ W, rtol=1e-5, atol=1e-6)
