"""Malformed requests against one `pyipu serve`: every answer a proper status, the server up after.

    python benchmarks/serve_malformed.py [--count 10000] [--seed 0]

Starts `pyipu serve` in its own process on the tests' standard repository (tests/serve_helpers.py:
scale, mlp, multi; a 64 KiB body limit) and sends `--count` mutated infer requests over HTTP and
as many over gRPC (tests/serve_fuzz.py: JSON documents with junk fields, binary bodies and
serialized ModelInferRequests with random bytes changed, cut off or inserted), counting the
answers' statuses. Then it checks that the server is live and ready over both protocols and
answers a valid request correctly, and reads the server's peak RSS (VmHWM). Exit status 1 when
an answer is a 5xx or a gRPC INTERNAL/UNKNOWN, an error body is not `{"error": "..."}`, or the
server died or stopped answering; else 0.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from serve_fuzz import http_case, mutate_bytes, valid_grpc, valid_http  # noqa: E402
from serve_helpers import standard_repo  # noqa: E402
from serve_load import free_port, wait_ready  # noqa: E402

BAD_GRPC = {"INTERNAL", "UNKNOWN", "UNAVAILABLE", "DATA_LOSS", "UNIMPLEMENTED"}


def http_round(port: int, count: int, rng: random.Random) -> tuple[Counter, list[str]]:
    """Statuses of `count` mutated HTTP infer requests, and what was wrong with any answer."""
    valid, header_len = valid_http()
    seen: Counter = Counter()
    problems: list[str] = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for i in range(count):
        model, body, headers = http_case(rng, i, valid, header_len)
        try:
            conn.request("POST", f"/v2/models/{model}/infer", body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            seen["no answer"] += 1
            problems.append(f"HTTP request {i}: no answer ({type(e).__name__}: {e})")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            continue
        seen[resp.status] += 1
        if resp.status >= 500:
            problems.append(f"HTTP request {i}: {resp.status} {data[:200]!r}")
        elif resp.status != 200:
            try:
                ok = isinstance(json.loads(data)["error"], str)
            except (ValueError, KeyError, TypeError):
                ok = False
            if not ok:
                problems.append(f"HTTP request {i}: {resp.status} without an error document")
        if resp.will_close:
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.close()
    return seen, problems


def grpc_round(port: int, count: int, rng: random.Random) -> tuple[Counter, list[str]]:
    """Status codes of `count` mutated ModelInfer messages (raw bytes: grpc parses nothing on
    the client side), and what was wrong with any answer."""
    import grpc

    valid = valid_grpc()
    seen: Counter = Counter()
    problems: list[str] = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        for i in range(count):
            try:
                call(mutate_bytes(rng, valid), timeout=60)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
                if code in BAD_GRPC:
                    problems.append(f"gRPC request {i}: {code} {e.details()!r}")
            seen[code] += 1
    return seen, problems


def still_serving(http_port: int, grpc_port: int) -> list[str]:
    """What is wrong with the server after the run: health over both protocols and a valid
    request on each (scale: Y = 2X + 1) with the right answer."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    problems = []
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for name, mod, client in (
        ("HTTP", httpclient, httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")),
        ("gRPC", grpcclient, grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")),
    ):
        try:
            if not (client.is_server_live() and client.is_server_ready()):
                problems.append(f"{name}: not live and ready")
            i = mod.InferInput("X", list(x.shape), "FP32")
            i.set_data_from_numpy(x)
            y = client.infer("scale", [i]).as_numpy("Y")
            if y is None or not np.array_equal(y, 2 * x + 1):
                problems.append(f"{name}: wrong answer to a valid request: {y}")
        except Exception as e:
            problems.append(f"{name}: {type(e).__name__}: {e}")
    return problems


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=10000, help="mutated requests per protocol")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        repo = standard_repo(Path(tmp) / "repo")
        http_port, grpc_port = free_port(), free_port()
        cmd = [
            sys.executable,
            "-P",
            "-m",
            "pyipu",
            "serve",
            str(repo),
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
            "--max-body-mb",
            "1",
            "--log-level",
            "error",
        ]
        with open(Path(tmp) / "server.log", "w+") as log:  # a pipe could fill and block it
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
            try:
                wait_ready(http_port, proc)
                start_rss = peak_rss_mb(proc.pid)
                rng = random.Random(args.seed)
                t = time.perf_counter()
                http_seen, problems = http_round(http_port, args.count, rng)
                grpc_seen, grpc_problems = grpc_round(grpc_port, args.count, rng)
                elapsed = time.perf_counter() - t
                problems += grpc_problems
                if proc.poll() is not None:
                    problems.append(f"the server exited with {proc.returncode}")
                else:
                    problems += still_serving(http_port, grpc_port)
                rss = peak_rss_mb(proc.pid) if proc.poll() is None else float("nan")
            finally:
                proc.terminate()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.seek(0)
            err = log.read()

    def fmt(c: Counter) -> str:
        return ", ".join(f"{k}: {v}" for k, v in sorted(c.items(), key=lambda kv: str(kv[0])))

    print(f"HTTP  {args.count} mutated requests: {fmt(http_seen)}")
    print(f"gRPC  {args.count} mutated requests: {fmt(grpc_seen)}")
    print(
        f"{2 * args.count} requests in {elapsed:.1f} s; server peak RSS {rss:.0f} MB "
        f"({start_rss:.0f} MB once ready)"
    )
    for problem in problems[:20]:
        print("PROBLEM", problem)
    if problems:
        if err:
            print("server stderr (last lines):\n" + "\n".join(err.splitlines()[-20:]))
        print(f"FAIL: {len(problems)} problems")
        return 1
    print("OK: every answer a proper status; live, ready and correct after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
