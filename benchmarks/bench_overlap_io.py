"""Overlap I/O: throughput of an I/O-heavy model fed by 3 threads, with and without the
Load/Compute/Store pipeline, side by side in one run.

    pytest benchmarks/bench_overlap_io.py --benchmark-columns=median,ops,rounds

The model moves 2 MiB in and 2 MiB out per batch and computes little (Y = X * 2 + 1 on
[512, 1024] float32), so copies dominate: the case overlap I/O is for.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from models import scale_model

from pyipu import runtime
from pyipu.compiler import Compiler, CompilerOptions

SHAPE = (512, 1024)
CALLERS = 3
REQUESTS_PER_CALLER = 16


def feed(runner: runtime.Runner) -> None:
    def caller() -> None:
        x = np.ones(SHAPE, np.float32)
        y = np.empty(SHAPE, np.float32)
        for _ in range(REQUESTS_PER_CALLER):
            runner.execute({"X": x}, {"Y": y})

    threads = [threading.Thread(target=caller) for _ in range(CALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.benchmark(group="overlap_io")
@pytest.mark.parametrize("threads", [1, 2], ids=["1thread", "2threads"])
@pytest.mark.parametrize("num_io_tiles", [0, "auto"], ids=["serial", "overlap"])
def test_overlap_io_throughput(benchmark, num_io_tiles, threads):
    """`threads` compute threads per runner (fixed so runs compare); overlap adds one I/O
    thread."""
    options = CompilerOptions()
    options.batches_per_step = 4
    options.num_io_tiles = num_io_tiles
    exe = Compiler.compile(scale_model(SHAPE), None, options)
    config = runtime.RuntimeConfig(timeout_ns=0, num_threads=threads)
    with runtime.Runner(exe, config) as runner:
        feed(runner)  # warm-up
        benchmark.pedantic(feed, args=(runner,), rounds=7, iterations=1)
        benchmark.extra_info["requests_per_round"] = CALLERS * REQUESTS_PER_CALLER
        benchmark.extra_info["num_io_tiles"] = exe.program.num_io_tiles
