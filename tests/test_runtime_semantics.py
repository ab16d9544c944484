"""Model Runtime semantics through Runner: device loop and padding, dynamic batching, failure
propagation and auto_reset, statistics; one test per RuntimeConfig field's effect."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from models import scale_model
from onnx import TensorProto, helper

from pyipu import errors, runtime
from pyipu.compiler import Compiler, CompilerOptions


def compile_scale(shape=(4, 3), bps: int = 1):
    options = CompilerOptions()
    options.batches_per_step = bps
    return Compiler.compile(scale_model(shape), None, options)


@pytest.fixture(scope="module")
def exe():
    return compile_scale()


@pytest.fixture(scope="module")
def exe_bps4():
    return compile_scale(bps=4)


def run(runner, x):
    y = np.zeros_like(x)
    runner.execute({"X": x}, {"Y": y})
    return y


def wait_until(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


# --- timeout_ns and padding -------------------------------------------------------------------
def test_timeout_pads_a_started_step(exe_bps4):
    with runtime.Runner(exe_bps4, runtime.RuntimeConfig(timeout_ns=1_000_000)) as r:
        x = np.ones((4, 3), np.float32)
        np.testing.assert_array_equal(run(r, x), 3 * x)
        assert wait_until(lambda: r.stats()["padded_iterations"] == 3)
        assert r.stats()["steps"] == 1


def test_timeout_zero_waits_but_each_request_still_returns(exe_bps4):
    with runtime.Runner(exe_bps4, runtime.RuntimeConfig(timeout_ns=0)) as r:
        x = np.ones((4, 3), np.float32)
        np.testing.assert_array_equal(run(r, x), 3 * x)  # outputs leave after each iteration
        time.sleep(0.05)
        stats = r.stats()
        assert stats["padded_iterations"] == 0 and stats["steps"] == 0  # the step stays open


def test_flush_on_waiting_outputs_only_pads_for_waiting_requests(exe_bps4):
    config = runtime.RuntimeConfig(timeout_ns=1_000_000, flush_on_waiting_outputs=True)
    with runtime.Runner(exe_bps4, config) as r:
        run(r, np.ones((4, 3), np.float32))
        time.sleep(0.05)  # nobody waits for outputs now: no padding although the timeout passed
        assert r.stats()["padded_iterations"] == 0


# --- dynamic batching -------------------------------------------------------------------------
@pytest.mark.parametrize("rows", [1, 3, 4, 5, 11])
def test_batching_dim_accepts_any_rows(exe, rows):
    config = runtime.RuntimeConfig(batching_dim=0, timeout_ns=1_000_000)
    with runtime.Runner(exe, config) as r:
        x = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
        np.testing.assert_allclose(run(r, x), 2 * x + 1, rtol=1e-6)
        if rows % 4:
            assert r.stats()["padded_rows"] > 0


def test_batching_merges_rows_of_concurrent_requests(exe):
    config = runtime.RuntimeConfig(batching_dim=0, timeout_ns=50_000_000)
    with runtime.Runner(exe, config) as r:
        xs = [np.full((n, 3), i, np.float32) for i, n in enumerate([1, 2, 1, 3, 1])]
        ys = [np.zeros_like(x) for x in xs]
        futures = [r.execute_async({"X": x}, {"Y": y}) for x, y in zip(xs, ys, strict=True)]
        for f in futures:
            f.wait()
        for x, y in zip(xs, ys, strict=True):
            np.testing.assert_array_equal(y, 2 * x + 1)  # each caller gets exactly its rows
        assert r.stats()["iterations"] == 2  # 8 rows = two batches of 4, no padding needed


def test_batching_on_dim_1():
    exe = compile_scale(shape=(2, 4))
    config = runtime.RuntimeConfig(batching_dim=1, timeout_ns=1_000_000)
    with runtime.Runner(exe, config) as r:
        x = np.arange(2 * 7, dtype=np.float32).reshape(2, 7)
        np.testing.assert_array_equal(run(r, x), 2 * x + 1)
        with pytest.raises(errors.ShapeError, match="batching_dim=1"):
            run(r, np.zeros((3, 7), np.float32))


def test_batch_size_timeout(exe):
    # timeout_ns = 0 would wait forever for the rest of a partial batch; the batch-size timeout
    # (when enabled) bounds that wait.
    config = runtime.RuntimeConfig(
        batching_dim=0,
        timeout_ns=0,
        is_batch_size_timeout_enabled=True,
        batch_size_timeout_ns=2_000_000,
    )
    with runtime.Runner(exe, config) as r:
        x = np.ones((1, 3), np.float32)
        np.testing.assert_array_equal(run(r, x), 3 * x)
    config = runtime.RuntimeConfig(batching_dim=0, timeout_ns=0)
    with runtime.Runner(exe, config) as r:
        future = r.execute_async(
            {"X": np.ones((1, 3), np.float32)}, {"Y": np.zeros((1, 3), np.float32)}
        )
        assert future.wait(timeout=0.2) is False  # waits for 3 more rows...
        r.execute({"X": np.ones((3, 3), np.float32)}, {"Y": np.zeros((3, 3), np.float32)})
        assert future.wait(timeout=5)  # ...which another request brings


def test_no_wait_when_alone_runs_the_only_request_at_once(exe):
    # timeout_ns = 0: a partial batch would wait forever for other requests' rows; the only
    # request pending runs at once, the remainder of one of several batches too
    config = runtime.RuntimeConfig(batching_dim=0, timeout_ns=0, no_wait_when_alone=True)
    with runtime.Runner(exe, config) as r:
        for rows in (1, 3, 5):
            x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
            y = np.zeros_like(x)
            assert r.execute_async({"X": x}, {"Y": y}).wait(timeout=10)
            np.testing.assert_array_equal(y, 2 * x + 1)
        stats = r.stats()
        assert (stats["iterations"], stats["padded_rows"]) == (4, 3 + 1 + 3)


def test_no_wait_when_alone_still_merges_requests_in_flight(exe):
    # The device is held in its first iteration (an output handler waits) while two one-row
    # requests queue: neither is alone, so their partial batch waits for a third request.
    release, batches = threading.Event(), []

    def handler(y: np.ndarray) -> None:
        batches.append(y.copy())
        release.wait(10)

    config = runtime.RuntimeConfig(batching_dim=0, timeout_ns=0, no_wait_when_alone=True)
    with runtime.Runner(exe, config) as r:
        r.set_user_output_handler("Y", handler)
        first = r.execute_async({"X": np.zeros((4, 3), np.float32)}, {})
        assert wait_until(lambda: len(batches) == 1)
        pair = [r.execute_async({"X": np.full((1, 3), v, np.float32)}, {}) for v in (1, 2)]
        release.set()
        assert first.wait(timeout=10)
        assert not pair[0].wait(timeout=0.2)  # two requests pending: waits for more rows
        r.execute_async({"X": np.full((2, 3), 3, np.float32)}, {}).wait(timeout=10)
        assert all(f.wait(timeout=10) for f in pair)
        assert r.stats()["iterations"] == 2
        np.testing.assert_array_equal(batches[1][:, 0], [3, 5, 7, 7])


# --- failures, auto_reset ---------------------------------------------------------------------
class HandlerFailure(Exception):
    pass


def failing_output_handler(fail: list[bool]):
    def handler(_array: np.ndarray) -> None:
        if fail[0]:
            raise HandlerFailure("output handler failed")

    return handler


def test_failure_without_auto_reset_needs_reset():
    exe = Compiler.compile(_two_output_model(), None)
    with runtime.Runner(exe, runtime.RuntimeConfig(timeout_ns=0)) as r:
        fail = [True]
        r.set_user_output_handler("Z", failing_output_handler(fail))
        x = np.ones((4, 3), np.float32)
        with pytest.raises(errors.CallbackError) as info:
            run(r, x)
        assert isinstance(info.value.__cause__, HandlerFailure)
        with pytest.raises(errors.ResetRequiredError) as info:
            run(r, x)
        assert info.value.recovery_action == "IPU_RESET"
        fail[0] = False
        r.reset()
        np.testing.assert_array_equal(run(r, x), 3 * x)


def test_failure_with_auto_reset_keeps_serving():
    exe = Compiler.compile(_two_output_model(), None)
    with runtime.Runner(exe, runtime.RuntimeConfig(timeout_ns=0, auto_reset=True)) as r:
        fail = [True]
        r.set_user_output_handler("Z", failing_output_handler(fail))
        x = np.ones((4, 3), np.float32)
        with pytest.raises(errors.CallbackError):
            run(r, x)
        fail[0] = False
        np.testing.assert_array_equal(run(r, x), 3 * x)


def test_a_failed_step_fails_every_enqueued_request():
    exe = Compiler.compile(_two_output_model(), None)
    config = runtime.RuntimeConfig(timeout_ns=0, ring_buffer_size_multiplier=4)
    with runtime.Runner(exe, config) as r:
        release = [False]

        def slow_then_fail(_a: np.ndarray) -> None:
            while not release[0]:
                time.sleep(0.001)
            raise HandlerFailure("boom")

        r.set_user_output_handler("Z", slow_then_fail)
        x = np.ones((4, 3), np.float32)
        # one request in the handler, two more queued (4-slot queues): all accepted, none done
        futures = [r.execute_async({"X": x}, {"Y": np.zeros_like(x)}) for _ in range(3)]
        release[0] = True
        for f in futures:
            with pytest.raises(errors.Error):
                f.wait(timeout=10)
        stats = r.stats()
        assert stats["requests_failed"] == 3 and stats["requests_completed"] == 0


def _two_output_model() -> onnx.ModelProto:
    m = scale_model()
    m.graph.node.append(helper.make_node("Identity", ["T"], ["Z"]))
    m.graph.output.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, (4, 3)))
    return m


# --- statistics, ring size, other fields ------------------------------------------------------
def test_stats_latency_throughput_and_queue_depth(exe):
    with runtime.Runner(exe, runtime.RuntimeConfig(timeout_ns=0)) as r:
        x = np.ones((4, 3), np.float32)
        for _ in range(50):
            run(r, x)
        s = r.stats()
        assert s["requests_submitted"] == s["requests_completed"] == 50
        assert 0 < s["latency_p50_ns"] <= s["latency_p99_ns"]
        assert s["throughput_rps"] > 0
        assert s["queue_depth"] == {"X": 0, "Y": 0}


def test_ring_buffer_size_multiplier_bounds_the_queues(exe_bps4):
    for multiplier in (1, 3):
        config = runtime.RuntimeConfig(ring_buffer_size_multiplier=multiplier, timeout_ns=0)
        with runtime.Runner(exe_bps4, config) as r:
            block = [True]
            r.set_user_output_handler("Y", lambda _a, block=block: _spin(block))
            x = np.ones((4 * 40, 3), np.float32)
            # submitting 40 batches blocks while X's queue is full: submit from another thread
            t = threading.Thread(target=r.execute, args=({"X": x}, {}))
            t.start()
            capacity = multiplier * 4
            assert wait_until(lambda r=r, c=capacity: r.stats()["queue_depth"]["X"] == c)
            time.sleep(0.02)
            assert r.stats()["queue_depth"]["X"] == capacity
            block[0] = False
            t.join(timeout=10)
            assert not t.is_alive()


def _spin(block: list[bool]) -> None:
    while block[0]:
        time.sleep(0.0005)


def test_thread_safe_false_with_a_single_caller(exe):
    with runtime.Runner(exe, runtime.RuntimeConfig(thread_safe=False)) as r:
        x = np.ones((4, 3), np.float32)
        np.testing.assert_array_equal(run(r, x), 3 * x)


def test_fields_not_implemented_say_so():
    c = runtime.RuntimeConfig()
    with pytest.raises(errors.UnsupportedError, match="flush_by_name"):
        c.flush_by_name = ({}, {})
    with pytest.raises(errors.UnsupportedError, match="runner_type"):
        c.runner_type = runtime.RunnerType.PackRunner
    c.runner_type = runtime.RunnerType.ModelFusionRunner
    c.device_wait_config = runtime.DeviceWaitConfig(timeout_sec=5, sleep_time_sec=1)


# --- replication, I/O tiles -------------------------------------------------------------------
def test_replicas_share_the_requests(monkeypatch):
    options = CompilerOptions()
    options.replication_factor = 2
    exe = Compiler.compile(scale_model(), None, options)
    with runtime.Runner(exe, runtime.RuntimeConfig(timeout_ns=0)) as r:
        xs = [np.full((4, 3), i, np.float32) for i in range(20)]
        for x in xs:
            np.testing.assert_array_equal(run(r, x), 2 * x + 1)
        stats = r.stats()
        assert stats["replicas"] == 2 and stats["requests_completed"] == 20
        assert [rt.stats()["requests_completed"] for rt in r._runtimes] == [10, 10]
    monkeypatch.setenv("PYIPU_NUM_DEVICES", "1")
    with pytest.raises(errors.NotFoundError, match="replicated 2 times"):
        runtime.Runner(exe)


@pytest.mark.parametrize(("bps", "expected"), [(1, 1), (16, 16), (64, 64)])
def test_num_io_tiles_auto(bps, expected):
    # X and Y are [256, 256] float32: 512 KiB of I/O per batch, 624 KiB of SRAM per tile
    options = CompilerOptions()
    options.batches_per_step = bps
    options.num_io_tiles = "auto"
    exe = Compiler.compile(scale_model((256, 256)), None, options)
    assert exe.program.num_io_tiles == expected


def test_data_parallel_timeout_pads_replicated_steps():
    options = CompilerOptions()
    options.replication_factor = 2
    options.batches_per_step = 4
    exe = Compiler.compile(scale_model(), None, options)
    for enabled, padded in ((True, 3), (False, 0)):
        config = runtime.RuntimeConfig(
            timeout_ns=0, is_batch_size_timeout_enabled=enabled, data_parallel_timeout_ns=1_000_000
        )
        with runtime.Runner(exe, config) as r:
            run(r, np.ones((4, 3), np.float32))
            if padded:
                assert wait_until(lambda r=r, p=padded: r.stats()["padded_iterations"] == p)
            else:
                time.sleep(0.05)
                assert r.stats()["padded_iterations"] == 0


def test_num_threads(exe):
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=1)) as r:
        assert r.stats()["num_threads"] == 1


def _gather_model(n: int = 4096) -> onnx.ModelProto:
    """y = Relu(table[i]) for a constant table [4, n] and int32 indices i [2]: an index out of
    range fails the iteration in the kernel."""
    table = np.arange(4 * n, dtype=np.float32).reshape(4, n) - 2 * n
    g = helper.make_graph(
        [helper.make_node("Gather", ["t", "i"], ["g"]), helper.make_node("Relu", ["g"], ["y"])],
        "gather",
        [helper.make_tensor_value_info("i", TensorProto.INT32, (2,))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, n))],
        [onnx.numpy_helper.from_array(table, "t")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_requests_run_side_by_side_and_a_failure_completes_each_once():
    """Two compute threads and many queued requests: iterations run two at a time; a failing
    one fails its request (and, as for any failure, the requests queued with it), every request
    completes exactly once, and the runner keeps serving (auto_reset)."""
    model = _gather_model()
    table = onnx.numpy_helper.to_array(model.graph.initializer[0])
    exe = Compiler.compile(model)
    cfg = runtime.RuntimeConfig(num_threads=2, timeout_ns=0, auto_reset=True)
    with runtime.Runner(exe, cfg) as r:
        jobs = []
        for k in range(24):
            idx = np.array([k % 4, 9 if k == 11 else 3], np.int32)
            out = {"y": np.full((2, 4096), -1, np.float32)}
            jobs.append((idx, out, r.execute_async({"i": idx}, out)))
        failed = 0
        for idx, out, fut in jobs:
            try:
                fut.wait()
            except errors.Error as e:
                assert "out of range" in str(e) or "failed" in str(e)
                failed += 1
            else:
                np.testing.assert_array_equal(out["y"], np.maximum(table[idx], 0))
        assert 1 <= failed < len(jobs)
        ok = {"y": np.zeros((2, 4096), np.float32)}
        r.execute({"i": np.array([1, 2], np.int32)}, ok)
        np.testing.assert_array_equal(ok["y"], np.maximum(table[[1, 2]], 0))
        stats = r.stats()
        assert stats["requests_completed"] + stats["requests_failed"] == len(jobs) + 1
