"""MatMul/Gemm-bound cases, pyipu against numpy/OpenBLAS or ONNX Runtime, in one process.

    python -P benchmarks/gemm_side_by_side.py sgemm_256 sgemm_1024 mlp bert_encoder_layer \
        bvlc_alexnet --threads 1 2

`sgemm_N`: a one-node MatMul of two [N, N] float32 inputs against `np.matmul(a, b, out=c)` with
OpenBLAS limited to the same thread count (threadpoolctl); any other name is a model of
benchmarks/zoo.py against ORT (IOBinding). The two engines alternate round by round; prints the
medians and the throughput ratio (> 1: pyipu is faster) and the load average before and after.
A quick diagnostic (docs/performance.md, "Other benchmarks"), not a pytest benchmark:
`tools/perf_table.py --run` gives the tables.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests")]  # python -P does not add HERE

import numpy as np  # noqa: E402
import threadpoolctl  # noqa: E402
from models import matmul_model  # noqa: E402
from side_by_side import (  # noqa: E402
    OrtEngine,
    PyipuEngine,
    compile_model,
    interleaved,
    ort_session,
    relative_error,
)
from zoo import MODELS  # noqa: E402


def sgemm(n: int, threads: int, budget_s: float) -> str:
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal((n, n)).astype(np.float32) for k in ("A", "B")}
    pyipu = PyipuEngine(compile_model(matmul_model(n)), feeds, threads)
    c = np.empty((n, n), np.float32)
    with threadpoolctl.threadpool_limits(threads):
        tp, tn = interleaved(pyipu, lambda: np.matmul(feeds["A"], feeds["B"], out=c), budget_s)
    err = relative_error(pyipu.result(), feeds["A"].astype(np.float64) @ feeds["B"])
    pyipu.close()
    gf = 2 * n**3 / 1e9
    return (
        f"sgemm_{n} {threads}T pyipu {gf / tp:6.1f} GF/s numpy {gf / tn:6.1f} GF/s "
        f"ratio {tn / tp:.2f} err {err:.1e}"
    )


def model(name: str, threads: int, budget_s: float) -> str:
    build, feeds_of = MODELS[name]
    m = build()
    feeds = feeds_of(m)
    pyipu = PyipuEngine(compile_model(m), feeds, threads)
    ort = OrtEngine(ort_session(m, threads), feeds)
    tp, to = interleaved(pyipu, ort, budget_s)
    err = relative_error(pyipu.result(), ort.result())
    pyipu.close()
    return (
        f"{name} {threads}T pyipu {tp * 1e3:8.2f} ms ORT {to * 1e3:8.2f} ms "
        f"ratio {to / tp:.2f} err {err:.1e}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="+", help="sgemm_N or a model of benchmarks/zoo.py")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seconds", type=float, default=1.5, help="time budget per case")
    args = ap.parse_args()
    print("load average", os.getloadavg(), flush=True)
    for case in args.cases:
        for t in args.threads:
            if case.startswith("sgemm_"):
                print(sgemm(int(case.split("_")[1]), t, args.seconds), flush=True)
            else:
                print(model(case, t, args.seconds), flush=True)
    print("load average", os.getloadavg())


if __name__ == "__main__":
    main()
