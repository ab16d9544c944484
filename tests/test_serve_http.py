"""`pyipu serve` over HTTP with tritonclient.http: health, metadata, inference (JSON and binary
tensors) against NumPy, requested outputs, the repository API, errors and the token."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serve_helpers import mlp_model, mlp_reference, need_serve, running, standard_repo

need_serve()
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    repo = standard_repo(tmp_path_factory.mktemp("repo"))
    with running(repo) as s:
        yield s


@pytest.fixture
def client(server: Any) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")


def raw(server: Any, method: str, path: str, body: bytes = b"", headers: Any = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def infer_input(name: str, array: np.ndarray, dt: str, binary: bool = True) -> Any:
    i = httpclient.InferInput(name, list(array.shape), dt)
    i.set_data_from_numpy(array, binary_data=binary)
    return i


def test_health_and_metadata(client: Any, server: Any) -> None:
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "pyipu" and "binary_tensor_data" in meta["extensions"]
    assert client.is_model_ready("mlp") and client.is_model_ready("mlp", "2")
    assert not client.is_model_ready("mlp", "1")  # only the highest version is loaded
    assert not client.is_model_ready("nope")
    m = client.get_model_metadata("mlp")
    assert m["versions"] == ["2"]
    assert m["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [2, 16]}]
    assert m["outputs"] == [{"name": "Y", "datatype": "FP32", "shape": [2, 8]}]
    s = client.get_model_metadata("scale")
    assert s["inputs"][0]["shape"] == [-1, 3]  # the batching dim is dynamic
    multi = client.get_model_metadata("multi")
    assert [t["datatype"] for t in multi["inputs"]] == ["FP32", "INT64", "FP16"]


@pytest.mark.parametrize("binary", [True, False])
def test_infer_matches_numpy(client: Any, binary: bool) -> None:
    _, w = mlp_model(seed=2)
    x = np.random.default_rng(3).standard_normal((6, 16)).astype(np.float32)  # 3 batches
    out = httpclient.InferRequestedOutput("Y", binary_data=binary)
    result = client.infer("mlp", [infer_input("X", x, "FP32", binary)], outputs=[out])
    np.testing.assert_allclose(result.as_numpy("Y"), mlp_reference(x, w), rtol=1e-5, atol=1e-5)
    # version 1 is not loaded; version 2 by name is
    with pytest.raises(InferenceServerException, match="no loaded version"):
        client.infer("mlp", [infer_input("X", x, "FP32")], model_version="1")
    r2 = client.infer("mlp", [infer_input("X", x, "FP32")], model_version="2")
    np.testing.assert_array_equal(r2.as_numpy("Y"), result.as_numpy("Y"))


def test_dtypes_and_requested_outputs(client: Any) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    i = np.arange(8, dtype=np.int64).reshape(2, 4) * (1 << 40)
    h = (np.arange(8, dtype=np.float16) / 4).reshape(2, 4)
    inputs = [
        infer_input("X", x, "FP32"),
        infer_input("I", i, "INT64", False),
        infer_input("H", h, "FP16"),
    ]
    result = client.infer("multi", inputs)  # no outputs named: all of them
    np.testing.assert_array_equal(result.as_numpy("Y"), 2 * x)
    np.testing.assert_array_equal(result.as_numpy("J"), i + 1)
    assert result.as_numpy("G").dtype == np.float16
    np.testing.assert_array_equal(result.as_numpy("G"), h + h)
    only = client.infer("multi", inputs, outputs=[httpclient.InferRequestedOutput("J")])
    assert only.as_numpy("J") is not None and only.as_numpy("Y") is None
    assert [o["name"] for o in only.get_response()["outputs"]] == ["J"]


def test_dynamic_batching_any_rows(client: Any) -> None:
    for rows in (1, 3, 4, 9):
        x = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
        y = client.infer("scale", [infer_input("X", x, "FP32")]).as_numpy("Y")
        np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6)


def test_json_body_by_hand(server: Any) -> None:
    body = {
        "id": "req-7",
        "inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "data": [[1, 2, 3]]}],
    }
    status, data = raw(server, "POST", "/v2/models/scale/infer", json.dumps(body).encode())
    assert status == 200, data
    doc = json.loads(data)
    assert doc["id"] == "req-7" and doc["model_name"] == "scale"
    assert doc["outputs"][0]["data"] == [3.0, 5.0, 7.0]


def bad(server: Any, body: Any, path: str = "/v2/models/mlp/infer", **headers: str) -> Any:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, data = raw(server, "POST", path, payload, headers)
    return status, json.loads(data)["error"]


X_OK = {"name": "X", "shape": [2, 16], "datatype": "FP32", "data": [0.0] * 32}


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 400, "not valid JSON"),
        ([1, 2], 400, "JSON object"),
        ({"inputs": []}, 400, "non-empty"),
        ({"inputs": [{**X_OK, "datatype": "FP8"}]}, 400, "not supported"),
        ({"inputs": [{**X_OK, "datatype": "INT32", "data": [0] * 32}]}, 400, "expects FP32"),
        ({"inputs": [{**X_OK, "shape": [2, 15]}]}, 400, "values for shape"),
        ({"inputs": [{**X_OK, "shape": [2, 8], "data": [0.0] * 16}]}, 400, "expected shape"),
        ({"inputs": [{**X_OK, "shape": [2, -16]}]}, 400, "bad dimension"),
        ({"inputs": [{**X_OK, "data": ["a"] * 32}]}, 400, "is not FP32"),
        ({"inputs": [{**X_OK, "name": "Z"}]}, 400, "unknown input 'Z'"),
        ({"inputs": [X_OK, X_OK]}, 400, "given twice"),
        ({"inputs": [X_OK], "outputs": [{"name": "Q"}]}, 400, "unknown output 'Q'"),
        ({"inputs": [{k: v for k, v in X_OK.items() if k != "data"}]}, 400, "neither"),
    ],
)
def test_malformed_requests(server: Any, body: Any, status: int, words: str) -> None:
    got, message = bad(server, body)
    assert got == status and words in message, message


def test_missing_input_and_binary_errors(server: Any) -> None:
    status, message = bad(server, {"inputs": [{**X_OK, "name": "X"}]}, "/v2/models/multi/infer")
    assert status == 400 and "missing inputs" in message
    spec = {
        "name": "X",
        "shape": [2, 16],
        "datatype": "FP32",
        "parameters": {"binary_data_size": 128},
    }
    header = json.dumps({"inputs": [spec]}).encode()
    for tail, length, words in [
        (b"\0" * 100, len(header), "ends before"),
        (b"\0" * 130, len(header), "belong to no input"),
        (b"\0" * 128, len(header) + 500, "Inference-Header-Content-Length"),
        (b"\0" * 128, -3, "Inference-Header-Content-Length"),
    ]:
        status, message = bad(
            server, header + tail, **{"Inference-Header-Content-Length": str(length)}
        )
        assert status == 400 and words in message, message
    ok_status, _ = raw(
        server,
        "POST",
        "/v2/models/mlp/infer",
        header + b"\0" * 128,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert ok_status == 200


def test_unknown_model_and_version(server: Any, client: Any) -> None:
    status, message = bad(server, {"inputs": [X_OK]}, "/v2/models/nope/infer")
    assert status == 404 and "nope" in message
    assert raw(server, "GET", "/v2/models/nope")[0] == 404
    assert raw(server, "GET", "/v2/models/mlp/versions/7")[0] == 404
    assert raw(server, "GET", "/v2/models/mlp/versions/x1")[0] == 400
    assert raw(server, "GET", "/v2/models/..%2F..%2Fetc")[0] in (400, 404)
    assert raw(server, "GET", "/v2/nothing")[0] == 404


def test_oversize_body(tmp_path: Path) -> None:
    repo = standard_repo(tmp_path)
    with running(repo, max_body_bytes=4096) as s:
        body = json.dumps({"inputs": [{**X_OK, "data": [0.5] * 32}]}).encode() + b" " * 5000
        status, data = raw(s, "POST", "/v2/models/mlp/infer", body)
        assert status == 413 and "exceeds" in json.loads(data)["error"]
        assert raw(s, "GET", "/v2/health/live")[0] == 200


def test_repository_api(client: Any, server: Any) -> None:
    index = {(m["name"], m["version"]): m["state"] for m in client.get_model_repository_index()}
    assert index[("mlp", "2")] == "READY" and index[("mlp", "1")] == "UNAVAILABLE"
    client.unload_model("multi")
    assert not client.is_model_ready("multi")
    with pytest.raises(InferenceServerException, match="not loaded"):
        client.get_model_metadata("multi")
    client.load_model("multi")
    assert client.is_model_ready("multi")
    with pytest.raises(InferenceServerException, match="invalid model name"):
        client.load_model("..")
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.load_model("absent")


def test_token(tmp_path: Path) -> None:
    repo = standard_repo(tmp_path)
    with running(repo, token="s3cret") as s:
        url = f"127.0.0.1:{s.http_port}"
        anon = httpclient.InferenceServerClient(url)
        assert anon.is_server_live()  # health needs no token
        with pytest.raises(InferenceServerException, match="bearer token"):
            anon.get_model_metadata("mlp")
        assert raw(s, "GET", "/metrics")[0] == 401
        assert raw(s, "GET", "/v2", headers={"Authorization": "Bearer wrong"})[0] == 401
        ok = anon.get_model_metadata("mlp", headers={"Authorization": "Bearer s3cret"})
        assert ok["name"] == "mlp"


def test_large_json_request(client: Any) -> None:
    """Bodies over 256 KiB are decoded and encoded off the event loop: same answers."""
    x = np.random.default_rng(9).standard_normal((30000, 3)).astype(np.float32)
    out = httpclient.InferRequestedOutput("Y", binary_data=False)
    y = client.infer("scale", [infer_input("X", x, "FP32", False)], outputs=[out]).as_numpy("Y")
    np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6)
