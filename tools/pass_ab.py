"""What one compiler pass is worth: a model compiled with and without it, run interleaved.

    python -P tools/pass_ab.py fuse_affine_chains densenet121 --threads 1 --rounds 10

Both executables run in one process, in alternating rounds of 3 calls, so that a neighbour
slowing the machine slows both. Each variant gets two runners, created and called in the order
without, with, with, without: of two runners of one executable, the one created second measured
3-5 % faster on the development machine, which would otherwise favour one variant.
Prints the median and minimum per-inference process CPU time and wall time of each variant and
the throughput ratio with/without (CPU time is the steadier figure on a shared machine at 1
thread; at 2 threads it is not latency), and checks the outputs agree. Models: those of the
side-by-side tables (benchmarks/zoo.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "benchmarks"), os.path.join(HERE, "..", "tests")]

import zoo  # noqa: E402

import pyipu.compiler.compiler as compiler_module  # noqa: E402
from pyipu.compiler import Compiler, CompilerOptions  # noqa: E402
from pyipu.runtime import Runner, RuntimeConfig  # noqa: E402

PASSES = ("fuse_conv_epilogues", "fuse_gelu", "fuse_affine_chains", "drop_broadcast_expands")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pass_name", choices=PASSES)
    ap.add_argument("model", choices=list(zoo.MODELS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    build, feeds_of = zoo.MODELS[args.model]
    model = build()
    feeds = feeds_of(model)
    opts = CompilerOptions()
    opts.engine_options = {"debug.allowOutOfMemory": "true"}
    the_pass = getattr(compiler_module, args.pass_name)
    exes = {}
    for variant, fn in (("without", lambda b: 0), ("with", the_pass)):
        setattr(compiler_module, args.pass_name, fn)
        try:
            exes[variant] = Compiler.compile(model, None, opts)
        finally:
            setattr(compiler_module, args.pass_name, the_pass)
    runners = []  # (variant, runner, outputs), in the order without, with, with, without
    for variant in ("without", "with", "with", "without"):
        r = Runner(exes[variant], RuntimeConfig(timeout_ns=0, num_threads=args.threads))
        out = {d.name: np.zeros(d.shape, d.numpy_data_type()) for d in r.get_execute_outputs()}
        runners.append((variant, r, out))
    cpu: dict[str, list[float]] = {v: [] for v in exes}
    wall: dict[str, list[float]] = {v: [] for v in exes}
    for _ in range(args.rounds):
        for variant, r, out in runners:
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(3):
                r.execute(feeds, out)
            cpu[variant].append((time.process_time() - c0) / 3e-3)
            wall[variant].append((time.perf_counter() - w0) / 3e-3)
    a, b = runners[0][2], runners[1][2]  # without, with
    diff = max(
        float(np.max(np.abs(a[k] - b[k]) / max(1.0, float(np.max(np.abs(a[k])))))) for k in a
    )
    print(f"{args.model}, {args.threads} thread(s), {args.rounds} rounds; max rel. diff {diff:.1e}")
    for v, exe in exes.items():
        n = len(exe.program.program(1).instrs)
        print(
            f"  {v:8s} {n:4d} instructions  CPU ms median {statistics.median(cpu[v]):8.2f} "
            f"min {min(cpu[v]):8.2f}   wall ms median {statistics.median(wall[v]):8.2f} "
            f"min {min(wall[v]):8.2f}"
        )
    ratio = statistics.median(cpu["without"]) / statistics.median(cpu["with"])
    print(f"  throughput with/without (CPU-time medians): {ratio:.3f}")


if __name__ == "__main__":
    main()
