"""`pyipu serve` under load: concurrent clients and dynamic batching seen in /metrics, the
in-flight limit (429 / RESOURCE_EXHAUSTED), timeouts (504 / DEADLINE_EXCEEDED), a client that
goes away, graceful shutdown with requests in flight, and the command line with SIGTERM."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from models import scale_model
from serve_helpers import (
    add_model,
    metric,
    need_serve,
    running,
    slow_model,
    standard_repo,
    wait_for,
)

need_serve()
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from pyipu.runtime import Runner, RuntimeConfig  # noqa: E402

SLOW_DEPTH = 1500  # about 0.5-1 s a request on one thread


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = standard_repo(tmp_path_factory.mktemp("repo"))
    add_model(repo, "slow", slow_model(SLOW_DEPTH), config={"max_inflight": 2, "num_threads": 1})
    add_model(
        repo,
        "slowt",
        slow_model(SLOW_DEPTH),
        config={"request_timeout_s": 0.2, "num_threads": 1},
    )
    add_model(repo, "wide", slow_model(SLOW_DEPTH), config={"max_inflight": 16, "num_threads": 1})
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Any]:
    with running(repo) as s:
        yield s


def http_infer(port: int, model: str, x: np.ndarray) -> np.ndarray:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=120)
    i = httpclient.InferInput("X", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return client.infer(model, [i]).as_numpy("Y")


def grpc_infer(port: int, model: str, x: np.ndarray) -> np.ndarray:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    i = grpcclient.InferInput("X", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return client.infer(model, [i]).as_numpy("Y")


def slow_reference(x: np.ndarray, depth: int = SLOW_DEPTH) -> np.ndarray:
    with Runner(_compile(slow_model(depth)), RuntimeConfig(num_threads=1)) as r:
        return r.run(None, {"X": x})[0]


def _compile(model: Any) -> Any:
    from pyipu.compiler import Compiler

    return Compiler.compile(model)


def in_threads(fns: list[Any]) -> list[Any]:
    """Run each callable on its own thread; their results or exceptions, in order."""
    results: list[Any] = [None] * len(fns)

    def run(i: int) -> None:
        try:
            results[i] = fns[i]()
        except Exception as e:
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return results


def test_concurrent_clients_are_batched(server: Any) -> None:
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 3)).astype(np.float32) for _ in range(160)]
    calls = []
    for k in range(16):
        mine = xs[k::16]
        infer = http_infer if k % 2 else grpc_infer
        port = server.http_port if k % 2 else server.grpc_port

        def call(mine: list = mine, infer: Any = infer, port: int = port) -> list:
            return [infer(port, "scale", x) for x in mine]

        calls.append(call)
    results = in_threads(calls)
    for k, got in enumerate(results):
        assert not isinstance(got, Exception), got
        for x, y in zip(xs[k::16], got, strict=True):
            np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6)
    text = http.client.HTTPConnection("127.0.0.1", server.http_port)
    text.request("GET", "/metrics")
    body = text.getresponse().read().decode()
    done = metric(body, "pyipu_serve_runtime_requests_completed_total", model="scale")
    iterations = metric(body, "pyipu_serve_runtime_iterations_total", model="scale")
    assert done >= 160
    # One-row requests of a 4-row batch: merged requests share iterations.
    assert iterations < done, (iterations, done)
    assert metric(body, "pyipu_serve_requests_total", model="scale", protocol="grpc") >= 80
    assert metric(body, "pyipu_serve_request_duration_seconds_count", model="scale") >= 160
    assert "pyipu_serve_request_batch_size_bucket" in body


def test_a_lone_request_does_not_wait_for_other_rows(tmp_path: Path) -> None:
    # A batch timeout far beyond the request timeout: a lone request that waited for rows of
    # other requests would be answered 504. A timeout of 0 (Triton's max_queue_delay 0) runs
    # a partial batch with the rows queued.
    for name, timeout_us in (("long", 600_000_000), ("zero", 0)):
        config = {"batching_dim": 0, "batch_timeout_us": timeout_us, "request_timeout_s": 10}
        add_model(tmp_path, name, scale_model((4, 3)), config={**config, "num_threads": 1})
    with running(tmp_path) as s:
        for name in ("long", "zero"):
            for rows in (1, 5):
                x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
                np.testing.assert_array_equal(http_infer(s.http_port, name, x), 2 * x + 1)
                np.testing.assert_array_equal(grpc_infer(s.grpc_port, name, x), 2 * x + 1)


def test_backpressure(server: Any) -> None:
    model = server.models.get("slow")
    x = np.ones((1, 256), np.float32)
    first = [
        lambda: http_infer(server.http_port, "slow", x),
        lambda: grpc_infer(server.grpc_port, "slow", x),
    ]
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.extend(in_threads(first)))
    t.start()
    wait_for(lambda: model.inflight == 2, what="two requests in flight")
    with pytest.raises(InferenceServerException) as info:
        http_infer(server.http_port, "slow", x)
    assert info.value.status() == "429" and "max_inflight" in str(info.value)
    with pytest.raises(InferenceServerException) as info:
        grpc_infer(server.grpc_port, "slow", x)
    assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    t.join(300)
    expected = slow_reference(x)
    for y in out:
        np.testing.assert_array_equal(y, expected)
    assert model.inflight == 0


def test_timeout(server: Any) -> None:
    x = np.ones((1, 256), np.float32)
    with pytest.raises(InferenceServerException) as info:
        http_infer(server.http_port, "slowt", x)
    assert info.value.status() == "504" and "no result within" in str(info.value)
    with pytest.raises(InferenceServerException) as info:
        grpc_infer(server.grpc_port, "slowt", x)
    assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    model = server.models.get("slowt")
    wait_for(lambda: model.inflight == 0, what="cancelled requests to complete")
    stats = model.stats()
    assert stats["requests_failed"] == 2 and stats["requests_submitted"] == 2


def test_request_timeout_parameter(server: Any) -> None:
    """The request's own timeout (microseconds, Triton's parameter) and a gRPC deadline."""
    model = server.models.get("wide")
    x = np.ones((1, 256), np.float32)
    before = model.stats()["requests_failed"]
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    i = httpclient.InferInput("X", [1, 256], "FP32")
    i.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as info:
        http.infer("wide", [i], timeout=100_000)
    assert info.value.status() == "504" and "within 0.1 s" in str(info.value)
    rpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    g = grpcclient.InferInput("X", [1, 256], "FP32")
    g.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as info:
        rpc.infer("wide", [g], timeout=100_000)
    assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    with pytest.raises(InferenceServerException) as info:
        rpc.infer("wide", [g], client_timeout=0.2)
    assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    wait_for(lambda: model.inflight == 0, what="cancelled requests to complete")
    assert model.stats()["requests_failed"] == before + 3
    with pytest.raises(InferenceServerException, match="timeout"):
        http.infer("wide", [i], timeout=-5)


def test_client_goes_away(server: Any) -> None:
    model = server.models.get("wide")
    before = model.stats()["requests_completed"]
    x = np.ones((1, 256), np.float32)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "X",
                    "shape": [1, 256],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ]
        }
    ).encode()
    body = header + x.tobytes()
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.http_port)) as sock:
            sock.sendall(
                b"POST /v2/models/wide/infer HTTP/1.1\r\nHost: x\r\n"
                + f"Inference-Header-Content-Length: {len(header)}\r\n".encode()
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            wait_for(lambda: model.inflight >= 1, what="the request in flight")
    wait_for(lambda: model.inflight == 0, timeout=120, what="abandoned requests to complete")
    assert model.stats()["requests_completed"] == before + 3
    np.testing.assert_array_equal(http_infer(server.http_port, "wide", x), slow_reference(x))


def test_unload_with_requests_in_flight(server: Any) -> None:
    model = server.models.get("wide")
    x = np.full((1, 256), 0.5, np.float32)
    out: list[Any] = []
    calls = [
        lambda: http_infer(server.http_port, "wide", x),
        lambda: grpc_infer(server.grpc_port, "wide", x),
    ]
    t = threading.Thread(target=lambda: out.extend(in_threads(calls)))
    t.start()
    wait_for(lambda: model.inflight == 2, what="two requests in flight")
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    client.unload_model("wide")  # returns once both have completed
    assert model.inflight == 0 and not client.is_model_ready("wide")
    t.join(300)
    expected = slow_reference(x)
    for y in out:
        assert not isinstance(y, Exception), y
        np.testing.assert_array_equal(y, expected)
    with pytest.raises(InferenceServerException, match="not loaded"):
        http_infer(server.http_port, "wide", x)
    client.load_model("wide")
    assert client.is_model_ready("wide")


@pytest.mark.slow
def test_graceful_shutdown_with_requests_in_flight(repo: Path) -> None:
    x = np.random.default_rng(2).standard_normal((1, 256)).astype(np.float32)
    with running(repo) as s:
        model = s.models.get("wide")
        calls = [lambda: http_infer(s.http_port, "wide", x)] * 3
        calls += [lambda: grpc_infer(s.grpc_port, "wide", x)] * 3
        out: list[Any] = []
        t = threading.Thread(target=lambda: out.extend(in_threads(calls)))
        t.start()
        wait_for(lambda: model.inflight == 6, what="six requests in flight")
        s.stop()  # returns once every accepted request has completed
        assert model.inflight == 0
        t.join(300)
        expected = slow_reference(x)
        assert len(out) == 6
        for y in out:
            assert not isinstance(y, Exception), y
            np.testing.assert_array_equal(y, expected)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", s.http_port), timeout=5)


def test_command_line_sigterm(tmp_path: Path) -> None:
    repo = standard_repo(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-P",
            "-m",
            "pyipu",
            "serve",
            str(repo),
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--log-level",
            "info",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("pyipu serve: http"):
                break
        else:
            pytest.fail("".join(lines))
        http_port = int(line.split()[3].rsplit(":", 1)[1])
        assert any(json.loads(entry)["msg"] == "model loaded" for entry in lines[:-1])
        x = np.ones((2, 3), np.float32)
        np.testing.assert_array_equal(http_infer(http_port, "scale", x), 3 * x)
        with pytest.raises(InferenceServerException):
            http_infer(http_port, "scale", np.ones((2, 4), np.float32))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        logs = [json.loads(line) for line in err.splitlines()]
        assert logs[-1]["msg"] == "stopped"
        refused = [e for e in logs if e["msg"] == "request refused"]
        assert len(refused) == 1 and refused[0]["status"] == 400
        assert (
            refused[0]["path"] == "/v2/models/scale/infer"
            and "expected shape" in (refused[0]["error"])
        )
    finally:
        proc.kill()
        proc.wait()


def test_load_benchmark_harness(tmp_path: Path) -> None:
    """benchmarks/serve_load.py on the tiny model, a fraction of a second a point, so that it
    cannot rot: every point measured on both servers, outputs equal (no timing asserted)."""
    pytest.importorskip("onnxruntime")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "serve_load.py"
    out = subprocess.run(
        [sys.executable, "-P", str(script), "--models", "tiny", "--clients", "1,2",
         "--seconds", "0.2", "--json", str(tmp_path / "serve.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    tiny = json.loads((tmp_path / "serve.json").read_text())["models"]["tiny"]
    points = {(p["server"], p["clients"]): p for p in tiny["points"]}
    assert set(points) == {
        ("pyipu", 1),
        ("pyipu", 2),
        ("pyipu_batching_off", 2),
        ("onnxruntime", 1),
        ("onnxruntime", 2),
    }
    assert all(p["rps"] > 0 and 0 < p["p50_ms"] <= p["p99_ms"] for p in points.values())
    assert tiny["max_rel_diff"] == 0.0
    assert "| tiny | 2 |" in out.stdout
