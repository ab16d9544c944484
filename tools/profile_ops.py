"""Where the time goes, per op type, in pyipu and in ONNX Runtime, for the benchmark models.

    python tools/profile_ops.py resnet50 squeezenet --threads 1 --seconds 4

pyipu: the model is compiled (debug.allowOutOfMemory, as the benchmarks) and saved as PopEF; a
child process loads it and runs inferences for `--seconds` under `perf record --call-graph
dwarf`. Each bytecode opcode runs in its own kernel entry point (`ipu__k_conv2d`,
`ipu__k_mul_f32`, ...), so the samples whose call chain passes through an entry point
give the time per opcode; the leaf functions show where inside them. Times per inference are
shares of the kernels' samples times the child's median inference time.

ONNX Runtime: its own profiler (`SessionOptions.enable_profiling`), node events summed per op
type, per inference, after ORT's graph optimisations (Conv here has BatchNorm and Relu fused).

Needs `perf` (linux-perf) and a perf_event_paranoid that allows user-space sampling.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

CHILD = """
import sys, time, numpy as np
from pyipu import runtime
popef, xpath, seconds, threads = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
feeds = dict(np.load(xpath))
r = runtime.Runner(popef, runtime.RuntimeConfig(timeout_ns=0, num_threads=threads))
outs = {d.name: np.empty(d.shape, d.numpy_data_type()) for d in r.get_execute_outputs()}
r.execute(feeds, outs)
times, end = [], time.perf_counter() + seconds
while time.perf_counter() < end or len(times) < 3:
    t0 = time.perf_counter()
    r.execute(feeds, outs)
    times.append(time.perf_counter() - t0)
r.close()
print(len(times), float(np.median(times)))
"""

FRAME = re.compile(r"^\s+[0-9a-f]+\s+(\S+)")
# call graphs deep enough to reach the kernel frame under the runtime's own
RECORD = ["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,16384"]


def attribute_file(data: Path) -> tuple[collections.Counter, collections.Counter, int]:
    """`attribute` of the samples in the perf.data file `data`."""
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "ip,sym", "--no-inline"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return attribute(script)


def attribute(script: str) -> tuple[collections.Counter, collections.Counter, int]:
    """(samples per opcode, samples per leaf function, all samples) from `perf script`: a
    sample belongs to the innermost `ipu__k_*` frame of its call chain. `ipu__k_gemm_*`
    and `ipu__k_matmul_*` tail-call `mm_run_f32` / `mm_run_f16` (matmul.c), which call
    ipu__sgemm*, ipu__sgemv, so a chain with one of those and no kernel frame is one of
    theirs."""
    kernels: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    samples = 0
    for block in script.split("\n\n"):
        frames = [m.group(1) for line in block.splitlines() if (m := FRAME.match(line))]
        if not frames:
            continue
        samples += 1
        leaves[frames[0]] += 1
        kernel = next((f[len("ipu__k_") :] for f in frames if f.startswith("ipu__k_")), None)
        if kernel is None and any(f.startswith(("ipu__sgem", "mm_run_")) for f in frames):
            kernel = "sgemm (GEMM or MATMUL)"
        if kernel is not None:
            kernels[kernel] += 1
    return kernels, leaves, samples


def opcode_counts(exe: Any) -> dict[str, int]:
    ir = exe.program
    counts: collections.Counter[str] = collections.Counter()
    for pid in ir.main_programs:
        for ins in ir.programs[pid].instrs:
            counts[ins.op.name] += 1
    return dict(counts.most_common())


def model_and_feeds(name: str, fp16: bool) -> tuple[Any, dict[str, Any]]:
    """benchmarks/zoo.py's model `name`, converted to float16 if `fp16`."""
    import zoo

    proto, feeds = zoo.model_and_feeds(name)
    return zoo.fp16_of(proto, feeds) if fp16 else (proto, feeds)


def profile_pyipu(
    name: str, threads: int, seconds: float, work: Path, fp16: bool = False
) -> dict[str, Any]:
    import numpy as np
    from side_by_side import compile_model

    proto, feeds = model_and_feeds(name, fp16)
    exe = compile_model(proto)
    popef, xpath, data = work / f"{name}.popef", work / f"{name}.npz", work / f"{name}.perf"
    exe.save(popef)
    np.savez(xpath, **feeds)
    cmd = [*RECORD, "-o", str(data)]
    cmd += ["--", sys.executable, "-P", "-c", CHILD, str(popef), str(xpath), str(seconds)]
    cmd.append(str(threads))
    # one OpenBLAS thread: numpy's BLAS pool spins at import and would show up in the samples
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.split()
    runs, median = int(out[-2]), float(out[-1])
    kernels, leaves, samples = attribute_file(data)
    total = sum(kernels.values())
    per_op = {k: v / total * median for k, v in kernels.most_common()}
    return {
        "median_s": median,
        "runs": runs,
        "kernel_share_of_samples": total / samples,
        "per_op_s": per_op,
        "leaves": [(k, v / samples * 100) for k, v in leaves.most_common(10)],
        "opcodes": opcode_counts(exe),
    }


def profile_ort(
    name: str, threads: int, seconds: float, work: Path, fp16: bool = False
) -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort
    from models import ORT_IR_VERSION

    proto, feeds = model_and_feeds(name, fp16)
    proto.ir_version = min(proto.ir_version, ORT_IR_VERSION)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = str(work / f"ort_{name}")
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 3:
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    events = json.loads(Path(sess.end_profiling()).read_text())
    per_op: collections.Counter[str] = collections.Counter()
    for ev in events:
        if ev.get("cat") == "Node" and ev["name"].endswith("_kernel_time"):
            per_op[ev["args"]["op_name"]] += ev["dur"] * 1e-6
    runs = len(times) + 1  # the warm-up run is profiled too
    return {
        "median_s": float(np.median(times)),
        "runs": runs,
        "per_op_s": {k: v / runs for k, v in per_op.most_common()},
    }


def fmt_ms(s: float) -> str:
    return f"{s * 1e3:.2f}"


def markdown(name: str, p: dict[str, Any], o: dict[str, Any]) -> str:
    lines = [
        f"#### {name}: pyipu {fmt_ms(p['median_s'])} ms, ORT {fmt_ms(o['median_s'])} ms "
        f"per inference (profiled runs)",
        "",
        "| pyipu opcode | ms/inf | share | | ORT op type | ms/inf | share |",
        "|---|---|---|---|---|---|---|",
    ]
    pt, ot = sum(p["per_op_s"].values()), sum(o["per_op_s"].values())
    pl, ol = list(p["per_op_s"].items())[:8], list(o["per_op_s"].items())[:8]
    for i in range(max(len(pl), len(ol))):
        a = f"{pl[i][0]} | {fmt_ms(pl[i][1])} | {pl[i][1] / pt:.0%}" if i < len(pl) else " | "
        b = f"{ol[i][0]} | {fmt_ms(ol[i][1])} | {ol[i][1] / ot:.0%}" if i < len(ol) else " | "
        lines.append(f"| {a} | | {b} |")
    leaves = ", ".join(f"`{s}` {v:.0f}%" for s, v in p["leaves"][:6])
    ops = ", ".join(f"{k} {v}" for k, v in p["opcodes"].items())
    lines += [
        "",
        f"pyipu leaf functions (share of all samples): {leaves}. "
        f"Kernels hold {p['kernel_share_of_samples']:.0%} of the child's samples "
        "(the rest: Python start-up, loading, dispatch).",
        f"pyipu instructions: {ops}.",
        "",
    ]
    return "\n".join(lines)


# pyipu lowers LRN to a POOL2D window sum plus BINARY pow and MUL/DIV: ORT's LRN counts as pool.
PYIPU_GROUPS = {
    "conv": ("conv2d",),
    "pool": ("pool2d", "reduce_mean_f32"),
    "gemm/matmul": ("gemm_f32 (tail call)", "sgemm (GEMM or MATMUL)", "gemm_f32", "matmul_f32"),
    "eltwise": ("add_f32", "mul_f32", "sub_f32", "div_f32", "relu_f32", "binary_f32", "unary_f32"),
}
ORT_GROUPS = {
    "conv": ("Conv", "FusedConv"),
    "pool": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LRN"),
    "gemm/matmul": ("Gemm", "FusedGemm", "MatMul", "FusedMatMul"),
    "eltwise": ("Add", "Mul", "Sub", "Div", "Relu", "Sum", "Erf", "BatchNormalization"),
}


def grouped(per_op: dict[str, float], groups: dict[str, tuple[str, ...]]) -> dict[str, float]:
    out = {g: sum(per_op.get(k, 0.0) for k in ks) for g, ks in groups.items()}
    out["other"] = sum(per_op.values()) - sum(out.values())
    return out


def summary(results: dict[str, Any]) -> str:
    """One row per model: ms per inference by op group, pyipu | ORT."""
    names = [*PYIPU_GROUPS, "other"]
    head = " | ".join(f"{g} pyipu / ORT" for g in names)
    lines = [
        f"| model | total pyipu / ORT | {head} |",
        "|---|---|" + "---|" * len(names),
    ]
    for model, r in results.items():
        p, o = (
            grouped(r["pyipu"]["per_op_s"], PYIPU_GROUPS),
            grouped(r["ort"]["per_op_s"], ORT_GROUPS),
        )
        total = f"{fmt_ms(r['pyipu']['median_s'])} / {fmt_ms(r['ort']['median_s'])}"
        cells = " | ".join(f"{fmt_ms(p[g])} / {fmt_ms(o[g])}" for g in names)
        lines.append(f"| {model} | {total} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "models",
        nargs="*",
        help="names from benchmarks/zoo.py MODELS, sgemm_N or arch:NAME.EXPORTER",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=4.0, help="profiled time per runtime")
    ap.add_argument("--json", help="also write the raw figures here")
    ap.add_argument("--fp16", action="store_true", help="the models as --precision fp16 makes them")
    ap.add_argument(
        "--summary",
        nargs="*",
        metavar="JSON",
        help="print the per-group table of earlier --json files",
    )
    args = ap.parse_args(argv)
    if args.summary is not None:
        merged: dict[str, Any] = {}
        for path in args.summary:
            merged.update(json.loads(Path(path).read_text()))
        print(summary(merged))
        return 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="pyipu-profile-") as tmp:
        work = Path(tmp)
        for name in args.models:
            p = profile_pyipu(name, args.threads, args.seconds, work, args.fp16)
            o = profile_ort(name, args.threads, args.seconds, work, args.fp16)
            results[name] = {"pyipu": p, "ort": o}
            print(markdown(name, p, o), flush=True)
    print(summary(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
