"""sgemm: pyipu's MatMul against numpy/OpenBLAS at n = 64 ... 2048, 1 and 2 threads, interleaved.

    pytest benchmarks/bench_gemm.py --benchmark-json=gemm.json

pyipu runs a one-node model C = A @ B ([n, n] float32 inputs). At 1 thread the request runs
inline on the caller's arrays (docs/runtime.md, "arrays used in place"); at 2 threads, except
for the smallest n, it is queued and copies A and B in and C out (12 n^2 bytes, 3 % of the time
at n = 256 and less above). numpy computes
`np.matmul(a, b, out=c)` with OpenBLAS limited to the same thread count (threadpoolctl).
"""

from __future__ import annotations

import numpy as np
import pytest
from models import matmul_model
from side_by_side import (
    PyipuEngine,
    compile_model,
    looped,
    plan_rounds,
    seconds_per_call,
    settled,
)

threadpoolctl = pytest.importorskip("threadpoolctl")

SIZES = (64, 128, 256, 512, 1024, 2048)
THREADS = (1, 2)
BUDGET_S = 1.0
CASES = [(n, t, e) for n in SIZES for t in THREADS for e in ("pyipu", "numpy")]


class NumpyGemm:
    def __init__(self, feeds: dict[str, np.ndarray]) -> None:
        self.a, self.b = feeds["A"], feeds["B"]
        self.c = np.empty_like(self.a)

    def __call__(self) -> None:
        np.matmul(self.a, self.b, out=self.c)


@pytest.fixture(scope="module")
def controller():
    return threadpoolctl.ThreadpoolController()


_engines: dict[tuple[int, int], dict] = {}


def _pair(n: int, threads: int, quick: bool) -> dict:
    if (n, threads) not in _engines:
        for old in _engines.values():
            old["pyipu"].close()
        _engines.clear()
        rng = np.random.default_rng(0)
        feeds = {k: rng.standard_normal((n, n)).astype(np.float32) for k in ("A", "B")}
        pyipu = PyipuEngine(compile_model(matmul_model(n)), feeds, threads)
        numpy = NumpyGemm(feeds)
        slowest = max(seconds_per_call(pyipu), seconds_per_call(numpy))
        rounds, calls = plan_rounds(slowest, BUDGET_S, quick)
        want = feeds["A"].astype(np.float64) @ feeds["B"].astype(np.float64)
        err = float(np.max(np.abs(pyipu.result() - want)) / np.max(np.abs(want)))
        _engines[(n, threads)] = {
            "pyipu": pyipu,
            "numpy": numpy,
            "rounds": rounds,
            "calls": calls,
            "rel_error": err,
        }
    return _engines[(n, threads)]


@pytest.mark.parametrize(
    ("n", "threads", "engine"), CASES, ids=[f"{n}-{t}T-{e}" for n, t, e in CASES]
)
def test_sgemm(benchmark, controller, quick, n, threads, engine):
    pair = _pair(n, threads, quick)
    other = pair["numpy" if engine == "pyipu" else "pyipu"]
    benchmark.group = f"sgemm-{n}-{threads}T"
    benchmark.extra_info.update(
        model=f"sgemm_{n}",
        n=n,
        threads=threads,
        engine=engine,
        calls_per_round=pair["calls"],
        gflop=2 * n**3 / 1e9,
        rel_error_vs_fp64=pair["rel_error"],
    )
    with controller.limit(limits=threads, user_api="blas"):
        benchmark.pedantic(
            looped(pair[engine], pair["calls"]),
            setup=settled(looped(other, pair["calls"])),
            rounds=pair["rounds"],
        )
    assert pair["rel_error"] < 1e-4
