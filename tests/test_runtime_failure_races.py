"""A failing iteration while other iterations are in flight: every request completes exactly
once and the runner keeps serving. Each scenario runs in a child process pinned to one CPU, where
the submitter is often descheduled between queueing a request's inputs and its outputs: the
window in which a failure refuses the rest of the request while the device has already taken its
inputs (concurrent iterations, overlap I/O, the stage pipeline). Before the runtime's abort flag
reached the device, the device then waited forever for the refused output slots."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import subprocess_env
from onnx import TensorProto, helper

from pyipu import errors, runtime
from pyipu.compiler import Compiler, CompilerOptions
from pyipu.compiler.sharding import manual_sharding

HERE = Path(__file__).resolve().parent
N = 1024
REQUESTS = 24
BAD = 10  # the request whose index is out of range: not the last of its step
ROUNDS = 40
CHILD_LIMIT_S = 30  # the child dumps its threads' stacks and exits past this


def _model(sharded: bool) -> onnx.ModelProto:
    """y = Gather(Relu(t), i) + b for a constant table t [4, N], indices i [2], b [2, N]: an
    index out of range fails the iteration. Sharded: Relu on IPU 0, the rest on IPU 1."""
    table = (np.arange(4 * N, dtype=np.float32).reshape(4, N) - 2 * N) / N
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["t"], ["r"], name="relu"),
            helper.make_node("Gather", ["r", "i"], ["g"], name="gather", axis=0),
            helper.make_node("Add", ["g", "b"], ["y"], name="add"),
        ],
        "gather_add",
        [
            helper.make_tensor_value_info("i", TensorProto.INT32, (2,)),
            helper.make_tensor_value_info("b", f, (2, N)),
        ],
        [helper.make_tensor_value_info("y", f, (2, N))],
        [onnx.numpy_helper.from_array(table, "t")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return manual_sharding(model, {"relu": 0}, {"relu": 0}) if sharded else model


def _setup(scenario: str) -> tuple[onnx.ModelProto, CompilerOptions, runtime.RuntimeConfig]:
    options = CompilerOptions()
    if scenario == "concurrent":  # two iterations at once, each on one worker
        threads = 2
    elif scenario == "overlap_io":  # the I/O thread loads and stores around the compute
        options.batches_per_step = 2
        options.num_io_tiles = 16
        threads = 1
    elif scenario == "stages":  # a two-stage pipeline holds two batches in flight
        options.virtual_graph_mode = "manual"
        options.num_ipus = 2
        options.enable_pipelining = True
        options.batches_per_step = 2
        threads = 2
    else:
        raise ValueError(scenario)
    # Rings of batches_per_step slots: fewer than the iterations in flight, so a submitter
    # often waits for output space after queueing a request's inputs.
    config = runtime.RuntimeConfig(
        num_threads=threads, timeout_ns=0, auto_reset=True, ring_buffer_size_multiplier=1
    )
    return _model(scenario == "stages"), options, config


def hammer(scenario: str, rounds: int) -> None:
    """Child process: `rounds` runners, each given REQUESTS requests of which one fails."""
    import faulthandler

    faulthandler.dump_traceback_later(CHILD_LIMIT_S, exit=True)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    model, options, config = _setup(scenario)
    exe = Compiler.compile(model, None, options)
    relu = np.maximum(onnx.numpy_helper.to_array(model.graph.initializer[0]), 0)
    for _ in range(rounds):
        with runtime.Runner(exe, config) as r:
            jobs = []
            for k in range(REQUESTS):
                idx = np.array([k % 4, 9 if k == BAD else 3], np.int32)
                b = np.full((2, N), k, np.float32)
                out = {"y": np.full((2, N), -1, np.float32)}
                jobs.append((idx, b, out, r.execute_async({"i": idx, "b": b}, out)))
            failed = 0
            for k, (idx, b, out, fut) in enumerate(jobs):
                try:
                    fut.wait()
                except errors.Error as e:
                    # every failed request names the cause, also one whose iteration was
                    # abandoned waiting for an output slot the failure refused
                    assert "out of range" in str(e), str(e)
                    failed += 1
                else:
                    assert k != BAD
                    np.testing.assert_array_equal(out["y"], relu[idx] + b)
            assert 1 <= failed < REQUESTS
            ok = {"y": np.zeros((2, N), np.float32)}
            r.execute({"i": np.array([1, 2], np.int32), "b": np.zeros((2, N), np.float32)}, ok)
            np.testing.assert_array_equal(ok["y"], relu[[1, 2]])
            stats = r.stats()
            assert stats["requests_completed"] + stats["requests_failed"] == REQUESTS + 1
    faulthandler.cancel_dump_traceback_later()


@pytest.mark.parametrize("scenario", ["concurrent", "overlap_io", "stages"])
def test_failure_with_iterations_in_flight_on_one_cpu(scenario: str) -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); "
        f"import test_runtime_failure_races as t; t.hammer({scenario!r}, {ROUNDS})"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-P", "-c", code],
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=CHILD_LIMIT_S + 60,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{scenario}: the child hung past its own limit\n{e.stderr}")
    assert proc.returncode == 0, f"{scenario}: exit {proc.returncode}\n{proc.stderr[-4000:]}"
