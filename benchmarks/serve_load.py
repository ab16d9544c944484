"""Load generator for `pyipu serve`, beside an equivalent KServe v2 server on ONNX Runtime.

    python benchmarks/serve_load.py [--seconds 5] [--clients 1,8,64] [--threads 2]

Both servers run in their own process, load the same ONNX model (an MLP, [rows, 256] ->
[rows, 256], random weights) and speak the same protocol over the same HTTP library (aiohttp,
with pyipu.serve.protocol's decoding and encoding): pyipu through `pyipu serve` (one Runner,
dynamic batching along dim 0 in batches of 8 rows), ONNX Runtime through a small aiohttp app
(`--ort-server`) that runs `InferenceSession.run` on a thread pool as large as the client
count. N client threads (tritonclient.http, binary tensors) each send one-row requests back to
back for `--seconds`; the table gives requests/s and the p50/p99 latency per server and N.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH, HIDDEN, BATCH = 256, 1024, 8


def mlp(rows: int | str) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((WIDTH, HIDDEN)) / 16).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, WIDTH)) / 32).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W1"], ["H"]),
            helper.make_node("Relu", ["H"], ["R"]),
            helper.make_node("MatMul", ["R", "W2"], ["Y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (rows, WIDTH))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (rows, WIDTH))],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def ort_server(model_path: str, port: int, threads: int, workers: int) -> None:
    """A KServe v2 infer endpoint on ONNX Runtime, with pyipu serve's HTTP stack."""
    import onnxruntime as ort
    from aiohttp import web

    from pyipu.serve.protocol import HEADER_LENGTH, decode_http, encode_http

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    pool = ThreadPoolExecutor(workers)

    async def infer(request: web.Request) -> web.Response:
        req = decode_http(await request.read(), request.headers.get(HEADER_LENGTH), 64 << 20)
        loop = asyncio.get_running_loop()
        (y,) = await loop.run_in_executor(pool, session.run, ["Y"], req.inputs)
        body, n = encode_http("mlp", "1", req, {"Y": y})
        headers = {HEADER_LENGTH: str(n)} if n is not None else {}
        return web.Response(body=body, headers=headers, content_type="application/octet-stream")

    async def ready(request: web.Request) -> web.Response:
        return web.json_response({"ready": True})

    app = web.Application()
    app.router.add_post("/v2/models/mlp/infer", infer)
    app.router.add_get("/v2/health/ready", ready)
    print("ready", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def wait_ready(port: int, proc: subprocess.Popen) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    deadline = time.monotonic() + 120
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


def load(port: int, clients: int, seconds: float) -> tuple[float, float, float]:
    """Requests/s, p50 and p99 latency (ms) of `clients` threads sending back to back."""
    import tritonclient.http as httpclient

    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop = time.monotonic() + seconds
    errors: list[BaseException] = []

    def client(k: int) -> None:
        c = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=120)
        x = np.random.default_rng(k).standard_normal((1, WIDTH)).astype(np.float32)
        i = httpclient.InferInput("X", [1, WIDTH], "FP32")
        i.set_data_from_numpy(x)
        out = [httpclient.InferRequestedOutput("Y")]
        try:
            while time.monotonic() < stop:
                t = time.perf_counter()
                c.infer("mlp", [i], outputs=out)
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


def rows_per_iteration(port: int) -> str:
    """How many requests' rows the runtime ran per iteration, from /metrics."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith(("pyipu_serve_runtime_iterations_total", "pyipu_serve_runtime_req")):
            values[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
    done = values["pyipu_serve_runtime_requests_completed_total"]
    iters = values["pyipu_serve_runtime_iterations_total"]
    return f"  (all points: {done:.0f} one-row requests in {iters:.0f} iterations)"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--clients", default="1,8,64")
    p.add_argument("--threads", type=int, default=2, help="compute threads of each server")
    p.add_argument("--ort-server", nargs=3, metavar=("MODEL", "PORT", "WORKERS"))
    args = p.parse_args()
    if args.ort_server:
        path, port, workers = args.ort_server
        ort_server(path, int(port), args.threads, int(workers))
        return 0
    counts = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        (repo / "mlp" / "1").mkdir(parents=True)
        onnx.save(mlp(BATCH), str(repo / "mlp" / "1" / "model.onnx"))
        (repo / "mlp" / "config.json").write_text(
            f'{{"batching_dim": 0, "num_threads": {args.threads}, "max_inflight": 256, '
            '"batch_timeout_us": 500}'
        )
        ort_model = str(Path(tmp) / "mlp_dynamic.onnx")
        onnx.save(mlp("rows"), ort_model)
        port = free_port()
        servers = {
            "pyipu serve": [
                sys.executable,
                "-P",
                "-m",
                "pyipu",
                "serve",
                str(repo),
                "--http-port",
                str(port),
                "--grpc-port",
                "-1",
            ],
            "onnxruntime": [
                sys.executable,
                __file__,
                "--threads",
                str(args.threads),
                "--ort-server",
                ort_model,
                str(port),
                str(max(counts)),
            ],
        }
        print(
            f"MLP {WIDTH}-{HIDDEN}-{WIDTH}, one-row requests, {args.threads} compute threads, "
            f"{args.seconds:g} s per point, {os.cpu_count()} CPUs"
        )
        print(f"{'server':<12} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
        for name, cmd in servers.items():
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
            try:
                wait_ready(port, proc)
                load(port, 1, 1.0)  # warm-up
                for n in counts:
                    rps, p50, p99 = load(port, n, args.seconds)
                    print(f"{name:<12} {n:>7} {rps:>9.0f} {p50:>8.2f} {p99:>8.2f}", flush=True)
                if name == "pyipu serve":
                    print(rows_per_iteration(port))
            finally:
                proc.terminate()
                proc.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
