"""Load generator for `pyipu serve`, beside an equivalent KServe v2 server on ONNX Runtime.

    python benchmarks/serve_load.py [--models seed,resnet50,tiny,mlp] [--clients 1,8,64]
                                    [--seconds 3] [--threads 2] [--json serve.json]

Both servers run in their own process, one at a time, load the same ONNX model
(benchmarks/serve_models.py) and speak the same protocol over the same HTTP library (aiohttp,
with pyipu.serve.protocol's decoding and encoding): pyipu through `pyipu serve` (one Runner
per model, dynamic batching along dim 0 with a 500 µs batch timeout where the model has a batch
dim), ONNX Runtime through a small aiohttp app (`--ort-server`) that runs
`InferenceSession.run` on a thread pool as large as the client count. Each gets `--threads`
compute threads. N client threads (tritonclient.http, binary tensors) each send one request
(one row, one image, one [256, 256] matrix) back to back for `--seconds`; every request
started is finished and counted. The table gives requests/s and p50/p99 latency per model,
server and N, pyipu's throughput over ORT's, and, at the largest N, the same `pyipu serve`
on a copy of the model compiled for one request per iteration without dynamic batching
("batching off") and the gain of batching over it. Each server's outputs for one request are
compared with the other's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_models import MODELS, ServeModel, mlp  # noqa: E402

BATCH = MODELS["mlp"].batch  # rows per iteration of the batched MLP (serve_ray_load.py)
BATCH_TIMEOUT_US = 500
__all__ = ["BATCH", "free_port", "load", "mlp", "wait_ready"]


def ort_server(model_path: str, port: int, threads: int, workers: int, name: str) -> None:
    """A KServe v2 infer endpoint on ONNX Runtime, with pyipu serve's HTTP stack."""
    import onnxruntime as ort
    from aiohttp import web

    from pyipu.serve.protocol import HEADER_LENGTH, decode_http, encode_http

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    pool = ThreadPoolExecutor(workers)

    async def infer(request: web.Request) -> web.Response:
        req = decode_http(await request.read(), request.headers.get(HEADER_LENGTH), 64 << 20)
        loop = asyncio.get_running_loop()
        ys = await loop.run_in_executor(pool, session.run, names, req.inputs)
        body, n = encode_http(name, "1", req, dict(zip(names, ys, strict=True)))
        headers = {HEADER_LENGTH: str(n)} if n is not None else {}
        return web.Response(body=body, headers=headers, content_type="application/octet-stream")

    async def ready(request: web.Request) -> web.Response:
        return web.json_response({"ready": True})

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post(f"/v2/models/{name}/infer", infer)
    app.router.add_get("/v2/health/ready", ready)
    print("ready", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def wait_ready(port: int, proc: subprocess.Popen) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if client.is_server_ready():
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become ready")


def _inputs(request: dict[str, np.ndarray], seed: int) -> list[Any]:
    import tritonclient.http as httpclient

    out = []
    for name, x in request.items():
        x = x + np.float32(seed * 1e-3)  # a different request per client
        i = httpclient.InferInput(name, list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        out.append(i)
    return out


def load(
    port: int, clients: int, seconds: float, model: ServeModel | None = None, name: str = ""
) -> tuple[float, float, float]:
    """Requests/s, p50 and p99 latency (ms) of `clients` threads sending back to back to
    model `name` (default: the model's own name; the MLP by default)."""
    import tritonclient.http as httpclient

    model = model or MODELS["mlp"]
    name = name or model.name
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop = time.monotonic() + seconds
    errors: list[BaseException] = []
    request = model.request()

    def client(k: int) -> None:
        c = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=600)
        inputs = _inputs(request, k)
        try:
            while time.monotonic() < stop:
                t = time.perf_counter()
                c.infer(name, inputs)
                latencies[k].append(time.perf_counter() - t)
        except BaseException as e:
            errors.append(e)

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    elapsed = time.monotonic() - start
    lat = np.array([v for per in latencies for v in per]) * 1e3
    return len(lat) / elapsed, float(np.percentile(lat, 50)), float(np.percentile(lat, 99))


def probe(port: int, model: ServeModel, name: str) -> np.ndarray:
    """Every output of one request (client 0's), flattened and concatenated by name."""
    import tritonclient.http as httpclient

    c = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=600)
    result = c.infer(name, _inputs(model.request(), 0))
    names = sorted(o["name"] for o in result.get_response()["outputs"])
    return np.concatenate([np.asarray(result.as_numpy(n), np.float64).ravel() for n in names])


def rows_per_iteration(port: int, name: str) -> tuple[float, float]:
    """Requests completed and iterations run by model `name`'s runtime, from /metrics."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    values = {}
    for line in text.splitlines():
        if f'model="{name}"' in line and line.startswith("pyipu_serve_runtime_"):
            values[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
    return (
        values["pyipu_serve_runtime_requests_completed_total"],
        values["pyipu_serve_runtime_iterations_total"],
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(cmd: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
    except BaseException:
        proc.terminate()
        proc.wait(60)
        raise
    return proc


def _point(rows: list[dict], model: str, server: str, n: int, r: tuple) -> None:
    rows.append({"model": model, "server": server, "clients": n, "rps": r[0], "p50_ms": r[1],
                 "p99_ms": r[2]})  # fmt: skip
    print(f"  {server:<16} {n:>3} clients: {r[0]:8.1f} req/s  p50 {r[1]:8.2f} ms  "
          f"p99 {r[2]:8.2f} ms", flush=True)  # fmt: skip


def bench_model(model: ServeModel, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Every point of one model on both servers; the outputs' difference; rows per iteration."""
    counts = [int(c) for c in args.clients.split(",")]
    rows: list[dict] = []
    repo = tmp / model.name / "repo"
    variants = {model.name: (model.batch or 1, model.batch is not None)}
    if model.batch is not None:
        variants[model.name + "_b1"] = (1, False)
    for name, (batch, batching) in variants.items():
        (repo / name / "1").mkdir(parents=True)
        onnx.save(model.build(batch), str(repo / name / "1" / "model.onnx"))
        config: dict[str, Any] = {"num_threads": args.threads, "max_inflight": 256}
        if batching:
            config.update(batching_dim=0, batch_timeout_us=BATCH_TIMEOUT_US)
        (repo / name / "config.json").write_text(json.dumps(config))
    ort_model = str(tmp / model.name / "dynamic.onnx")
    onnx.save(model.build("rows"), ort_model)
    port = free_port()
    py = [sys.executable, "-P", "-m", "pyipu", "serve", str(repo), "--http-port", str(port),
          "--grpc-port", "-1"]  # fmt: skip
    ort = [sys.executable, __file__, "--threads", str(args.threads), "--ort-server", ort_model,
           str(port), str(max(counts)), model.name]  # fmt: skip
    out: dict[str, Any] = {"points": rows}
    warm = min(1.0, args.seconds)  # seconds of one client before the points
    proc = _serve(py, port)
    try:
        load(port, 1, warm, model)  # warm-up
        for n in counts:
            _point(rows, model.name, "pyipu", n, load(port, n, args.seconds, model))
        done, iters = rows_per_iteration(port, model.name)
        out["requests_per_iteration"] = done / iters
        if model.batch is not None:
            b1 = model.name + "_b1"
            load(port, 1, warm, model, b1)
            n = max(counts)
            _point(
                rows, model.name, "pyipu_batching_off", n, load(port, n, args.seconds, model, b1)
            )
        mine = probe(port, model, model.name)
    finally:
        proc.terminate()
        proc.wait(60)
    proc = _serve(ort, port)
    try:
        load(port, 1, warm, model)
        for n in counts:
            _point(rows, model.name, "onnxruntime", n, load(port, n, args.seconds, model))
        theirs = probe(port, model, model.name)
    finally:
        proc.terminate()
        proc.wait(60)
    out["max_rel_diff"] = float(np.max(np.abs(mine - theirs)) / max(np.max(np.abs(theirs)), 1e-30))
    return out


def table(results: dict[str, dict[str, Any]]) -> str:
    """A Markdown table: one row per model and client count."""
    head = ("| model | clients | pyipu req/s | p50 ms | p99 ms | ORT req/s | p50 ms | p99 ms "
            "| pyipu/ORT | batching off req/s | batching gain |")  # fmt: skip
    lines = [head, "|---" * 11 + "|"]
    for model, res in results.items():
        by = {(p["server"], p["clients"]): p for p in res["points"]}
        for n in sorted({p["clients"] for p in res["points"]}):
            py, ort, off = (by.get((s, n)) for s in ("pyipu", "onnxruntime", "pyipu_batching_off"))
            cells = [model, str(n)]
            for p in (py, ort):
                cells += (
                    [f"{p['rps']:.0f}", f"{p['p50_ms']:.2f}", f"{p['p99_ms']:.2f}"]
                    if p
                    else ["–"] * 3
                )
            cells.append(f"{py['rps'] / ort['rps']:.2f}" if py and ort else "–")
            if off and py:
                cells += [f"{off['rps']:.0f}", f"{py['rps'] / off['rps']:.2f}×"]
            else:
                cells += ["–", "–"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"of {','.join(MODELS)}")
    p.add_argument("--seconds", type=float, default=3.0, help="per point")
    p.add_argument("--clients", default="1,8,64")
    p.add_argument("--threads", type=int, default=2, help="compute threads of each server")
    p.add_argument("--json", help="write the points here")
    p.add_argument("--ort-server", nargs=4, metavar=("MODEL", "PORT", "WORKERS", "NAME"))
    args = p.parse_args()
    if args.ort_server:
        path, port, workers, name = args.ort_server
        ort_server(path, int(port), args.threads, int(workers), name)
        return 0
    names = args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    load_avg = os.getloadavg()
    print(f"{args.threads} compute threads per server, {args.seconds:g} s per point, "
          f"{os.cpu_count()} CPUs, load average {load_avg[0]:.1f}", flush=True)  # fmt: skip
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            print(name, flush=True)
            results[name] = bench_model(MODELS[name], args, Path(tmp))
    print()
    print(table(results))
    for name, res in results.items():
        print(f"{name}: pyipu {res['requests_per_iteration']:.2f} requests per iteration over "
              f"its points; outputs max |Δ| / max |ORT| = {res['max_rel_diff']:.1e}")  # fmt: skip
    if args.json:
        doc = {"threads": args.threads, "seconds": args.seconds, "cpus": os.cpu_count(),
               "load_average": load_avg, "batch_timeout_us": BATCH_TIMEOUT_US,
               "models": results}  # fmt: skip
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
