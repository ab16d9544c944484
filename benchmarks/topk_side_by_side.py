"""TopK, pyipu against ONNX Runtime in one process: selections and whole sorts of float32 rows.

    python -P benchmarks/topk_side_by_side.py --threads 1 2

Cases (rows × n, k): sampling from a vocabulary (1 × 32000, k = 50), detection scores
(1 × 8400: the best 300, and all of them sorted, as an argsort exports), a long row (4 × 2^20:
the best 1024, and the whole row sorted). One TopK node on random normal values; the two
engines alternate round by round (IOBinding for ORT). Prints the medians, the throughput ratio
(> 1: pyipu is faster) and whether both return the same indices. A diagnostic
(docs/performance.md, "Other benchmarks"), not a pytest benchmark.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests")]  # python -P does not add HERE

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from side_by_side import (  # noqa: E402
    OrtEngine,
    PyipuEngine,
    compile_model,
    interleaved,
    ort_session,
)

CASES = {
    "vocab_32000_k50": (1, 32000, 50),
    "detect_8400_k300": (1, 8400, 300),
    "detect_8400_sort": (1, 8400, 8400),
    "row_1m_k1024": (4, 1 << 20, 1024),
    "row_1m_sort": (4, 1 << 20, 1 << 20),
}


def topk_model(rows: int, n: int, k: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("TopK", ["X", "K"], ["values", "indices"], axis=1)],
        "topk",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [rows, n])],
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, [rows, k]),
            helper.make_tensor_value_info("indices", TensorProto.INT64, [rows, k]),
        ],
        [numpy_helper.from_array(np.array([k], np.int64), "K")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def case(name: str, threads: int, budget_s: float) -> str:
    rows, n, k = CASES[name]
    m = topk_model(rows, n, k)
    feeds = {"X": np.random.default_rng(0).standard_normal((rows, n)).astype(np.float32)}
    pyipu = PyipuEngine(compile_model(m), feeds, threads)
    ort = OrtEngine(ort_session(m, threads), feeds)
    tp, to = interleaved(pyipu, ort, budget_s)
    same = np.array_equal(pyipu.outputs["indices"], ort.outputs["indices"])
    pyipu.close()
    return (
        f"{name} {threads}T pyipu {tp * 1e3:8.3f} ms ORT {to * 1e3:8.3f} ms "
        f"ratio {to / tp:.2f} same indices {same}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*", help=f"default: all of {', '.join(CASES)}")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--seconds", type=float, default=1.5, help="time budget per case")
    args = ap.parse_args()
    if unknown := set(args.cases) - set(CASES):
        ap.error(f"unknown case(s) {sorted(unknown)}; choose from {', '.join(CASES)}")
    print("load average", os.getloadavg(), flush=True)
    for name in args.cases or CASES:
        for t in args.threads:
            print(case(name, t, args.seconds), flush=True)
    print("load average", os.getloadavg())


if __name__ == "__main__":
    main()
