"""`pyipu serve` against hostile input: a few hundred mutated HTTP and gRPC payloads (every answer
a proper status, the server up after), and a repository whose names and symlinks try to reach
files outside it; config.json and config.pbtxt parsing."""

from __future__ import annotations

import http.client
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_fuzz import http_case, mutate_bytes, valid_grpc, valid_http
from serve_helpers import add_model, mlp_model, need_serve, running, standard_repo

need_serve()
import grpc  # noqa: E402
from tritonclient.grpc import service_pb2 as pb  # noqa: E402

from pyipu.errors import ConfigError  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with running(standard_repo(tmp_path_factory.mktemp("repo")), max_body_bytes=1 << 16) as s:
        yield s


def test_http_fuzz(server: Any) -> None:
    rng = random.Random(1234)
    valid, header_len = valid_http()
    seen: dict[int, int] = {}
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    for i in range(300):
        model, body, headers = http_case(rng, i, valid, header_len)
        conn.request("POST", f"/v2/models/{model}/infer", body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        seen[resp.status] = seen.get(resp.status, 0) + 1
        assert resp.status in (200, 400, 404, 413), (resp.status, data[:200])
        if resp.status != 200:
            assert isinstance(json.loads(data)["error"], str)
        if resp.will_close:
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    conn.close()
    assert seen.get(400, 0) > 150, seen  # the mutations mostly break the request
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    conn.request("GET", "/v2/health/ready")
    assert conn.getresponse().status == 200


def test_grpc_fuzz(server: Any) -> None:
    rng = random.Random(99)
    valid = valid_grpc()
    allowed = {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        for _ in range(300):
            try:
                call(mutate_bytes(rng, valid), timeout=60)
            except grpc.RpcError as e:
                assert e.code() in allowed, (e.code(), e.details())
        live = channel.unary_unary(
            "/inference.GRPCInferenceService/ServerLive",
            request_serializer=pb.ServerLiveRequest.SerializeToString,
            response_deserializer=pb.ServerLiveResponse.FromString,
        )
        assert live(pb.ServerLiveRequest()).live


def test_malformed_request_benchmark(repo: Path) -> None:
    """benchmarks/serve_malformed.py on 300 requests per protocol, so that it cannot rot: it
    exits 0 only if every answer was a proper status and the server still serves after."""
    out = subprocess.run(
        [sys.executable, "-P", str(repo / "benchmarks" / "serve_malformed.py"), "--count", "300"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("HTTP  300 mutated requests: ") and "400: " in lines[0], lines
    assert lines[1].startswith("gRPC  300 mutated requests: ") and "INVALID_ARGUMENT" in lines[1]
    assert "server peak RSS" in lines[2] and lines[-1].startswith("OK:"), lines


def test_repository_stays_inside(tmp_path: Path) -> None:
    from pyipu.serve.errors import BadRequestError, ModelNotFoundError
    from pyipu.serve.repository import Repository

    outside = tmp_path / "outside"
    add_model(outside, "secret", mlp_model()[0])
    repo = tmp_path / "repo"
    add_model(repo, "ok", mlp_model()[0])
    os.symlink(outside / "secret", repo / "evil")  # a model folder outside
    (repo / "half" / "1").mkdir(parents=True)  # a version whose file points outside
    os.symlink(outside / "secret" / "1" / "model.onnx", repo / "half" / "1" / "model.onnx")
    (repo / "link").mkdir()
    os.symlink(outside / "secret" / "1", repo / "link" / "2")  # a version folder outside
    r = Repository(repo)
    assert r.models() == ["half", "link", "ok"]
    assert r.versions("ok") == ["1"] and r.versions("half") == [] and r.versions("link") == []
    for name in ("evil", "half", "link"):
        with pytest.raises(ModelNotFoundError):
            r.model_file(name, "1" if name != "link" else "2")
    for name in ("..", "../outside", "a/b", ".hidden", "", "x" * 200, "/etc"):
        with pytest.raises(BadRequestError):
            r.versions(name)
    for version in ("0", "-1", "01", "1/../1", "a"):
        with pytest.raises(BadRequestError):
            r.model_file("ok", version)
    with running(repo) as s:
        assert [m.name for m in s.models.loaded()] == ["ok"]
        conn = http.client.HTTPConnection("127.0.0.1", s.http_port)
        conn.request("POST", "/v2/repository/models/evil/load")
        resp = conn.getresponse()
        assert resp.status == 404 and "leaves the repository" in json.loads(resp.read())["error"]


def test_model_configs(tmp_path: Path) -> None:
    from pyipu.serve.repository import Repository

    add_model(tmp_path, "a", mlp_model()[0], config={"batching_dim": 0, "max_inflight": 3})
    add_model(tmp_path, "b", mlp_model()[0])
    (tmp_path / "b" / "config.pbtxt").write_text(
        'name: "b"\ndynamic_batching { max_queue_delay_microseconds: 500 }\n'
        "instance_group [{ count: 2 }]\nversion_policy { latest { num_versions: 2 } }\n"
        'parameters { key: "max_inflight" value { string_value: "7" } }\n'
    )
    r = Repository(tmp_path)
    a = r.config("a")
    assert a.batching_dim == 0 and a.max_inflight == 3
    b = r.config("b")
    assert (
        b.batching_dim,
        b.batch_timeout_us,
        b.replication_factor,
        b.max_versions,
        b.max_inflight,
    ) == (0, 500, 2, 2, 7)
    for bad in (
        {"batching_dim": 99},
        {"max_inflight": 0},
        {"nope": 1},
        {"request_timeout_s": -1},
        [1],
    ):
        (tmp_path / "a" / "config.json").write_text(json.dumps(bad))
        with pytest.raises(ConfigError):
            r.config("a")
    (tmp_path / "b" / "config.pbtxt").write_text("dynamic_batching { bogus: 1 }")
    with pytest.raises(ConfigError):
        r.config("b")


def test_command_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pyipu.cli.main import main

    assert main(["serve", str(tmp_path / "missing")]) == 1
    assert "pyipu serve: error:" in capsys.readouterr().err
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(b"junk")
    assert main(["serve", str(tmp_path), "--http-port", "0", "--grpc-port", "0"]) == 1
    assert "not a readable ONNX model" in capsys.readouterr().err
    (tmp_path / "m" / "config.json").write_text('{"max_inflight": "many"}')
    assert main(["serve", str(tmp_path), "--http-port", "0", "--grpc-port", "0"]) == 1
    assert "max_inflight" in capsys.readouterr().err


def test_command_line_without_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyipu.cli.main import main

    for name in [m for m in sys.modules if m.startswith("pyipu.serve.")]:
        if name != "pyipu.serve.cli":
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "aiohttp", None)
    assert main(["serve", "."]) == 2
    assert "pip install pyipu[serve]" in capsys.readouterr().err
