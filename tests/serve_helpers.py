"""Model repositories and a running server for the `pyipu serve` tests."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def need_serve() -> None:
    """Skip without the serve extra, except in CI, where its absence is a failure."""
    for module in (
        "aiohttp",
        "grpc",
        "tritonclient.http",
        "tritonclient.grpc",
        "prometheus_client",
    ):
        if os.environ.get("CI") == "true":
            __import__(module)
        else:
            pytest.importorskip(module, reason="pip install pyipu[serve]")


def mlp_model(seed: int = 0, batch: int = 2) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Y = relu(X @ W1 + B1) @ W2 with random weights; X [batch, 16] -> Y [batch, 8]."""
    rng = np.random.default_rng(seed)
    w = {
        "W1": rng.standard_normal((16, 32)).astype(np.float32) / 4,
        "B1": rng.standard_normal(32).astype(np.float32),
        "W2": rng.standard_normal((32, 8)).astype(np.float32) / 4,
    }
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W1"], ["H"]),
            helper.make_node("Add", ["H", "B1"], ["HB"]),
            helper.make_node("Relu", ["HB"], ["R"]),
            helper.make_node("MatMul", ["R", "W2"], ["Y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (batch, 16))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (batch, 8))],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), w


def mlp_reference(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    return np.maximum(x @ w["W1"] + w["B1"], 0) @ w["W2"]


def multi_model() -> onnx.ModelProto:
    """Three inputs of three dtypes, three outputs: Y = 2X (FP32), J = I + 1 (INT64),
    G = H + H (FP16); [2, 4] each."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["X", "X"], ["Y"]),
            helper.make_node("Add", ["I", "one"], ["J"]),
            helper.make_node("Add", ["H", "H"], ["G"]),
        ],
        "multi",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, (2, 4)),
            helper.make_tensor_value_info("I", TensorProto.INT64, (2, 4)),
            helper.make_tensor_value_info("H", TensorProto.FLOAT16, (2, 4)),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, (2, 4)),
            helper.make_tensor_value_info("J", TensorProto.INT64, (2, 4)),
            helper.make_tensor_value_info("G", TensorProto.FLOAT16, (2, 4)),
        ],
        [numpy_helper.from_array(np.array(1, np.int64), "one")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def slow_model(depth: int = 60, n: int = 256) -> onnx.ModelProto:
    """A chain of `depth` [n, n] MatMuls (tenths of a second a request): X [1, n] -> Y."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    nodes = [helper.make_node("Expand", ["X", "shape"], ["A0"])]
    nodes += [helper.make_node("MatMul", [f"A{i}", "W"], [f"A{i + 1}"]) for i in range(depth)]
    nodes.append(helper.make_node("ReduceMean", [f"A{depth}"], ["Y"], axes=[0], keepdims=1))
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (1, n))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (1, n))],
        [
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(np.array([n, n], np.int64), "shape"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def standard_repo(repo: Path) -> Path:
    """mlp (fixed batch 2, versions 1 and 2: 2 is served), scale (dynamic batching along dim
    0), multi (three dtypes) and slow (a long chain, one request in flight at most)."""
    add_model(repo, "mlp", mlp_model(seed=1)[0], version=1)
    add_model(repo, "mlp", mlp_model(seed=2)[0], version=2, config={"num_threads": 1})
    add_model(
        repo,
        "scale",
        _scale_model(),
        config={"batching_dim": 0, "num_threads": 1, "batch_timeout_us": 2000},
    )
    add_model(repo, "multi", multi_model(), config={"num_threads": 1})
    return repo


def _scale_model() -> onnx.ModelProto:
    """Y = 2X + 1 on [4, 3] batches (rows independent, so dynamic batching applies)."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["X", "two"], ["T"]),
            helper.make_node("Add", ["T", "one"], ["Y"]),
        ],
        "scale",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (4, 3))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (4, 3))],
        [
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def add_model(
    repo: Path, name: str, model: onnx.ModelProto, version: int = 1, config: Any = None
) -> None:
    folder = repo / name / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"))
    if config is not None:
        (repo / name / "config.json").write_text(json.dumps(config))


@contextlib.contextmanager
def running(repo: Path, **options: Any) -> Iterator[Any]:
    """A started server on free ports."""
    from pyipu.serve import Server, ServerConfig

    server = Server(ServerConfig(str(repo), http_port=0, grpc_port=0, **options)).start()
    try:
        yield server
    finally:
        server.stop()


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of a Prometheus text exposition (0 if absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in head for k, v in labels.items()) or not want:
                return float(value)
    return 0.0
