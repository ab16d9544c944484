"""float16 executables side by side: pyipu on the model converted to float16 (`--precision
fp16`'s conversion, pyipu.compiler.precision.convert_to_fp16) against pyipu on the float32
model and ONNX Runtime on the same float16 model, in one process, alternating, at one thread
count. Prints a markdown table of median times and throughput ratios (above 1: the float16
executable is faster).

    python benchmarks/fp16_side_by_side.py                 # the default models, 1 thread
    python benchmarks/fp16_side_by_side.py --threads 2 --rounds 9 --models resnet50,mlp
    python benchmarks/fp16_side_by_side.py --models arch:mobilenet_v2.legacy,arch:vit_s16
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "tests")]

from side_by_side import (  # noqa: E402
    OrtEngine,
    PyipuEngine,
    compile_model,
    ort_session,
    relative_error,
    wait_until_idle,
)
from zoo import MODELS, TINY, fp16_of, model_and_feeds  # noqa: E402

DEFAULT = ("sgemm_512", "mlp", "bert_encoder_layer", "squeezenet", "resnet50")


def measure(name: str, threads: int, rounds: int) -> dict[str, float | str]:
    m32, f32 = model_and_feeds(name)
    m16, f16 = fp16_of(m32, f32)
    engines: dict[str, Callable[[], None]] = {
        "pyipu fp16": PyipuEngine(compile_model(m16), f16, threads),
        "pyipu fp32": PyipuEngine(compile_model(m32), f32, threads),
        "ORT fp16": OrtEngine(ort_session(m16, threads), f16),
    }
    times: dict[str, list[float]] = {k: [] for k in engines}
    for e in engines.values():  # warm-up: first calls map pages and pack weights
        e()
    for _ in range(rounds):
        for k, e in engines.items():
            wait_until_idle()  # the other engine's spinning workers would take a core
            t = time.perf_counter()
            e()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    ref = engines["ORT fp16"].result().astype(np.float32)
    got = engines["pyipu fp16"].result().astype(np.float32)
    err = relative_error(got, ref) if np.isfinite(ref).all() else float("nan")
    for e in engines.values():
        e.close()
    return {"model": name, **med, "err": err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--models",
        default=",".join(DEFAULT),
        help="comma-separated names of zoo.py models, sgemm_N or arch:NAME.EXPORTER; 'all'",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    names = args.models.split(",")
    if names == ["all"]:
        names = ["sgemm_512", *(m for m in MODELS if m not in TINY)]

    def ms(s: float) -> str:
        return f"{s * 1e3:.3g} ms"

    print(f"threads {args.threads}, {args.rounds} alternating rounds, medians\n")
    print(
        "| model | pyipu fp16 | pyipu fp32 | ORT fp16 | **fp16/fp32** | **fp16/ORT fp16** "
        "| max rel. error vs ORT |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        r = measure(name, args.threads, args.rounds)
        a, b, c = r["pyipu fp16"], r["pyipu fp32"], r["ORT fp16"]
        print(
            f"| {name} | {ms(a)} | {ms(b)} | {ms(c)} | **{b / a:.2f}** | **{c / a:.2f}** "
            f"| {r['err']:.1e} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
