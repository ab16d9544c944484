"""Runner tracepoints (RuntimeConfig.record_tracepoints, request_tracepoints_buffer_size): one
timed load / compute / store event per iteration, a bounded buffer, CLOCK_MONOTONIC times."""

from __future__ import annotations

import gc
import os
import time

import numpy as np
import onnx
import pytest
from models import matmul_model
from onnx import TensorProto, helper

from pyipu import errors
from pyipu.compiler import Compiler, CompilerOptions
from pyipu.runtime import Runner, RuntimeConfig


def add_model() -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 8))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 8))],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def compile_add(bps: int = 1, io_tiles: int = 0, replicas: int = 1):
    opts = CompilerOptions()
    opts.batches_per_step = bps
    opts.num_io_tiles = io_tiles
    opts.replication_factor = replicas
    return Compiler.compile(add_model(), None, opts)


def run_requests(runner: Runner, n: int) -> None:
    x = np.ones((4, 8), np.float32)
    outs = [np.zeros((4, 8), np.float32) for _ in range(n)]
    futures = [runner.execute_async({"x": x}, {"y": o}) for o in outs]
    for f in futures:
        f.wait()
    for o in outs:
        np.testing.assert_array_equal(o, 2 * x)


@pytest.mark.parametrize(("bps", "io_tiles"), [(1, 0), (4, 0), (4, 16)])
def test_one_event_per_stage_and_iteration(bps: int, io_tiles: int) -> None:
    before = time.monotonic_ns()
    config = RuntimeConfig(record_tracepoints=True, timeout_ns=0, num_threads=2)
    runner = Runner(compile_add(bps, io_tiles), config)
    run_requests(runner, 12)
    runner.close()  # every stage has ended: the trace is complete
    after = time.monotonic_ns()
    tp = runner.tracepoints()
    iterations = runner._runtimes[0].stats()["iterations"]
    assert iterations == 12
    assert len(tp) == 3 * iterations and tp.dropped == 0
    names = tp.kind_names()
    assert names.count("load") == names.count("compute") == names.count("store") == 12
    ev = tp.events
    assert (ev["start_ns"] <= ev["end_ns"]).all()
    assert ev["start_ns"].min() >= before and ev["end_ns"].max() <= after  # time.monotonic_ns
    assert (np.diff(ev["start_ns"].astype(np.int64)) >= 0).all()  # sorted by start
    assert sorted(ev["seq"].tolist()) == list(range(len(ev)))
    assert (ev["replica"] == 0).all() and (ev["subgraph"] == 0).all()
    assert len(tp.of_kind("compute")) == 12


def test_replicas_each_record_their_own_events() -> None:
    config = RuntimeConfig(record_tracepoints=True, num_threads=2)
    with Runner(compile_add(replicas=2), config) as runner:
        run_requests(runner, 6)  # round-robin: 3 per replica
    tp = runner.tracepoints()
    assert len(tp) == 18 and tp.dropped == 0
    for replica in (0, 1):
        mine = tp.events[tp.events["replica"] == replica]
        assert len(mine) == 9 and sorted(mine["seq"].tolist()) == list(range(9))


def test_bounded_buffer_keeps_the_latest_events() -> None:
    config = RuntimeConfig(record_tracepoints=True, request_tracepoints_buffer_size=5)
    with Runner(compile_add(), config) as runner:
        run_requests(runner, 4)
    tp = runner.tracepoints()
    assert len(tp) == 5 and tp.dropped == 3 * 4 - 5
    assert sorted(tp.events["seq"].tolist()) == [7, 8, 9, 10, 11]


def test_not_recorded_unless_asked() -> None:
    with Runner(compile_add()) as runner:
        run_requests(runner, 1)
        with pytest.raises(errors.InvalidArgumentError, match="record_tracepoints"):
            runner.tracepoints()


def test_unbounded_buffer_is_refused() -> None:
    config = RuntimeConfig(record_tracepoints=True, request_tracepoints_buffer_size=0)
    with pytest.raises(errors.UnsupportedError, match="unbounded"):
        Runner(compile_add(), config)
    with pytest.raises(errors.InvalidArgumentError):
        RuntimeConfig(record_tracepoints="yes")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
@pytest.mark.parametrize(("threads", "queued"), [(1, False), (2, False), (2, True)])
def test_execute_is_traced_inline_or_on_the_device(threads: int, queued: bool) -> None:
    """A 256x256 MatMul (768 KiB of operands): `execute` runs it on the caller's thread
    (docs/runtime.md, inline execution: no device thread starts; at two threads unpinned, as a
    pinned helper's CPU would send it to the device), `execute_async` on the device thread;
    both record one load, compute and store per request, in that order."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    config = RuntimeConfig(record_tracepoints=True, timeout_ns=0, num_threads=threads)
    config.pin_threads = False
    exe = Compiler.compile(matmul_model(256), None)
    expected = 1 if queued else 0  # the device thread
    # The process's thread count also moves when another library's background thread (Ray's,
    # gRPC's from earlier tests) starts or ends meanwhile: a fresh runner up to three times.
    for _ in range(3):
        gc.collect()  # earlier runners close (and join their threads) now, not meanwhile
        gc.disable()
        try:
            with Runner(exe, config) as runner:
                before = len(os.listdir("/proc/self/task"))
                for _ in range(4):
                    c = np.zeros((256, 256), np.float32)
                    if queued:
                        runner.execute_async({"A": a, "B": b}, {"C": c}).wait()
                    else:
                        runner.execute({"A": a, "B": b}, {"C": c})
                    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
                started = len(os.listdir("/proc/self/task")) - before
        finally:
            gc.enable()
        if started == expected:
            break
    assert started == expected
    tp = runner.tracepoints()
    assert tp.kind_names() == ["load", "compute", "store"] * 4 and tp.dropped == 0
    ev = tp.events
    assert (ev["end_ns"][:-1] <= ev["start_ns"][1:]).all()  # one request after the other
