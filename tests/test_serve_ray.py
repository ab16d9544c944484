"""pyipu.serve.ray on a two-node Ray cluster on loopback (ray.cluster_utils.Cluster): HTTP with
tritonclient.http and the handle API against a local Runner, one replica per node, malformed
requests, a replica killed under load, `pyipu serve --ray`, and the typed error without Ray."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serve_helpers import need_serve, standard_repo, wait_for

need_serve()
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from pyipu.serve.errors import BadRequestError, ModelNotFoundError, RayNotInstalledError  # noqa: E402

if os.environ.get("CI") == "true":  # CI installs the serve-ray extra: its absence fails there
    import ray  # noqa: F401
try:
    from ray import serve  # noqa: F401

    HAVE_RAY = True
except ImportError:
    HAVE_RAY = False
need_ray = pytest.mark.skipif(not HAVE_RAY, reason="pip install pyipu[serve-ray]")
APP = "pyipu"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two Ray nodes of one CPU each and the repository deployed with one replica per node."""
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from pyipu.serve.ray import RayServeConfig, deploy

    repo = standard_repo(tmp_path_factory.mktemp("repo"))
    node = {"num_cpus": 1, "object_store_memory": 80 << 20}
    c = Cluster(initialize_head=True, head_node_args=node)
    c.add_node(**node)
    cwd = os.getcwd()
    try:
        # Ray puts the driver's working directory on its workers' sys.path: from a source
        # checkout the replicas would import the uncompiled source tree instead of pyipu
        os.chdir(repo)
        try:
            ray.init(address=c.address, log_to_driver=False)
        finally:
            os.chdir(cwd)
        port = free_port()
        config = RayServeConfig(str(repo), num_replicas=2, max_replicas_per_node=1)
        handle = deploy(config, name=APP, http_port=port)
        c.port, c.handle, c.repo = port, handle, repo
        yield c
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            c.shutdown()


def replicas() -> dict[str, str]:
    """The running replica actors: name -> node id."""
    from ray.util.state import list_actors

    alive = list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
    return {a.name: a.node_id for a in alive if a.name.startswith(f"SERVE_REPLICA::{APP}#")}


def infer_input(name: str, array: np.ndarray, dt: str, binary: bool = True) -> Any:
    i = httpclient.InferInput(name, list(array.shape), dt)
    i.set_data_from_numpy(array, binary_data=binary)
    return i


def raw(port: int, method: str, path: str, body: bytes = b"", headers: Any = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def local_runner_output(repo: Path, model: str, version: int, x: np.ndarray) -> np.ndarray:
    from pyipu.compiler import Compiler, CompilerOptions
    from pyipu.runtime import Runner

    executable = Compiler.compile(
        str(repo / model / str(version) / "model.onnx"), None, CompilerOptions()
    )
    runner = Runner(executable)
    try:
        y = np.empty((x.shape[0], 8), np.float32)
        runner.execute({"X": x}, {"Y": y})
        return y
    finally:
        runner.close()


@need_ray
@pytest.mark.timeout(400)
def test_http_and_handle_match_a_local_runner(cluster: Any) -> None:
    nodes = set(replicas().values())
    assert len(nodes) == 2, f"replicas on {nodes}"
    client = httpclient.InferenceServerClient(f"127.0.0.1:{cluster.port}")
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("mlp") and not client.is_model_ready("mlp", "1")
    assert not client.is_model_ready("nope")
    assert client.get_server_metadata()["extensions"] == [
        "binary_tensor_data",
        "model_configuration",
    ]
    meta = client.get_model_metadata("scale")
    assert meta["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 3]}]
    assert client.get_model_config("scale")["dynamic_batching"]

    x = np.random.default_rng(3).standard_normal((6, 16)).astype(np.float32)  # 3 batches
    want = local_runner_output(cluster.repo, "mlp", 2, x)
    for binary in (True, False):
        out = httpclient.InferRequestedOutput("Y", binary_data=binary)
        r = client.infer("mlp", [infer_input("X", x, "FP32", binary)], outputs=[out])
        np.testing.assert_array_equal(r.as_numpy("Y"), want)
    handle = cluster.handle
    assert handle.ready.remote("mlp").result() and not handle.ready.remote("mlp", "1").result()
    assert handle.model_metadata.remote("scale").result() == meta
    assert handle.metadata.remote().result()["name"] == "pyipu"
    got = cluster.handle.infer.remote("mlp", {"X": x}).result()
    assert list(got) == ["Y"]
    np.testing.assert_array_equal(got["Y"], want)
    # several requests at once: both replicas answer, each with the right rows
    rows = [np.full((k + 1, 3), k, np.float32) for k in range(8)]
    futures = [cluster.handle.infer.remote("scale", {"X": r}) for r in rows]
    for r, f in zip(rows, futures, strict=True):
        np.testing.assert_array_equal(f.result()["Y"], 2 * r + 1)
    multi = client.infer(
        "multi",
        [
            infer_input("X", np.ones((2, 4), np.float32), "FP32"),
            infer_input("I", np.arange(8, dtype=np.int64).reshape(2, 4), "INT64", binary=False),
            infer_input("H", np.full((2, 4), 1.5, np.float16), "FP16"),
        ],
        outputs=[httpclient.InferRequestedOutput("J")],
    )
    np.testing.assert_array_equal(multi.as_numpy("J"), np.arange(1, 9).reshape(2, 4))
    assert multi.as_numpy("Y") is None


@need_ray
@pytest.mark.timeout(120)
def test_malformed_requests_get_400(cluster: Any) -> None:
    port = cluster.port
    path = "/v2/models/scale/infer"
    cases = {
        b"{not json": 400,
        b'{"inputs": []}': 400,
        b'{"inputs": [{"name": "X", "datatype": "FP64", "shape": [1, 3], "data": [1, 2, 3]}]}': 400,
        b'{"inputs": [{"name": "Z", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}': 400,
        b'{"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3]}]}': 400,
    }
    for body, want in cases.items():
        status, data = raw(port, "POST", path, body)
        assert status == want, (body, status, data)
        assert b'"error"' in data
    assert raw(port, "POST", "/v2/models/nope/infer", b"{}")[0] == 404
    assert raw(port, "GET", "/v2/models/-bad")[0] == 400
    assert raw(port, "GET", "/v2/nowhere")[0] == 404
    # binary sizes that do not add up
    header = (
        b'{"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 3], '
        b'"parameters": {"binary_data_size": 12}}]}'
    )
    length = {"Inference-Header-Content-Length": str(len(header))}
    status, data = raw(port, "POST", path, header + b"\0" * 8, length)
    assert status == 400, data
    # the handle raises the server's typed errors
    with pytest.raises(BadRequestError, match="FP64"):
        cluster.handle.infer.remote("scale", {"X": np.ones((1, 3))}).result()
    with pytest.raises(ModelNotFoundError):
        cluster.handle.infer.remote("nope", {"X": np.ones((1, 3), np.float32)}).result()
    ok = cluster.handle.infer.remote("scale", {"X": np.ones((1, 3), np.float32)}).result()
    np.testing.assert_array_equal(ok["Y"], np.full((1, 3), 3, np.float32))


@need_ray
@pytest.mark.timeout(400)
def test_replica_killed_under_load(cluster: Any) -> None:
    """Every request under load either succeeds with the right result or gets an error with a
    message; none hangs; Ray Serve starts a new replica and the server answers again."""
    import ray

    port = cluster.port
    before = replicas()
    assert len(before) == 2
    stop = threading.Event()
    outcomes: list[tuple[str, str]] = []
    lock = threading.Lock()

    def load(k: int) -> None:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=60)
        x = np.full((1, 3), k, np.float32)
        while not stop.is_set():
            try:
                y = client.infer("scale", [infer_input("X", x, "FP32")]).as_numpy("Y")
                result = ("ok", "") if np.array_equal(y, 2 * x + 1) else ("wrong", str(y))
            except InferenceServerException as e:
                result = ("error", f"{e.status()} {e.message()}")
            with lock:
                outcomes.append(result)

    threads = [threading.Thread(target=load, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: len(outcomes) >= 20, 60, "requests before the kill")
    victim = sorted(before)[0]
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    served = len(outcomes)
    wait_for(lambda: len(outcomes) >= served + 40, 120, "requests after the kill")
    stop.set()
    for t in threads:
        t.join(90)
        assert not t.is_alive(), "a request hung"
    kinds = {kind for kind, _ in outcomes}
    assert "wrong" not in kinds, [o for o in outcomes if o[0] == "wrong"][:3]
    # a request in flight on the killed replica: Ray's proxy answers 500 (or 503 while it
    # has no replica to route to), never a wrong result or a hang
    errors = [message for kind, message in outcomes if kind == "error"]
    assert all(message[:1] == "5" and message[4:].strip() for message in errors), errors
    assert len(errors) < len(outcomes) // 2, errors[:5]
    # a replacement replica starts; both nodes serve again
    wait_for(lambda: len(replicas()) == 2 and victim not in replicas(), 180, "a new replica")
    assert len(set(replicas().values())) == 2
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    for k in range(10):
        x = np.full((2, 3), k, np.float32)
        np.testing.assert_array_equal(
            client.infer("scale", [infer_input("X", x, "FP32")]).as_numpy("Y"), 2 * x + 1
        )


@need_ray
@pytest.mark.timeout(300)
def test_cli_deploys_on_the_cluster(cluster: Any) -> None:
    """`pyipu serve --ray --ray-address ADDR` redeploys the application (with a bearer token),
    serves until SIGTERM, then deletes it."""
    from ray import serve

    cmd = [sys.executable, "-P", "-m", "pyipu", "serve", str(cluster.repo), "--ray"]
    cmd += ["--ray-address", cluster.address, "--http-port", str(cluster.port)]
    cmd += ["--num-replicas", "1", "--max-ongoing-requests", "16", "--token", "t0k"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=cluster.repo)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("pyipu serve: ray"):
                break
        else:
            pytest.fail(f"pyipu serve --ray exited with {proc.wait()}")
        assert f"http 127.0.0.1:{cluster.port} replicas 1" in line
        wait_for(lambda: len(replicas()) == 1, 120, "one replica")
        assert raw(cluster.port, "GET", "/v2/health/ready")[0] == 200  # probes need no token
        assert raw(cluster.port, "GET", "/v2/models/mlp")[0] == 401
        auth = {"Authorization": "Bearer t0k"}
        status, body = raw(cluster.port, "GET", "/v2/models/mlp", headers=auth)
        assert status == 200 and json.loads(body)["versions"] == ["2"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert APP not in serve.status().applications


def test_without_ray_a_typed_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyipu.cli.main import main
    from pyipu.serve.ray import RayServeConfig, build

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as if not installed
    with pytest.raises(RayNotInstalledError, match=r"pip install pyipu\[serve-ray\]"):
        build(RayServeConfig(str(tmp_path)))
    assert main(["serve", str(tmp_path), "--ray"]) == 1
    assert "pip install pyipu[serve-ray]" in capsys.readouterr().err


@need_ray
def test_options_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pyipu.cli.main import main
    from pyipu.errors import ConfigError
    from pyipu.serve.ray import RayServeConfig, build

    options = RayServeConfig(str(tmp_path), replica_cpus=2).deployment_options()
    assert options["ray_actor_options"] == {"num_cpus": 2}
    assert options["num_replicas"] == 1 and options["max_ongoing_requests"] == 64
    scaling = {"min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 8}
    assert (
        "autoscaling_config"
        in RayServeConfig(
            str(tmp_path), num_replicas=None, autoscaling_config=scaling
        ).deployment_options()
    )
    bad = [
        RayServeConfig(str(tmp_path), autoscaling_config=scaling),  # both
        RayServeConfig(str(tmp_path), num_replicas=None),  # neither
        RayServeConfig(str(tmp_path), num_replicas=0),
        RayServeConfig(str(tmp_path), num_replicas=None, autoscaling_config={"min_replicas": -1}),
    ]
    for config in bad:
        with pytest.raises(ConfigError):
            build(config)
    assert main(["serve", str(tmp_path), "--ray", "--autoscaling", "{min"]) == 1
    assert "--autoscaling is not valid JSON" in capsys.readouterr().err
