"""Requests whose output arrays overlap their input arrays (docs/runtime.md, "Input and output
arrays"): the result is the out-of-place one for every shift and batch count, with and without
batching_dim, synchronous or not. A request of several iterations writes an iteration's outputs
before later iterations read their inputs, so the runtime must not read inputs from memory an
output has already overwritten. Model Runtime sessions' zero-copy queues refuse, with a typed
error, an output slot that would overwrite an input slot before it is read."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from pyipu import errors, model_runtime, runtime
from pyipu.compiler import Compiler, CompilerOptions

W = (np.arange(16, dtype=np.float32).reshape(4, 4) - 7.5) / 8
ROWS = 2  # rows of one batch
PAD = 64  # floats of room on either side of the arrays in the shared buffer
SHIFTS = [-13, -12, -4, -1, 0, 1, 4, 12, 13]


def compile_matmul(bps: int = 1):
    """Y = X @ W (every output element reads a whole input row) and Z = X + B."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"]), helper.make_node("Add", ["X", "B"], ["Z"])],
        "mm",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [ROWS, 4]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, [ROWS, 4]),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, [ROWS, 4]),
            helper.make_tensor_value_info("Z", TensorProto.FLOAT, [ROWS, 4]),
        ],
        [numpy_helper.from_array(W, "W")],
    )
    options = CompilerOptions()
    options.batches_per_step = bps
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return Compiler.compile(model, None, options)


@pytest.fixture(scope="module")
def exe():
    return compile_matmul()


@pytest.fixture(scope="module")
def exe_bps4():
    return compile_matmul(bps=4)


def run_overlapping(r, rows: int, shift: int, target: str, sync: bool, seed: int = 0) -> None:
    """One request whose output Y starts `shift` floats after input `target` in one buffer;
    asserts every output equals the result computed on separate arrays."""
    n = rows * 4
    rng = np.random.default_rng(seed)
    buf = rng.standard_normal(2 * PAD + 3 * n).astype(np.float32)
    x = buf[PAD : PAD + n].reshape(rows, 4)
    b = buf[PAD + n : PAD + 2 * n].reshape(rows, 4)
    z = np.zeros((rows, 4), np.float32)
    want_y, want_z = x @ W, x + b
    start = (PAD if target == "X" else PAD + n) + shift
    y = buf[start : start + n].reshape(rows, 4)
    if sync:
        r.execute({"X": x, "B": b}, {"Y": y, "Z": z})
    else:
        r.execute_async({"X": x, "B": b}, {"Y": y, "Z": z}).wait()
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, want_z, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batching", [False, True], ids=["batches", "batching_dim"])
@pytest.mark.parametrize("threads", [1, 2])
def test_every_shift_and_batch_count_gives_the_out_of_place_result(exe, batching, threads):
    config = runtime.RuntimeConfig(num_threads=threads)
    if batching:
        config.batching_dim = 0
    row_counts = [1, 2, 3, 4, 5, 7, 10] if batching else [ROWS * k for k in (1, 2, 3, 5, 8)]
    with runtime.Runner(exe, config) as r:
        for rows in row_counts:
            for shift in SHIFTS:
                for target in ("X", "B"):
                    for sync in (True, False):
                        run_overlapping(r, rows, shift, target, sync, seed=rows)


def test_several_batches_per_step(exe_bps4):
    with runtime.Runner(exe_bps4, runtime.RuntimeConfig(num_threads=2)) as r:
        for k in (2, 3, 4, 6, 9):
            for shift in SHIFTS:
                run_overlapping(r, ROWS * k, shift, "X", sync=k % 2 == 0, seed=k)


def test_requests_in_flight_together(exe):
    """Overlapping requests queued behind each other (the device may run two at once)."""
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=2)) as r:
        n = 6 * ROWS * 4
        pending = []
        for i in range(8):
            buf = np.random.default_rng(i).standard_normal(n + 16).astype(np.float32)
            x, y = buf[:n].reshape(-1, 4), buf[12 : 12 + n].reshape(-1, 4)
            b = np.ones_like(x)
            want = x @ W
            z = np.zeros_like(x)
            pending.append((r.execute_async({"X": x, "B": b}, {"Y": y, "Z": z}), y, want))
        for future, y, want in pending:
            future.wait()
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.integers(1, 9),
    shift=st.integers(-3 * ROWS * 4, 3 * ROWS * 4),
    target=st.sampled_from(["X", "B"]),
    batching=st.booleans(),
)
def test_overlap_property(exe, batches, shift, target, batching):
    config = runtime.RuntimeConfig(num_threads=1)
    if batching:
        config.batching_dim = 0
    with runtime.Runner(exe, config) as r:
        run_overlapping(r, ROWS * batches, shift, target, sync=True, seed=batches)


@pytest.mark.parametrize("batching", [False, True], ids=["batches", "batching_dim"])
def test_session_queues_refuse_what_they_cannot_compute(exe, batching):
    """Session queues hold the caller's arrays (zero-copy): an output slot that would overwrite
    an input slot not read yet is refused with a typed error; every accepted set of slots gives
    the out-of-place result."""
    refused = 0
    for batches in (1, 2, 3):
        for shift in SHIFTS:
            config = model_runtime.SessionConfig(num_threads=1)
            if batching:
                config.batching_dim = 0
            with model_runtime.Session(exe, config) as session:
                qm = session.create_queue_manager(timeout_ns=0, capacity=16)
                session.run_load_programs()
                n = batches * ROWS * 4
                buf = np.random.default_rng(batches).standard_normal(2 * PAD + 3 * n)
                buf = buf.astype(np.float32)
                x = buf[PAD : PAD + n].reshape(-1, 4)
                b = np.zeros_like(x)
                z = np.zeros_like(x)
                y = buf[PAD + shift : PAD + shift + n].reshape(-1, 4)
                want = x @ W
                try:
                    if batching:
                        qm.input_queue("X").enqueue(x, rows=len(x))
                        qm.input_queue("B").enqueue(b, rows=len(x))
                        qm.output_queue("Y").enqueue(y, rows=len(x))
                        qm.output_queue("Z").enqueue(z, rows=len(x))
                    else:
                        for k in range(0, len(x), ROWS):
                            qm.input_queue("X").enqueue(x[k : k + ROWS])
                            qm.input_queue("B").enqueue(b[k : k + ROWS])
                            qm.output_queue("Y").enqueue(y[k : k + ROWS])
                            qm.output_queue("Z").enqueue(z[k : k + ROWS])
                except errors.InvalidArgumentError as e:
                    assert "share memory" in str(e)
                    assert shift != 0 or batching
                    refused += 1
                    continue
                for _ in range(batches):
                    session.run_main_programs()
                np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    # Refused: with batching_dim every overlap (|shift| < the array's floats), else an output
    # slot over the next batch's input (0 < shift < 2 batches), in requests of 2 or 3 batches.
    if batching:
        assert refused == sum(abs(s) < k * ROWS * 4 for k in (1, 2, 3) for s in SHIFTS)
    else:
        assert refused == 2 * sum(0 < s < 2 * ROWS * 4 for s in SHIFTS)
