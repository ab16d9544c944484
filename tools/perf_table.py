"""Turn the side-by-side benchmarks' pytest-benchmark JSON into docs/performance.md's tables.

    python tools/perf_table.py --run            # run benchmarks/, rewrite the doc's results
    python tools/perf_table.py --run --quick    # smoke: two short rounds per case, print only
    python tools/perf_table.py results.json     # tables from an earlier --benchmark-json

Ratios are pyipu/reference *throughput* (reference median time / pyipu median time): above 1
pyipu is faster. The results go between the RESULTS_BEGIN and RESULTS_END markers of the doc.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from light_models import NAMES as CNN_NAMES  # noqa: E402
from proc_cpuinfo import first_cpu  # noqa: E402

DOC = REPO / "docs" / "performance.md"
BENCH_FILES = ["bench_vs_ort.py", "bench_gemm.py", "bench_footprint.py"]
BEGIN = "<!-- RESULTS_BEGIN: written by tools/perf_table.py -->"
END = "<!-- RESULTS_END -->"
TARGET_SET = ["seed_overlap_io", *CNN_NAMES]  # the geometric-mean target set


def per_call(bench: dict[str, Any]) -> float:
    """Median seconds per call (a round may loop several calls for the tiny models)."""
    return bench["stats"]["median"] / bench["extra_info"].get("calls_per_round", 1)


def index(benches: Iterable[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    out: dict[tuple, dict[str, Any]] = {}
    for b in benches:
        e = b["extra_info"]
        if "engine" in e:
            out[(e.get("model"), e.get("threads"), e["engine"])] = b
    return out


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.2f} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def ratio(ix: dict, model: str, threads: int | None, ref: str = "ort") -> float | None:
    a, b = ix.get((model, threads, "pyipu")), ix.get((model, threads, ref))
    return per_call(b) / per_call(a) if a and b else None


def models_table(ix: dict, models: list[str]) -> list[str]:
    rows = [
        "| model | pyipu 1T | ORT 1T | **pyipu/ORT 1T** | pyipu 2T | ORT 2T | **pyipu/ORT 2T** "
        "| max rel. error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in models:
        cells = [m]
        err = 0.0
        for t in (1, 2):
            p, o = ix.get((m, t, "pyipu")), ix.get((m, t, "ort"))
            if not (p and o):
                cells += ["–", "–", "–"]
                continue
            err = max(err, p["extra_info"].get("rel_error_vs_ort", 0.0))
            cells += [
                fmt_time(per_call(p)),
                fmt_time(per_call(o)),
                f"**{per_call(o) / per_call(p):.2f}**",
            ]
        cells.append(f"{err:.1e}")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def geomean_rows(ix: dict) -> list[str]:
    rows = [
        "| set | threads | pyipu/reference (geomean) | worst | target |",
        "|---|---|---|---|---|",
    ]
    for t in (1, 2):
        rs = {m: ratio(ix, m, t) for m in TARGET_SET}
        got = {m: r for m, r in rs.items() if r is not None}
        if got:
            worst = min(got, key=got.__getitem__)
            gm = geomean(list(got.values()))
            rows.append(
                f"| seed + nine CNNs ({len(got)} models) | {t} | **{gm:.2f}** "
                f"| {worst} {got[worst]:.2f} | ≥ 1.0, none < 0.8 |"
            )
    for m, label in (("bert_encoder_layer", "BERT-base encoder layer"), ("mlp", "MLP")):
        for t in (1, 2):
            r = ratio(ix, m, t)
            if r is not None:
                rows.append(f"| {label} | {t} | **{r:.2f}** | | ≥ 1.0 |")
    sgemm = {
        int(k[0][6:]): ratio(ix, k[0], 1, "numpy") for k in ix if str(k[0]).startswith("sgemm_")
    }
    big = {n: r for n, r in sgemm.items() if n >= 256 and r is not None}
    if big:
        worst = min(big, key=big.__getitem__)
        rows.append(
            f"| sgemm vs numpy, n ≥ 256 | 1 | **{geomean(list(big.values())):.2f}** "
            f"| n = {worst}: {big[worst]:.2f} | ≥ 1.0 each |"
        )
    tiny = [
        per_call(b)
        for (m, _, e), b in ix.items()
        if m in ("fusion_model0", "fusion_model1") and e == "pyipu"
    ]
    if tiny:
        rows.append(
            f"| tiny-model `execute()` latency (fusion models, 1 and 2 threads) | | "
            f"best {fmt_time(min(tiny))}, worst {fmt_time(max(tiny))} | | ≤ 1.2 µs median |"
        )
    return rows


def tiny_rows(ix: dict) -> list[str]:
    rows = [
        "| model | threads | pyipu `execute()` | ORT IOBinding | ORT `run()` | pyipu/IOBinding "
        "| pyipu/`run()` |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in ("fusion_model0", "fusion_model1"):
        for t in (1, 2):
            p, o, r = (ix.get((m, t, e)) for e in ("pyipu", "ort", "ort_run"))
            if not (p and o and r):
                continue
            rows.append(
                f"| {m} | {t} | **{fmt_time(per_call(p))}** | {fmt_time(per_call(o))} | "
                f"{fmt_time(per_call(r))} | {per_call(o) / per_call(p):.2f} | "
                f"{per_call(r) / per_call(p):.2f} |"
            )
    return rows


def gemm_rows(ix: dict) -> list[str]:
    rows = [
        "| n | pyipu 1T GF/s | numpy 1T GF/s | **pyipu/numpy 1T** | pyipu 2T GF/s | numpy 2T GF/s "
        "| **pyipu/numpy 2T** |",
        "|---|---|---|---|---|---|---|",
    ]
    sizes = sorted({k[0] for k in ix if str(k[0]).startswith("sgemm_")}, key=lambda s: int(s[6:]))
    for m in sizes:
        cells = [m[6:]]
        for t in (1, 2):
            p, o = ix.get((m, t, "pyipu")), ix.get((m, t, "numpy"))
            if not (p and o):
                cells += ["–", "–", "–"]
                continue
            gf = p["extra_info"]["gflop"]
            cells += [
                f"{gf / per_call(p):.3g}",
                f"{gf / per_call(o):.3g}",
                f"**{per_call(o) / per_call(p):.2f}**",
            ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def serving_rows(ix: dict) -> list[str]:
    rows = []
    p, o = ix.get(("seed_overlap_io", None, "pyipu")), ix.get(("seed_overlap_io", None, "ort"))
    if p and o:
        n = p["extra_info"]["requests_per_round"]
        rows += [
            "| seed model, 3 callers | pyipu (1 runner, 2 compute threads) | ORT (1 session, "
            "intra_op 1) | pyipu/ORT | target |",
            "|---|---|---|---|---|",
            f"| throughput | {n / per_call(p):.1f} inf/s | {n / per_call(o):.1f} inf/s | "
            f"**{per_call(o) / per_call(p):.2f}** | ≥ 1.0 |",
        ]
    return rows


def footprint_rows(benches: list[dict[str, Any]]) -> list[str]:
    by = {(b["group"], b["extra_info"].get("engine")): b for b in benches}
    rows = ["| ResNet50 | pyipu | ORT | pyipu/ORT | target |", "|---|---|---|---|---|"]
    p, o = by.get(("resnet50_load", "pyipu")), by.get(("resnet50_load", "ort"))
    if p and o:
        rows.append(
            f"| load: `Runner(popef)` vs `InferenceSession(onnx)` | {fmt_time(per_call(p))} | "
            f"{fmt_time(per_call(o))} | **{per_call(p) / per_call(o):.2f}** of ORT's time | ≤ 0.2 |"
        )
        pf, of = p["extra_info"].get("file_bytes"), o["extra_info"].get("file_bytes")
        if pf and of:  # the PopEF holds each weight once (docs/popef.md, "Weights stored packed")
            rows.append(
                f"| file: PopEF vs ONNX | {pf / 1e6:.1f} MB | {of / 1e6:.1f} MB | "
                f"**{pf / of:.2f}** | |"
            )
    p, o = by.get(("resnet50_peak_rss", "pyipu")), by.get(("resnet50_peak_rss", "ort"))
    if p and o:
        pe, oe = p["extra_info"], o["extra_info"]
        rows.append(
            f"| peak RSS, load + 5 inferences (child process, VmHWM) | "
            f"{pe['peak_rss_bytes'] / 2**20:.0f} MiB | {oe['peak_rss_bytes'] / 2**20:.0f} MiB | "
            f"**{pe['peak_rss_bytes'] / oe['peak_rss_bytes']:.2f}** | ≤ 1.0 |"
        )
        rows.append(
            f"| of which Python + imports | {pe['import_rss_bytes'] / 2**20:.0f} MiB | "
            f"{oe['import_rss_bytes'] / 2**20:.0f} MiB | | |"
        )
    return rows


def micro_kernel() -> str:
    """The sgemm micro-kernel in use: pyipu's pick for this CPU unless PYIPU_ISA forces one."""
    from pyipu import _core

    return {1: "portable", 2: "AVX2+FMA", 3: "AVX-512"}.get(_core.sgemm_isa(), "?")


def machine(data: dict[str, Any], load: str) -> list[str]:
    mi, ci = data.get("machine_info", {}), data.get("commit_info", {})
    cpu = platform.processor() or mi.get("machine", "")
    fields = first_cpu()
    if "model name" in fields:
        # the sessions' VMs change CPU: family/model and AVX-512 tell Zen 3 from Zen 4
        avx512 = "AVX-512" if "avx512f" in fields.get("flags", "").split() else "no AVX-512"
        cpu = (
            f"{fields['model name']} (family {fields.get('cpu family', '?')}, model "
            f"{fields.get('model', '?')}, {avx512}; sgemm micro-kernel {micro_kernel()})"
        )
    versions = []
    for mod in ("numpy", "onnx", "onnxruntime"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            pass
    return [
        f"- **Machine**: {cpu}, {os.cpu_count()} vCPUs; Python {mi.get('python_version', '?')}, "
        + ", ".join(versions)
        + ".",
        f"- **Run**: {data.get('datetime', '?')[:19]} UTC, pyipu commit "
        f"`{ci.get('id', '?')[:10]}`{' (dirty tree)' if ci.get('dirty') else ''}.",
        f"- **Load**: {load}",
    ]


def render(data: dict[str, Any], load: str = "not recorded") -> str:
    benches = data["benchmarks"]
    ix = index(benches)
    models = [
        m
        for m in dict.fromkeys(k[0] for k in ix if k[1] is not None)
        if m and not m.startswith("sgemm_")
    ]
    big = [m for m in models if not m.startswith("fusion_")]
    parts = [
        *machine(data, load),
        "",
        "### Models: median time per inference (batch as built), pyipu/ORT throughput",
        "",
        *models_table(ix, big),
        "",
        "### Targets",
        "",
        *geomean_rows(ix),
        "",
        "### Tiny models: per-call latency from Python",
        "",
        *tiny_rows(ix),
        "",
        "### sgemm against numpy/OpenBLAS (C = A·B, square n, GFLOP/s = 2n³ / median)",
        "",
        *gemm_rows(ix),
        "",
        "### Serving: the seed example fed by 3 caller threads",
        "",
        *serving_rows(ix),
        "",
        "### ResNet50: load time and memory",
        "",
        *footprint_rows(benches),
    ]
    return "\n".join(parts) + "\n"


def _busy_jiffies() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def run(quick: bool, json_path: str) -> str:
    """Run the benchmark files into json_path; a sentence on how busy the machine was."""
    cmd = [sys.executable, "-P", "-m", "pytest", "-q"]
    cmd += [str(REPO / "benchmarks" / f) for f in BENCH_FILES]
    cmd += [f"--benchmark-json={json_path}", "--benchmark-columns=median,rounds"]
    if quick:
        cmd.append("--bench-quick")
    load0 = os.getloadavg()[0]
    busy0, total0 = _busy_jiffies()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1, total1 = _busy_jiffies()
    ours = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    hz = os.sysconf("SC_CLK_TCK")
    others = max(0.0, (busy1 - busy0) / hz - ours) / wall
    return (
        f"the run took {wall / 60:.1f} min; other processes kept {others:.2f} of the "
        f"{os.cpu_count()} cores busy on average (/proc/stat busy time minus the benchmark's own "
        f"CPU time); load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end."
    )


def write_doc(text: str, doc: Path = DOC) -> None:
    content = doc.read_text()
    if BEGIN not in content or END not in content:
        raise SystemExit(f"{doc} has no {BEGIN} ... {END} section")
    head, rest = content.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("json", nargs="?", help="pytest-benchmark JSON (--benchmark-json) to render")
    ap.add_argument("--run", action="store_true", help="run the benchmarks first")
    ap.add_argument("--quick", action="store_true", help="with --run: smoke mode, no doc update")
    ap.add_argument("--write", action="store_true", help="rewrite docs/performance.md's results")
    args = ap.parse_args(argv)
    load = "not recorded"
    json_path = args.json
    if args.run:
        json_path = json_path or os.path.join(tempfile.mkdtemp(prefix="pyipu-bench-"), "bench.json")
        load = run(args.quick, json_path)
        with open(json_path) as f:
            data = json.load(f)
        data["pyipu_load"] = load  # kept with the figures, for later renders
        with open(json_path, "w") as f:
            json.dump(data, f)
    if not json_path:
        ap.error("give a JSON file or --run")
    with open(json_path) as f:
        data = json.load(f)
    text = render(data, data.get("pyipu_load", load))
    print(text)
    if (args.write or args.run) and not args.quick:
        write_doc(text)
        print(f"wrote {DOC.relative_to(REPO)} ({json_path})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
