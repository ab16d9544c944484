"""Runner.execute on the caller's arrays (docs/runtime.md, "Buffers used in place"): a request
that runs inline reads its inputs and writes its outputs where the caller's arrays are, unless
the program reaches those bytes through another tensor (a view) or the arrays overlap; the
results are those of the copying path in every case, and inputs are never written."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyipu import errors, runtime
from pyipu.compiler import Compiler

N = 16
RNG = np.random.default_rng(7)
W = RNG.standard_normal((N, N)).astype(np.float32)


def compile_graph(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        list(inits),
    )
    return Compiler.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), None)


@pytest.fixture(scope="module")
def matmul_exe():
    return compile_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"])],
        [("A", (N, N)), ("B", (N, N))],
        [("C", (N, N))],
    )


def run(exe, inputs, outputs, threads: int = 1) -> int:
    """Execute once; returns how many of the request's buffers were used in place."""
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=threads)) as r:
        r.execute(inputs, outputs)
        return r.stats()["in_place_buffers"]


def operands():
    return (RNG.standard_normal((N, N)).astype(np.float32) for _ in range(2))


def test_matmul_runs_on_the_callers_arrays(matmul_exe):
    a, b = operands()
    a0, b0 = a.copy(), b.copy()
    c = np.zeros((N, N), np.float32)
    assert run(matmul_exe, {"A": a, "B": b}, {"C": c}) == 3
    np.testing.assert_allclose(c, a0 @ b0, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_output_over_an_input_is_copied(matmul_exe):
    a, b = operands()
    want = a @ b
    assert run(matmul_exe, {"A": a, "B": b}, {"C": a}) == 2
    np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5)
    # Half a row into B's array: still no byte of B is overwritten before it is read.
    a, b = operands()
    want = a @ b
    buf = np.concatenate([b.ravel(), np.zeros(N // 2, np.float32)])
    c = buf[N // 2 :].reshape(N, N)
    assert run(matmul_exe, {"A": a, "B": buf[: N * N].reshape(N, N)}, {"C": c}) == 2
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_misaligned_arrays_are_copied(matmul_exe):
    a, b = operands()
    raw = np.zeros(2 * N * N * 4 + 8, np.uint8)
    ma = np.frombuffer(raw.data, np.float32, N * N, offset=1).reshape(N, N)
    mc = np.frombuffer(raw.data, np.float32, N * N, offset=N * N * 4 + 3).reshape(N, N)
    ma[...] = a
    assert not ma.flags.aligned and not mc.flags.aligned
    assert run(matmul_exe, {"A": ma, "B": b}, {"C": mc}) == 1
    np.testing.assert_allclose(mc, a @ b, rtol=1e-5, atol=1e-5)


def test_inputs_stay_unchanged_when_their_storage_is_reused():
    # z takes x's arena bytes after x's last read: it must not take the caller's array.
    exe = compile_graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["y"], ["z"])],
        [("x", (64,))],
        [("y", (64,)), ("z", (64,))],
    )
    x = RNG.standard_normal(64).astype(np.float32)
    x0 = x.copy()
    y, z = np.zeros(64, np.float32), np.zeros(64, np.float32)
    assert run(exe, {"x": x}, {"y": y, "z": z}) == 3
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, np.maximum(x0, 0))
    np.testing.assert_array_equal(z, -np.maximum(x0, 0))


def test_views_of_anchors_are_copied():
    # x is read through a Reshape; y is an output a later Reshape reads; o is a Reshape of the
    # MatMul's result.
    shape = helper.make_tensor("s", TensorProto.INT64, (2,), [N, N])
    flat = helper.make_tensor("f", TensorProto.INT64, (1,), [N * N])
    exe = compile_graph(
        [
            helper.make_node("Reshape", ["x", "s"], ["x2"]),
            helper.make_node("Relu", ["x2"], ["y"]),
            helper.make_node("Reshape", ["y", "f"], ["y1"]),
            helper.make_node("Reshape", ["y1", "s"], ["y2"]),
            helper.make_node("MatMul", ["y2", "w"], ["m"]),
            helper.make_node("Reshape", ["m", "f"], ["o"]),
        ],
        [("x", (N * N,))],
        [("y", (N, N)), ("o", (N * N,))],
        [shape, flat, numpy_helper.from_array(W, "w")],
    )
    x = RNG.standard_normal(N * N).astype(np.float32)
    x0 = x.copy()
    y, o = np.zeros((N, N), np.float32), np.zeros(N * N, np.float32)
    assert run(exe, {"x": x}, {"y": y, "o": o}) == 0
    np.testing.assert_array_equal(x, x0)
    relu = np.maximum(x0.reshape(N, N), 0)
    np.testing.assert_array_equal(y, relu)
    np.testing.assert_allclose(o, (relu @ W).ravel(), rtol=1e-5, atol=1e-5)


def test_in_place_and_queued_requests_alternate(matmul_exe):
    # The queued path (execute_async) still finds the arena after inline requests used the
    # caller's arrays, and the other way round. Until the first execute_async there is no device
    # thread, so every execute runs inline; afterwards one runs inline only once the device has
    # parked, so it may be queued (and copy) instead.
    def check(run) -> None:
        a, b = operands()
        c = np.zeros((N, N), np.float32)
        run({"A": a, "B": b}, {"C": c})
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)

    with runtime.Runner(matmul_exe, runtime.RuntimeConfig(num_threads=1)) as r:
        for _ in range(3):
            check(r.execute)
        assert r.stats()["in_place_buffers"] == 9
        for _ in range(3):
            check(lambda i, o: r.execute_async(i, o).wait())
            check(r.execute)
        assert r.stats()["in_place_buffers"] % 3 == 0


def test_a_failed_request_leaves_the_runner_usable():
    data = np.arange(4, dtype=np.float32)
    g = helper.make_graph(
        [helper.make_node("Gather", ["D", "I"], ["O"])],
        "g",
        [helper.make_tensor_value_info("I", TensorProto.INT64, (1,))],
        [helper.make_tensor_value_info("O", TensorProto.FLOAT, (1,))],
        [numpy_helper.from_array(data, "D")],
    )
    exe = Compiler.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), None)
    cfg = runtime.RuntimeConfig(num_threads=1, auto_reset=True)
    with runtime.Runner(exe, cfg) as r:
        o = np.full(1, -1, np.float32)
        with pytest.raises(errors.InvalidArgumentError, match="index 9"):
            r.execute({"I": np.array([9], np.int64)}, {"O": o})
        for i, fut in ((2, False), (3, True), (1, False)):
            o = np.zeros(1, np.float32)
            if fut:
                r.execute_async({"I": np.array([i], np.int64)}, {"O": o}).wait()
            else:
                r.execute({"I": np.array([i], np.int64)}, {"O": o})
            assert o[0] == data[i]
