"""The architecture zoo (benchmarks/arch_zoo) on pyipu, ONNX Runtime and OpenVINO, side by side.

    python benchmarks/zoo_side_by_side.py --threads 1 2 --json zoo.json
    python benchmarks/zoo_side_by_side.py --models mobilenet_v2 vit_s16 --quick
    python benchmarks/zoo_side_by_side.py --rss          # peak RSS per engine, child processes
    python benchmarks/zoo_side_by_side.py --render zoo.json   # the tables again

Each model is exported by both of torch's exporters (arch_zoo.export, cached), then per
exporter: pyipu compiles it (`Compiler.compile`, debug.allowOutOfMemory as every benchmark),
ORT opens a session and OpenVINO compiles it for the CPU in f32, latency mode, one stream. At
each thread count T the three run in interleaved timed rounds in this process, each round after
the process is idle (side_by_side.wait_until_idle); medians. pyipu's and OpenVINO's outputs
are checked against ORT's (max |Δ| / max |ORT| over every output). Ratios are throughput
ratios, reference time / pyipu time: above 1 pyipu is faster. A model pyipu cannot compile is
listed with the error's type and message; ORT and OpenVINO are still timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from detections import detection_error  # noqa: E402
from side_by_side import (  # noqa: E402
    OrtEngine,
    PyipuEngine,
    compile_model,
    ort_session,
    relative_error,
    valid_outputs,
    wait_until_idle,
)

TOLERANCE = 1e-3
ENGINES = ("pyipu", "ort", "openvino")


def feeds_of(name: str) -> dict[str, np.ndarray]:
    from arch_zoo import build
    from arch_zoo.export import input_names

    _, example = build(name)
    return {n: t.numpy() for n, t in zip(input_names(name, len(example)), example, strict=True)}


class OvEngine:
    """OpenVINO CPU plugin, f32, latency hint, one stream, T inference threads; inputs set once
    as tensors sharing the numpy buffers."""

    def __init__(self, path: Path, feeds: dict[str, np.ndarray], threads: int) -> None:
        import openvino as ov

        config = {
            "INFERENCE_PRECISION_HINT": "f32",
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": "1",
            "INFERENCE_NUM_THREADS": str(threads),
        }
        self.compiled = ov.Core().compile_model(str(path), "CPU", config)
        self.request = self.compiled.create_infer_request()
        for port in self.compiled.inputs:
            a = feeds[port.get_any_name()]
            self.request.set_tensor(port, ov.Tensor(a, shared_memory=True))

    def __call__(self) -> None:
        self.request.infer()

    def results(self) -> list[np.ndarray]:
        return [self.request.get_output_tensor(i).data for i in range(len(self.compiled.outputs))]

    def close(self) -> None:
        del self.request, self.compiled


def outputs_of(engine: Any) -> list[np.ndarray]:
    if isinstance(engine, OvEngine):
        return engine.results()
    return list(valid_outputs(engine.outputs).values())


def max_error(got: list[np.ndarray], want: list[np.ndarray], names: list[str]) -> float:
    """max |Δ| / max |ORT| over the outputs; detections (boxes, scores, labels) paired among
    equal scores instead, whose order is arbitrary (detections.py)."""
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} outputs, ORT has {len(want)}")
    if {"boxes", "scores", "labels"} <= set(names):
        g, w = dict(zip(names, got, strict=True)), dict(zip(names, want, strict=True))
        return detection_error(w, g, TOLERANCE)
    return max(relative_error(g, w) for g, w in zip(got, want, strict=True))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def describe(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:200]}"


def interleaved(fns: dict[str, Callable[[], None]], budget_s: float, quick: bool) -> dict:
    """Median seconds per call of each engine, alternating rounds of about 4 ms or one call,
    each after the process is idle."""
    per_call = {}
    for name, fn in fns.items():
        fn()
        _, per_call[name] = timed(fn)
    calls = max(1, int(0.004 // max(max(per_call.values()), 1e-7)))
    round_s = sum(per_call.values()) * calls
    rounds = 2 if quick else max(5, min(200, int(budget_s * len(fns) / max(round_s, 1e-7))))
    times: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            wait_until_idle()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - t0) / calls)
    return {n: statistics.median(t) for n, t in times.items()}


def run_case(name: str, exporter: str, threads: list[int], budget_s: float, quick: bool) -> dict:
    """One model × exporter at every thread count: compile, check, time."""
    from arch_zoo.export import export

    rec: dict[str, Any] = {"model": name, "exporter": exporter, "errors": {}, "times": {}}
    try:
        path, rec["export_s"] = timed(lambda: export(name, exporter))
    except Exception as e:  # the exporter's own failure is a result too
        rec["errors"]["export"] = describe(e)
        return rec
    proto = onnx.load(str(path))
    rec["opset"] = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    feeds = feeds_of(name)
    exe = None
    try:
        exe, rec["pyipu_compile_s"] = timed(lambda: compile_model(proto))
    except Exception as e:
        rec["errors"]["pyipu"] = describe(e)
    for t in threads:
        engines: dict[str, Any] = {}
        try:
            sess, s = timed(lambda t=t: ort_session(proto, t))
            engines["ort"] = OrtEngine(sess, feeds)
            rec.setdefault("ort_session_s", s)
        except Exception as e:
            rec["errors"]["ort"] = describe(e)
            continue  # no reference
        try:
            engines["openvino"], s = timed(lambda t=t: OvEngine(path, feeds, t))
            rec.setdefault("openvino_compile_s", s)
        except Exception as e:
            rec["errors"]["openvino"] = describe(e)
        if exe is not None:
            try:
                engines["pyipu"] = PyipuEngine(exe, feeds, t)
            except Exception as e:
                rec["errors"]["pyipu"] = describe(e)
        engines["ort"]()
        ref = [a.copy() for a in outputs_of(engines["ort"])]
        for other in ("pyipu", "openvino"):
            if other in engines and t == threads[0]:
                engines[other]()
                try:
                    names = [o.name for o in proto.graph.output]
                    rec[f"{other}_error"] = max_error(outputs_of(engines[other]), ref, names)
                except AssertionError as e:
                    rec["errors"][f"{other}_output"] = str(e)
        order = {n: engines[n] for n in ENGINES if n in engines}
        medians = interleaved(order, budget_s, quick)
        rec["times"][str(t)] = medians
        for e in engines.values():
            e.close()
    return rec


def ratio(rec: dict, t: int, ref: str) -> float | None:
    m = rec["times"].get(str(t), {})
    ok = rec.get("pyipu_error", math.inf) <= TOLERANCE
    return m[ref] / m["pyipu"] if ok and "pyipu" in m and ref in m else None


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def ms(s: float | None) -> str:
    if s is None:
        return ""
    return f"{s:.2f} s" if s >= 1 else f"{s * 1e3:.3g} ms"


def bold(x: float | None) -> str:
    return "" if x is None else f"**{x:.2f}**"


def table(records: list[dict], threads: list[int]) -> str:
    lines = []
    for t in threads:
        lines += [
            f"\n{t} thread{'s' if t > 1 else ''}\n",
            "| model | exporter | pyipu | ORT | OpenVINO | **pyipu/ORT** | **pyipu/OV** "
            "| err vs ORT (pyipu / OV) | compile s (pyipu / ORT / OV) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in records:
            m = r["times"].get(str(t), {})
            ro, rv = ratio(r, t, "ort"), ratio(r, t, "openvino")
            errs = " / ".join(
                f"{r[k]:.1e}" if k in r else "-" for k in ("pyipu_error", "openvino_error")
            )
            comp = " / ".join(
                f"{r[k]:.2f}" if k in r else "-"
                for k in ("pyipu_compile_s", "ort_session_s", "openvino_compile_s")
            )
            lines.append(
                f"| {r['model']} | {r['exporter']} | {ms(m.get('pyipu'))} | {ms(m.get('ort'))} "
                f"| {ms(m.get('openvino'))} | {bold(ro)} | {bold(rv)} | {errs} | {comp} |"
            )
        lines.append("")
        for exporter in sorted({r["exporter"] for r in records}):
            rs = [r for r in records if r["exporter"] == exporter]
            for ref, label in (("ort", "ORT"), ("openvino", "OpenVINO")):
                xs = [x for r in rs if (x := ratio(r, t, ref)) is not None]
                g = geomean(xs)
                if g is not None:
                    worst = min(rs, key=lambda r: ratio(r, t, ref) or math.inf)
                    lines.append(
                        f"- geomean pyipu/{label}, {exporter}, {t}T: **{g:.2f}** over {len(xs)} "
                        f"models (worst {worst['model']} {ratio(worst, t, ref):.2f})"
                    )
    failed = [r for r in records if r["errors"]]
    if failed:
        lines += ["\n| model | exporter | stage | error |", "|---|---|---|---|"]
        for r in failed:
            for stage, msg in r["errors"].items():
                lines.append(f"| {r['model']} | {r['exporter']} | {stage} | {msg} |")
    bad = [r for r in records if r.get("pyipu_error", 0) > TOLERANCE]
    if bad:
        lines.append("")
    for r in bad:
        lines.append(f"MISMATCH {r['model']} {r['exporter']}: pyipu error {r['pyipu_error']:.2e}")
    return "\n".join(lines)


RSS_CHILD = """
import sys, numpy as np
engine, path, feeds_path, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
feeds = dict(np.load(feeds_path))
if engine == "pyipu":
    from pyipu import runtime
    r = runtime.Runner(path, runtime.RuntimeConfig(timeout_ns=0, num_threads=threads))
    outs = {d.name: np.empty(d.shape, d.numpy_data_type()) for d in r.get_execute_outputs()}
    run = lambda: r.execute(feeds, outs)
elif engine == "ort":
    import onnxruntime as ort
    so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.inter_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    run = lambda: s.run(None, feeds)
else:
    import openvino as ov
    c = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
        "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": str(threads)})
    req = c.create_infer_request()
    run = lambda: req.infer(feeds)
for _ in range(5):
    run()
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(int(hwm) // 1024)
"""


def rss_case(name: str, exporter: str, threads: int) -> dict:
    """Peak RSS (VmHWM, MB) of a fresh child per engine that loads the model (pyipu: the saved
    PopEF) and runs 5 inferences; the child's Python, numpy and engine library included."""
    from arch_zoo.export import export

    rec: dict[str, Any] = {"model": name, "exporter": exporter, "rss_mb": {}, "errors": {}}
    path = export(name, exporter)
    with tempfile.TemporaryDirectory() as d:
        feeds = Path(d) / "feeds.npz"
        np.savez(feeds, **feeds_of(name))
        files = {"ort": str(path), "openvino": str(path)}
        try:
            compile_model(onnx.load(str(path))).save(Path(d) / "m.popef")
            files["pyipu"] = str(Path(d) / "m.popef")
        except Exception as e:
            rec["errors"]["pyipu"] = describe(e)
        for engine, f in files.items():
            p = subprocess.run(
                [sys.executable, "-P", "-c", RSS_CHILD, engine, f, str(feeds), str(threads)],
                capture_output=True,
                text=True,
            )
            if p.returncode:
                rec["errors"][engine] = (p.stderr.strip().splitlines() or ["?"])[-1][:200]
            else:
                rec["rss_mb"][engine] = int(p.stdout.split()[-1])
    return rec


def warm_up() -> None:
    """One small pyipu compile and ORT session, so that the first model's compile time and
    session creation do not include imports and one-time set-up."""
    from models import matmul_model

    model = matmul_model(8)
    compile_model(model)
    ort_session(model, 1)


def main(argv: list[str] | None = None) -> int:
    from arch_zoo import NAMES
    from arch_zoo.export import EXPORTERS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", nargs="*", default=list(NAMES), choices=list(NAMES))
    ap.add_argument("--exporters", nargs="*", default=list(EXPORTERS), choices=list(EXPORTERS))
    ap.add_argument("--threads", nargs="*", type=int, default=[1])
    ap.add_argument("--budget", type=float, default=1.5, help="seconds per engine and case")
    ap.add_argument("--quick", action="store_true", help="two rounds: a smoke run")
    ap.add_argument("--rss", action="store_true", help="peak RSS per engine instead of times")
    ap.add_argument("--json", type=Path, help="write the records here")
    ap.add_argument("--render", type=Path, help="print the tables of an earlier --json file")
    args = ap.parse_args(argv)
    if args.render:
        records = json.loads(args.render.read_text())
        threads = sorted({int(t) for r in records for t in r.get("times", {})})
        print(table(records, threads))
        return 0
    os.environ.setdefault("TORCH_LOGS", "-all")
    warm_up()
    records = []
    for name in args.models:
        for exporter in args.exporters:
            if args.rss:
                rec = rss_case(name, exporter, args.threads[0])
                print(name, exporter, rec["rss_mb"], rec["errors"] or "", flush=True)
            else:
                rec = run_case(name, exporter, args.threads, args.budget, args.quick)
                shown = {
                    t: {k: f"{v * 1e3:.2f}" for k, v in m.items()} for t, m in rec["times"].items()
                }
                print(
                    name, exporter, shown,
                    {k: v for k, v in rec.items() if k.endswith("_error")},
                    rec["errors"] or "",
                    flush=True,
                )  # fmt: skip
            records.append(rec)
            if args.json:
                args.json.write_text(json.dumps(records, indent=1))
    if not args.rss:
        print(table(records, args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
