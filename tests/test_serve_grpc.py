"""`pyipu serve` over gRPC with tritonclient.grpc: the same endpoints as HTTP, and each error
as its gRPC status code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serve_helpers import mlp_model, mlp_reference, need_serve, running, standard_repo

need_serve()
import grpc  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
from tritonclient.grpc import service_pb2 as pb  # noqa: E402
from tritonclient.grpc import service_pb2_grpc as pb_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    repo = standard_repo(tmp_path_factory.mktemp("repo"))
    with running(repo, max_body_bytes=1 << 20) as s:
        yield s


@pytest.fixture
def client(server: Any) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


@pytest.fixture
def stub(server: Any) -> Iterator[Any]:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def infer_input(name: str, array: np.ndarray, dt: str) -> Any:
    i = grpcclient.InferInput(name, list(array.shape), dt)
    i.set_data_from_numpy(array)
    return i


def test_health_and_metadata(client: Any) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata().name == "pyipu"
    assert client.is_model_ready("mlp") and not client.is_model_ready("mlp", "1")
    meta = client.get_model_metadata("scale", as_json=True)
    assert meta["inputs"] == [{"name": "X", "datatype": "FP32", "shape": ["-1", "3"]}]
    config = client.get_model_config("scale", as_json=True)["config"]
    assert (
        config["dynamic_batching"]["max_queue_delay_microseconds"] == "2000"
    )  # uint64 as JSON text


def test_infer_matches_numpy(client: Any) -> None:
    _, w = mlp_model(seed=2)
    x = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float32)
    result = client.infer("mlp", [infer_input("X", x, "FP32")], request_id="r1")
    assert result.get_response().id == "r1"
    np.testing.assert_allclose(result.as_numpy("Y"), mlp_reference(x, w), rtol=1e-5, atol=1e-5)


def test_dtypes_and_requested_outputs(client: Any) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    i = -np.arange(8, dtype=np.int64).reshape(2, 4)
    h = np.arange(8, dtype=np.float16).reshape(2, 4)
    inputs = [
        infer_input("X", x, "FP32"),
        infer_input("I", i, "INT64"),
        infer_input("H", h, "FP16"),
    ]
    result = client.infer(
        "multi",
        inputs,
        outputs=[grpcclient.InferRequestedOutput("G"), grpcclient.InferRequestedOutput("J")],
    )
    assert [o.name for o in result.get_response().outputs] == ["G", "J"]
    np.testing.assert_array_equal(result.as_numpy("J"), i + 1)
    np.testing.assert_array_equal(result.as_numpy("G"), h + h)
    assert result.as_numpy("Y") is None


def test_typed_contents(stub: Any) -> None:
    """Values in InferTensorContents instead of raw_input_contents."""
    request = pb.ModelInferRequest(model_name="scale")
    t = request.inputs.add(name="X", datatype="FP32", shape=[2, 3])
    t.contents.fp32_contents.extend([0, 1, 2, 3, 4, 5])
    response = stub.ModelInfer(request)
    y = np.frombuffer(response.raw_output_contents[0], np.float32)
    np.testing.assert_array_equal(y, 2 * np.arange(6, dtype=np.float32) + 1)


def code_of(call: Any, request: Any, **kw: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call(request, **kw)
    return info.value.code()


def test_status_codes(stub: Any) -> None:
    ok = pb.ModelInferRequest(model_name="mlp")
    ok.inputs.add(name="X", datatype="FP32", shape=[2, 16])
    ok.raw_input_contents.append(b"\0" * 128)
    assert stub.ModelInfer(ok).model_version == "2"
    invalid = grpc.StatusCode.INVALID_ARGUMENT

    def variant(edit: Any) -> Any:
        r = pb.ModelInferRequest()
        r.CopyFrom(ok)
        edit(r)
        return r

    assert code_of(stub.ModelInfer, variant(lambda r: setattr(r, "model_name", "nope"))) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert code_of(stub.ModelInfer, variant(lambda r: setattr(r, "model_version", "9"))) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert code_of(stub.ModelInfer, variant(lambda r: setattr(r, "model_name", "../x"))) == invalid
    assert code_of(stub.ModelInfer, variant(lambda r: r.raw_input_contents.append(b"x"))) == (
        invalid
    )
    assert code_of(stub.ModelInfer, variant(lambda r: r.inputs[0].shape.append(1))) == invalid
    assert (
        code_of(stub.ModelInfer, variant(lambda r: setattr(r.inputs[0], "datatype", "FP64")))
        == invalid
    )
    assert code_of(stub.ModelInfer, variant(lambda r: setattr(r.inputs[0], "name", "Q"))) == (
        invalid
    )
    assert code_of(stub.ModelInfer, variant(lambda r: r.outputs.add(name="Q"))) == invalid
    big = variant(lambda r: r.raw_input_contents.__setitem__(0, b"\0" * (2 << 20)))
    assert code_of(stub.ModelInfer, big) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert code_of(stub.ModelMetadata, pb.ModelMetadataRequest(name="nope")) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert stub.ServerLive(pb.ServerLiveRequest()).live  # still serving


def test_repository_api(client: Any) -> None:
    index = {(m.name, m.version): m.state for m in client.get_model_repository_index().models}
    assert index[("scale", "1")] == "READY"
    client.unload_model("scale")
    assert not client.is_model_ready("scale")
    x = np.zeros((1, 3), np.float32)
    with pytest.raises(InferenceServerException, match="not loaded"):
        client.infer("scale", [infer_input("X", x, "FP32")])
    client.load_model("scale")
    np.testing.assert_array_equal(
        client.infer("scale", [infer_input("X", x, "FP32")]).as_numpy("Y"), x + 1
    )
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.load_model("absent")


def test_token(tmp_path: Path) -> None:
    with running(standard_repo(tmp_path), token="t0k") as s:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        assert client.is_server_live() and client.is_server_ready()
        with pytest.raises(InferenceServerException, match="bearer token") as info:
            client.get_model_metadata("mlp")
        assert info.value.status() == "StatusCode.UNAUTHENTICATED"
        meta = client.get_model_metadata("mlp", headers={"authorization": "Bearer t0k"})
        assert meta.name == "mlp"
