"""Ctrl-C during `Runner.execute()`: SIGINT sent to the process from a timer thread while a long
inference runs lands as KeyboardInterrupt within a fraction of a second, on the inline path (the
caller's thread runs the request; the runtime's poll hook checks for signals every 20 ms) and on
the device thread (the waiting caller cancels the request); the runner then serves the next
request correctly, and the stats count each request once. Also `Future.cancel()`."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyipu import runtime
from pyipu.compiler import Compiler
from pyipu.errors import CancelledError

pytestmark = pytest.mark.slow  # left out of the quick subset, pytest -m "not slow"

N = 512  # [N, N] float32 activations; one MatMul is ~2.5 ms at 1 thread
K = 1000  # MatMuls in the chain: one inference takes seconds
BOUND_S = 1.0  # generous: a behaviour test, not a benchmark (docs/runtime.md has the figures)


def chain_model(n: int = N, k: int = K) -> onnx.ModelProto:
    """Y = X @ W @ W ... (k MatMuls) with one orthogonal random W, so values stay bounded."""
    rng = np.random.default_rng(0)
    w, _ = np.linalg.qr(rng.standard_normal((n, n)))
    names = ["X"] + [f"h{i}" for i in range(1, k)] + ["Y"]
    nodes = [helper.make_node("MatMul", [names[i], "W"], [names[i + 1]]) for i in range(k)]
    graph = helper.make_graph(
        nodes,
        "matmul_chain",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(w.astype(np.float32), "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def long_exe() -> object:
    return Compiler.compile(chain_model(), None)


def interrupt_after(delay: float) -> list[float]:
    """SIGINT to the main thread after `delay` s; the list gets the time it was sent."""
    sent: list[float] = []
    main = threading.main_thread().ident
    assert main is not None

    def fire() -> None:
        time.sleep(delay)
        sent.append(time.monotonic())
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=fire, daemon=True).start()
    return sent


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="needs the main thread"
)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batches", [1, 2], ids=["inline", "device-thread"])
def test_ctrl_c_lands_during_execute(long_exe: object, threads: int, batches: int) -> None:
    """One batch runs inline on this thread, two go to the device thread."""
    x = np.random.default_rng(1).standard_normal((batches * N, N)).astype(np.float32)
    y_ref, y = np.empty_like(x), np.empty_like(x)
    with runtime.Runner(long_exe, runtime.RuntimeConfig(num_threads=threads)) as runner:
        t0 = time.monotonic()
        runner.execute({"X": x}, {"Y": y_ref})
        full = time.monotonic() - t0
        sent = interrupt_after(0.3)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            runner.execute({"X": x}, {"Y": y})
        latency = time.monotonic() - sent[0]
        assert latency < BOUND_S, f"KeyboardInterrupt {latency:.3f} s after SIGINT"
        assert time.monotonic() - t0 < full / 2  # interrupted mid-run, not after it
        stats = runner.stats()
        assert stats["requests_submitted"] == 2
        assert (stats["requests_completed"], stats["requests_failed"]) == (1, 1)
        runner.execute({"X": x}, {"Y": y})  # the next request: the same answer
        np.testing.assert_array_equal(y, y_ref)
        stats = runner.stats()
        assert stats["requests_submitted"] == 3
        assert (stats["requests_completed"], stats["requests_failed"]) == (2, 1)


@pytest.mark.parametrize("threads", [1, 2])
def test_future_cancel(long_exe: object, threads: int) -> None:
    x = np.random.default_rng(3).standard_normal((N, N)).astype(np.float32)
    y1, y2, y3 = (np.empty_like(x) for _ in range(3))
    with runtime.Runner(long_exe, runtime.RuntimeConfig(num_threads=threads)) as runner:
        running = runner.execute_async({"X": x}, {"Y": y1})
        queued = runner.execute_async({"X": x}, {"Y": y2})
        assert queued.cancel()  # before it starts
        time.sleep(0.2)
        t0 = time.monotonic()
        assert running.cancel()  # while it runs
        with pytest.raises(CancelledError):
            running.wait()
        assert time.monotonic() - t0 < BOUND_S
        with pytest.raises(CancelledError):
            queued.wait()
        assert not queued.cancel()  # completed: nothing to do
        stats = runner.stats()
        assert (stats["requests_completed"], stats["requests_failed"]) == (0, 2)
        done = runner.execute_async({"X": x}, {"Y": y3})
        assert done.wait()
        assert not done.cancel()
        assert np.isfinite(y3).all()
        stats = runner.stats()
        assert stats["requests_submitted"] == 3
        assert (stats["requests_completed"], stats["requests_failed"]) == (1, 2)
