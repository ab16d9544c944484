"""Training throughput, pyipu's PopART TrainingSession against PyTorch eager, in one process.

    python -P benchmarks/train_side_by_side.py --threads 1 2

The models of tests/torch_training.py (an MLP, a ResNet-style CNN with BatchNormalization, a
two-layer transformer encoder), the same initial weights, the same batch and optimizer (SGD with
momentum and weight decay; `--optimizer adam`). A round is `--steps` optimizer steps: one
`session.run` with batchesPerStep = steps for pyipu, as many zero_grad / forward / backward /
step calls for torch. The engines alternate round by round (side_by_side.interleaved, which waits
for the other engine's threads to go idle first); the table shows medians as samples per second
and the ratio (> 1: pyipu is faster). Threads: PYIPU_NUM_THREADS when the session is created,
torch.set_num_threads before each torch round.

Peak RSS: each engine trains the model in a child process of its own for the same number of
steps (pyipu's child loads the exported ONNX and does not import torch) and reports its peak
RSS (VmHWM).
`--profile`: pyipu's child runs under `perf record`, and the kernels' samples are charged to
bytecode opcodes as tools/profile_ops.py does (needs perf). A diagnostic (docs/performance.md,
"Training against PyTorch"), not a pytest benchmark.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO / "tests"), str(REPO / "tools")]  # python -P adds none

import numpy as np  # noqa: E402

MODELS = ("mlp", "resnet", "transformer")


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM, which starts afresh at exec (ru_maxrss keeps the peak of
    the forked parent's image, the benchmark's own)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(
    engine: str, name: str, kind: str, steps: int, rounds: int, seconds: float, work: Path
) -> None:
    """Train at least `rounds` rounds of `steps` steps and `seconds`; print the median round
    time and the peak RSS."""
    data = np.load(work / f"{name}.npz")
    x, y = np.repeat(data["x"][None], steps, 0), np.repeat(data["y"][None], steps, 0)
    if engine == "pyipu":
        import onnx
        from training_sessions import PyipuTrainer

        trainer = PyipuTrainer(onnx.load(work / f"{name}.onnx"), kind, steps)

        def step_round() -> None:
            trainer.run(x, y)
    else:
        import torch
        import torch_training as T

        torch.set_num_threads(1)
        ref = T.TorchTrainer(T.CASES[name], kind)

        def step_round() -> None:
            for i in range(steps):
                ref.step(x[i], y[i])

    step_round()  # warm-up
    if seconds:  # profiled: start when the parent's perf has attached
        print("ready", flush=True)
        sys.stdin.readline()
    times: list[float] = []
    end = time.perf_counter() + seconds
    while len(times) < rounds or time.perf_counter() < end:
        t0 = time.perf_counter()
        step_round()
        times.append(time.perf_counter() - t0)
    print(f"{float(np.median(times))} {peak_rss_mb()}", flush=True)


def child_command(engine: str, name: str, args: argparse.Namespace, work: Path) -> list[str]:
    cmd = [sys.executable, "-P", __file__, "--child", engine, name, "--optimizer", args.optimizer]
    return cmd + ["--steps", str(args.steps), "--rounds", str(args.rss_rounds), "--work", str(work)]


CHILD_ENV = {"PYIPU_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def run_child(engine: str, name: str, args: argparse.Namespace, work: Path) -> tuple[float, float]:
    """(median seconds per round, peak RSS in MB) of a child training the model."""
    out = subprocess.run(
        child_command(engine, name, args, work),
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **CHILD_ENV},
    ).stdout
    seconds, rss = out.split()[-2:]
    return float(seconds), float(rss)


def profile(name: str, args: argparse.Namespace, work: Path) -> str:
    """pyipu's time per opcode for one round, from perf samples of its child."""
    from profile_ops import RECORD, attribute_file

    data = work / f"{name}.perf"
    cmd = [*child_command("pyipu", name, args, work), "--seconds", str(args.profile_seconds)]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **CHILD_ENV},
    )
    assert proc.stdin is not None and proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the profiled child of {name} did not start")
    perf = subprocess.Popen([*RECORD, "-o", str(data), "-p", str(proc.pid)])
    time.sleep(0.5)  # perf attached: only the training rounds are sampled
    proc.stdin.write("go\n")
    proc.stdin.flush()
    seconds = float(proc.stdout.read().split()[-2])
    proc.wait()
    perf.wait()
    kernels, leaves, samples = attribute_file(data)
    total = sum(kernels.values())
    ms = seconds / args.steps * 1e3 / samples  # per step, per sample

    def row(label: str, n: int) -> str:
        return f"  {label:34s} {n * ms:8.3f} ms  {n / samples:5.1%}"

    lines = [f"{name}: {seconds / args.steps * 1e3:.3f} ms per step; by opcode:"]
    lines += [row(op, n) for op, n in kernels.most_common(8)]
    lines.append(row("outside the kernels", samples - total))
    lines.append("  leaf functions:")
    lines += [row(f, n) for f, n in leaves.most_common(6)]
    return "\n".join(lines)


def compare(name: str, threads: list[int], args: argparse.Namespace, work: Path) -> list[str]:
    import torch
    import torch_training as T
    from side_by_side import interleaved
    from training_sessions import PyipuTrainer

    case = T.CASES[name]
    xs, ys = case.data(1)
    np.savez(work / f"{name}.npz", x=xs[0], y=ys[0])
    proto = T.export(case, T.build(case))
    (work / f"{name}.onnx").write_bytes(proto.SerializeToString())
    x, y = np.repeat(xs, args.steps, 0), np.repeat(ys, args.steps, 0)
    rows = []
    for t in threads:
        os.environ["PYIPU_NUM_THREADS"] = str(t)
        pyipu = PyipuTrainer(proto, args.optimizer, args.steps)
        ref = T.TorchTrainer(case, args.optimizer)

        def pyipu_round(trainer: PyipuTrainer = pyipu) -> None:
            trainer.run(x, y)

        def torch_round(ref: T.TorchTrainer = ref, t: int = t) -> None:
            torch.set_num_threads(t)
            for i in range(args.steps):
                ref.step(x[i], y[i])

        tp, tt = interleaved(pyipu_round, torch_round, args.seconds)
        pyipu.close()
        n = case.batch * args.steps
        rows.append(
            f"| {name} | {case.batch} | {t} | {n / tp:,.0f} | {n / tt:,.0f} | {tt / tp:.2f} |"
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", help=f"default: all of {', '.join(MODELS)}")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps per timed round")
    ap.add_argument("--seconds", type=float, help="time budget per row (default 4)")
    ap.add_argument("--rss-rounds", type=int, default=5, help="rounds each RSS child trains")
    ap.add_argument("--profile", action="store_true", help="pyipu's time per opcode (perf)")
    ap.add_argument("--profile-seconds", type=float, default=4.0, help="profiled training time")
    ap.add_argument("--child", nargs=2, metavar=("ENGINE", "MODEL"), help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=5, help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        engine, name = args.child
        seconds = args.seconds or 0.0
        child(engine, name, args.optimizer, args.steps, args.rounds, seconds, Path(args.work))
        return
    args.seconds = 4.0 if args.seconds is None else args.seconds
    if unknown := set(args.models) - set(MODELS):
        ap.error(f"unknown model(s) {sorted(unknown)}; choose from {', '.join(MODELS)}")
    import warnings

    warnings.filterwarnings("ignore")  # the exporter's tracer and deprecation warnings
    print("load average", os.getloadavg(), f"optimizer {args.optimizer}", flush=True)
    print("| model | batch | threads | pyipu samples/s | torch samples/s | pyipu/torch |")
    print("|---|---|---|---|---|---|", flush=True)
    rss: dict[str, tuple[float, float]] = collections.OrderedDict()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.models or MODELS:
            compare(name, args.threads, args, work)
            rss[name] = (
                run_child("pyipu", name, args, work)[1],
                run_child("torch", name, args, work)[1],
            )
        print("\n| model | pyipu peak RSS | torch peak RSS | pyipu/torch |\n|---|---|---|---|")
        for name, (p, t) in rss.items():
            print(f"| {name} | {p:.0f} MB | {t:.0f} MB | {p / t:.2f} |")
        if args.profile:
            print()
            for name in args.models or MODELS:
                print(profile(name, args, work), flush=True)


if __name__ == "__main__":
    main()
