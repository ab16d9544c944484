"""Engines the side-by-side benchmarks time: pyipu's Runner and ONNX Runtime, set up alike.

pyipu: `Runner(exe, RuntimeConfig(num_threads=T))`, `execute()` into preallocated outputs.
ONNX Runtime: `intra_op_num_threads=T`, `inter_op_num_threads=1`, sequential execution, and
IOBinding with the same preallocated arrays (its fastest call path; `run()` is timed too for
the tiny models). Both compile or load once; only the calls are timed.

Every benchmark interleaves the two: pytest-benchmark's untimed `setup` runs the other engine
before each timed round, so both see the same caches and the same neighbours on the machine.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from models import ORT_IR_VERSION

from pyipu import runtime
from pyipu.compiler import Compiler, CompilerOptions

# VGG19 does not fit the IPU Model's tile memory at the default available_memory_proportion;
# the CPU runs it anyway, so every benchmark model compiles with out-of-memory allowed.
ENGINE_OPTIONS = {"debug.allowOutOfMemory": "true"}
ROUND_SECONDS = 0.004  # tiny models: calls per round so that a round lasts about this long
MAX_CALLS_PER_ROUND = 2000
# After the untimed round of the other engine, wait until the process is idle: both runtimes'
# workers spin for a while after a call before they sleep (ORT's 2-thread pool used ~40 ms of
# CPU in the 300 ms after a seed-model run here), and on a 2-core machine a spinning pool takes
# a core from the engine timed next.
SETTLE_WINDOW = 0.005  # seconds; idle = less than a tenth of a core used over one window
SETTLE_MAX = 1.0


def compile_model(model: onnx.ModelProto) -> Any:
    return Compiler.compile(model, None, CompilerOptions(engine_options=ENGINE_OPTIONS))


def ort_session(model: onnx.ModelProto | str, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if isinstance(model, onnx.ModelProto):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.ir_version = min(m.ir_version, ORT_IR_VERSION)
        model = m.SerializeToString()
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


class PyipuEngine:
    def __init__(self, exe: Any, feeds: dict[str, np.ndarray], threads: int) -> None:
        self.runner = runtime.Runner(exe, runtime.RuntimeConfig(timeout_ns=0, num_threads=threads))
        self.inputs = feeds
        self.outputs = {
            d.name: np.zeros(d.shape, d.numpy_data_type())
            for d in self.runner.get_execute_outputs()
        }

    def __call__(self) -> None:
        self.runner.execute(self.inputs, self.outputs)

    def result(self) -> np.ndarray:
        return next(iter(self.outputs.values()))

    def close(self) -> None:
        self.runner.close()


class OrtEngine:
    """IOBinding: inputs and outputs bound once to the same kind of numpy buffers."""

    def __init__(self, session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> None:
        self.session = session
        self.inputs = feeds
        names = [o.name for o in session.get_outputs()]
        first = session.run(names, feeds)  # output shapes as ORT produces them
        self.outputs = {n: np.zeros_like(a) for n, a in zip(names, first, strict=True)}
        self.binding = session.io_binding()
        for name, a in feeds.items():
            self.binding.bind_input(name, "cpu", 0, a.dtype, a.shape, a.ctypes.data)
        for name, a in self.outputs.items():
            self.binding.bind_output(name, "cpu", 0, a.dtype, a.shape, a.ctypes.data)

    def __call__(self) -> None:
        self.session.run_with_iobinding(self.binding)

    def result(self) -> np.ndarray:
        return next(iter(self.outputs.values()))

    def close(self) -> None:
        pass


class OrtRunEngine:
    """ORT's plain `run(names, feeds)` (allocates outputs every call)."""

    def __init__(self, session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> None:
        self.session = session
        self.inputs = feeds
        self.names = [o.name for o in session.get_outputs()]
        self.last: list[np.ndarray] = session.run(self.names, feeds)

    def __call__(self) -> None:
        self.last = self.session.run(self.names, self.inputs)

    def result(self) -> np.ndarray:
        return self.last[0]

    def close(self) -> None:
        pass


COUNT_SUFFIX = ":count"  # pyipu.compiler.lower: the extent of a data-dependent output dim


def valid_outputs(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """pyipu's outputs as ORT gives them: an output whose leading dim depends on the data
    (the detectors' boxes, scores, labels) cut to the extent its `<name>:count` output holds."""
    out = {}
    for name, v in outputs.items():
        if name.endswith(COUNT_SUFFIX):
            continue
        count = outputs.get(name + COUNT_SUFFIX)
        out[name] = v if count is None else v[: int(count.reshape(-1)[0])]
    return out


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want|, on the flattened arrays (ORT may keep unit dims)."""
    g = got.astype(np.float64).ravel()
    w = want.astype(np.float64).ravel()
    if g.shape != w.shape:
        raise AssertionError(f"output sizes differ: {g.shape} vs {w.shape}")
    return float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30))


def seconds_per_call(fn: Callable[[], None], calls: int = 2) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def plan_rounds(slowest_call_s: float, budget_s: float, quick: bool) -> tuple[int, int]:
    """(rounds, calls per round) so each engine's timing lasts about `budget_s`."""
    calls = 1
    if slowest_call_s < ROUND_SECONDS:
        calls = int(min(MAX_CALLS_PER_ROUND, max(1, ROUND_SECONDS // max(slowest_call_s, 1e-7))))
    if quick:
        return 2, min(calls, 10)
    rounds = int(budget_s // (slowest_call_s * calls))
    return max(5, min(rounds, 200)), calls


def wait_until_idle() -> None:
    """Sleep in short windows until this process's threads stop using CPU (at most SETTLE_MAX)."""
    deadline = time.perf_counter() + SETTLE_MAX
    while time.perf_counter() < deadline:
        c0 = time.process_time()
        time.sleep(SETTLE_WINDOW)
        if time.process_time() - c0 < SETTLE_WINDOW / 10:
            return


def settled(fn: Callable[[], None]) -> Callable[[], None]:
    """`fn`, then wait until its thread pool has stopped spinning."""

    def run_then_settle() -> None:
        fn()
        wait_until_idle()

    return run_then_settle


def looped(fn: Callable[[], None], calls: int) -> Callable[[], None]:
    if calls == 1:
        return fn

    def loop() -> None:
        for _ in range(calls):
            fn()

    return loop


def interleaved(
    a: Callable[[], None], b: Callable[[], None], budget_s: float
) -> tuple[float, float]:
    """Median seconds per call of a and of b, alternating rounds of about 4 ms or one call,
    each round after the other engine's thread pool has stopped spinning (wait_until_idle)."""
    a()
    b()
    t0 = time.perf_counter()
    a()
    b()
    pair = time.perf_counter() - t0
    calls = max(1, int(0.004 // max(pair / 2, 1e-7)))
    rounds = max(5, int(budget_s / (pair * calls + 2 * SETTLE_WINDOW)))
    ta, tb = [], []
    for _ in range(rounds):
        for fn, out in ((a, ta), (b, tb)):
            wait_until_idle()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - t0) / calls)
    return statistics.median(ta), statistics.median(tb)
