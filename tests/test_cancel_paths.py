"""Cancelling on every execution path: inside one long instruction (1 and 2 threads, inline and
on the device thread), with dynamic batching, overlap I/O and a stage pipeline (sharded model).
Ctrl-C and `Future.cancel()` stop a running request within a fraction of a second, and every
accepted request completes exactly once (cancelled: CancelledError; the stats count it once)."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_interrupt import interrupt_after

from pyipu import runtime
from pyipu.compiler import Compiler, CompilerOptions
from pyipu.compiler.staging import IPU_ATTR, STAGE_ATTR
from pyipu.errors import CancelledError

BIG = 3072  # one [BIG, BIG] MatMul: ~0.7 s at 1 thread on an idle core
N, K = 256, 600  # the chain: K MatMuls of [N, N] (~0.25 s per batch at 1 thread)
BOUND_S = 0.4  # generous against the 0.2 s target: the machine is shared (figures in the docs)


def weight(n: int) -> np.ndarray:
    return (np.random.default_rng(0).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)


def orthogonal() -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(0).standard_normal((N, N)))[0]


def matmul(n: int) -> onnx.ModelProto:
    w = weight(n)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "one_matmul",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(w, "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def chain(stages: int = 0) -> onnx.ModelProto:
    """Y = X @ W ... @ W (K MatMuls, orthogonal W); stages > 0: node i on IPU/stage i*stages//K."""
    w = orthogonal()
    names = ["X"] + [f"h{i}" for i in range(1, K)] + ["Y"]
    nodes = []
    for i in range(K):
        node = helper.make_node("MatMul", [names[i], "W"], [names[i + 1]], name=f"mm{i}")
        if stages:
            s = i * stages // K
            node.attribute.extend(
                [helper.make_attribute(IPU_ATTR, s), helper.make_attribute(STAGE_ATTR, s)]
            )
        nodes.append(node)
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [N, N])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [N, N])],
        [numpy_helper.from_array(w.astype(np.float32), "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def big_exe() -> object:
    return Compiler.compile(matmul(BIG), None)


def compile_path(path: str) -> object:
    o = CompilerOptions()
    if path == "overlap-io":
        o.num_io_tiles = 8
    if path == "pipelined":
        o.virtual_graph_mode, o.num_ipus, o.enable_pipelining = "manual", 2, True
        o.batches_per_step = 2
        return Compiler.compile(chain(stages=2), None, o)
    return Compiler.compile(chain(), None, o)


@pytest.fixture(scope="module", params=["batching", "overlap-io", "pipelined"])
def path_exe(request: pytest.FixtureRequest) -> tuple[str, object]:
    return request.param, compile_path(request.param)


def config(path: str, threads: int) -> runtime.RuntimeConfig:
    cfg = runtime.RuntimeConfig(num_threads=threads)
    if path == "batching":
        cfg.batching_dim = 0
    return cfg


def interrupt_latency(runner: runtime.Runner, x: np.ndarray, y: np.ndarray) -> float:
    """Seconds from a SIGINT sent 0.15 s into `execute` to its KeyboardInterrupt."""
    sent = interrupt_after(0.15)
    with pytest.raises(KeyboardInterrupt):
        runner.execute({"X": x}, {"Y": y})
    return time.monotonic() - sent[0]


def cancel_latency(runner: runtime.Runner, x: np.ndarray, y: np.ndarray) -> float:
    """Seconds from `Future.cancel()`, 0.15 s into `execute_async`, to its CancelledError."""
    running = runner.execute_async({"X": x}, {"Y": y})
    time.sleep(0.15)
    t0 = time.monotonic()
    assert running.cancel()
    with pytest.raises(CancelledError):
        running.wait()
    return time.monotonic() - t0


def check_counts(runner: runtime.Runner, ok: int, failed: int) -> None:
    stats = runner.stats()
    assert stats["requests_submitted"] == ok + failed
    assert (stats["requests_completed"], stats["requests_failed"]) == (ok, failed)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batches", [1, 2], ids=["inline", "device-thread"])
def test_ctrl_c_lands_inside_one_long_instruction(big_exe: object, threads: int, batches: int):
    """The whole inference is one MatMul: the runtime stops between pieces of its work."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batches * BIG, BIG)).astype(np.float32)
    y = np.empty_like(x)
    with runtime.Runner(big_exe, runtime.RuntimeConfig(num_threads=threads)) as runner:
        latency = interrupt_latency(runner, x, y)
        assert latency < BOUND_S, f"KeyboardInterrupt {latency:.3f} s after SIGINT"
        check_counts(runner, 0, 1)
        # The next request runs whole, on the device thread even after an inline cancel.
        x2 = np.concatenate([x[:BIG], x[:BIG]])
        y2 = np.empty_like(x2)
        runner.execute({"X": x2}, {"Y": y2})
        np.testing.assert_allclose(y2[:BIG], x[:BIG] @ weight(BIG), rtol=2e-3, atol=2e-3)
        np.testing.assert_array_equal(y2[BIG:], y2[:BIG])
        check_counts(runner, 1, 1)


@pytest.mark.parametrize("threads", [1, 2])
def test_future_cancel_stops_a_running_request(path_exe: tuple[str, object], threads: int):
    path, exe = path_exe
    x = np.random.default_rng(3).standard_normal((2 * N, N)).astype(np.float32)
    y1, y2 = np.empty_like(x), np.empty_like(x)
    with runtime.Runner(exe, config(path, threads)) as runner:
        latency = cancel_latency(runner, x, y1)
        assert latency < BOUND_S, f"{path}: cancelled {latency:.3f} s after cancel()"
        check_counts(runner, 0, 1)
        assert runner.execute_async({"X": x}, {"Y": y2}).wait()  # the runner still serves
        check_counts(runner, 1, 1)
        if path == "pipelined":
            assert runner.stats()["pipeline_ticks"] > 0


def test_ctrl_c_lands_on_every_path(path_exe: tuple[str, object]):
    path, exe = path_exe
    x = np.random.default_rng(4).standard_normal((2 * N, N)).astype(np.float32)
    y = np.empty_like(x)
    with runtime.Runner(exe, config(path, 1)) as runner:
        latency = interrupt_latency(runner, x, y)
        assert latency < BOUND_S, f"{path}: KeyboardInterrupt {latency:.3f} s after SIGINT"
        check_counts(runner, 0, 1)


def test_batching_cancels_an_iteration_only_when_all_its_requests_are_cancelled():
    """Two requests share each iteration's rows: cancelling one leaves the other's rows (and so
    the iteration) running, and both complete once; cancelling both stops it."""
    exe = compile_path("batching")
    h = N // 2
    xs = [np.random.default_rng(s).standard_normal((h, N)).astype(np.float32) for s in (5, 6)]
    ys = [np.empty_like(x) for x in xs]
    cfg = runtime.RuntimeConfig(num_threads=1, batching_dim=0, timeout_ns=1_000_000_000)
    with runtime.Runner(exe, cfg) as runner:
        a, b = (runner.execute_async({"X": x}, {"Y": y}) for x, y in zip(xs, ys, strict=True))
        time.sleep(0.1)
        a.cancel()
        assert a.wait() and b.wait()  # one iteration carried both: it ran to its end
        check_counts(runner, 2, 0)
        w_k = np.linalg.matrix_power(orthogonal(), K)
        for x, y in zip(xs, ys, strict=True):
            np.testing.assert_allclose(y, x @ w_k, atol=2e-3)
        a, b = (runner.execute_async({"X": x}, {"Y": y}) for x, y in zip(xs, ys, strict=True))
        time.sleep(0.1)
        t0 = time.monotonic()
        a.cancel(), b.cancel()
        for f in (a, b):
            with pytest.raises(CancelledError):
                f.wait()
        assert time.monotonic() - t0 < BOUND_S
        check_counts(runner, 2, 2)


# LogSoftmax over it in float16 (the per-element path; float32 rows take the vectorised one,
# ~0.1 s): ~1.2 s at 1 thread, in one work item
ROW = 1 << 25


def one_long_row(op: str, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """`op` over one row of ROW values: the whole inference is one work item of one kernel."""
    graph = helper.make_graph(
        [helper.make_node(op, ["X"], ["Y"], axis=1)],
        "one_row",
        [helper.make_tensor_value_info("X", dtype, [1, ROW])],
        [helper.make_tensor_value_info("Y", dtype, [1, ROW])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("how", ["ctrl-c", "cancel"])
def test_cancel_lands_inside_one_long_row(threads: int, how: str):
    """A row of millions of elements is a single work item: its kernel asks the runtime between
    chunks of the row (docs/runtime.md, "Cancelling and Ctrl-C")."""
    exe = Compiler.compile(one_long_row("LogSoftmax", TensorProto.FLOAT16), None)
    x = np.random.default_rng(7).standard_normal((1, ROW), dtype=np.float32).astype(np.float16)
    y = np.empty_like(x)
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=threads)) as runner:
        # Ctrl-C: one batch runs inline, the poll hook called from inside the kernel; cancel:
        # on the device thread, the request's cancel flag seen from inside the kernel
        latency = (interrupt_latency if how == "ctrl-c" else cancel_latency)(runner, x, y)
        assert latency < BOUND_S, f"{how}: stopped {latency:.3f} s after the request to stop"
        check_counts(runner, 0, 1)
        runner.execute({"X": x}, {"Y": y})  # the next request runs whole
        x64 = x.astype(np.float64)
        m = float(x64.max())
        log_sum = m + np.log(np.exp(x64 - m).sum())
        np.testing.assert_allclose(y.astype(np.float64), x64 - log_sum, rtol=1e-3, atol=1e-3)
