"""Per-request overhead on a tiny model: pyipu `Runner.execute()` against ONNX Runtime `run()`
and `run_with_iobinding()` (inputs and output pre-bound), same model, same process, 1 thread.

    pytest benchmarks/bench_small_request.py --benchmark-columns=median,ops,rounds -s

The model is the fusion seed model 0 (Add + Reshape, X and Y float32 [1, 2] -> O [2]); every
call passes numpy arrays. `test_small_request` times each call path on its own (pytest-benchmark
statistics); `test_small_request_interleaved` alternates the three paths in blocks of single
calls, prints the median latency of each and the ratios (stored in extra_info), which is the
comparison to quote on a shared machine.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import pytest
from models import ORT_IR_VERSION, fusion_model0

from pyipu import runtime
from pyipu.compiler import Compiler

BLOCK = 2000  # calls per path per round of the interleaved comparison
ROUNDS = 10


@pytest.fixture(scope="module")
def calls() -> dict[str, Callable[[], object]]:
    model = fusion_model0()
    x = np.array([[1, 2]], np.float32)
    y = np.array([[3, 4]], np.float32)
    out = np.empty(2, np.float32)
    inputs, outputs = {"X": x, "Y": y}, {"O": out}
    runner = runtime.Runner(Compiler.compile(model, None), runtime.RuntimeConfig(num_threads=1))

    model.ir_version = ORT_IR_VERSION
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    binding = session.io_binding()
    binding.bind_cpu_input("X", x)
    binding.bind_cpu_input("Y", y)
    binding.bind_output("O", "cpu")

    paths = {
        "pyipu_execute": lambda: runner.execute(inputs, outputs),
        "ort_run": lambda: session.run(None, inputs),
        "ort_iobinding": lambda: session.run_with_iobinding(binding),
    }
    for f in paths.values():  # warm-up, and the same answer everywhere
        f()
    np.testing.assert_array_equal(out, [4, 6])
    np.testing.assert_array_equal(session.run(None, inputs)[0], [4, 6])
    yield paths
    runner.close()


@pytest.mark.benchmark(group="small_request")
@pytest.mark.parametrize("path", ["pyipu_execute", "ort_run", "ort_iobinding"])
def test_small_request(benchmark, calls, path):
    benchmark(calls[path])


def _loadavg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


@pytest.mark.benchmark(group="small_request_interleaved")
def test_small_request_interleaved(benchmark, calls):
    samples: dict[str, list[int]] = {name: [] for name in calls}
    clock = time.perf_counter_ns

    def one_round() -> None:
        for name, f in calls.items():
            times = samples[name]
            for _ in range(BLOCK):
                t0 = clock()
                f()
                times.append(clock() - t0)

    load_before = _loadavg()
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    medians = {name: statistics.median(t) / 1000 for name, t in samples.items()}
    ours = medians["pyipu_execute"]
    ratios = {f"{name}/pyipu_execute": m / ours for name, m in medians.items() if m != ours}
    benchmark.extra_info.update(
        {f"median_us_{k}": round(v, 3) for k, v in medians.items()}
        | {k: round(v, 2) for k, v in ratios.items()}
        | {"loadavg_before": load_before, "loadavg_after": _loadavg()}
    )
    print()
    for name, m in medians.items():
        print(f"  {name:15s} median {m:7.3f} us  ({len(samples[name])} single calls)")
    for name, r in ratios.items():
        print(f"  {name:29s} {r:5.1f}x")
    print(f"  load average before {load_before}, after {_loadavg()}")
