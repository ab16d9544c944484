"""The KServe v2 gRPC service (`inference.GRPCInferenceService`) on grpc.aio, with the message
classes and service descriptor that tritonclient ships."""

from __future__ import annotations

import functools
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from pyipu.errors import Error
from pyipu.serve.errors import BadRequestError, UnauthorizedError, UnavailableError, status_of
from pyipu.serve.protocol import decode_grpc, encode_grpc
from pyipu.serve.repository import check_name

if TYPE_CHECKING:
    from pyipu.serve.server import Server

log = logging.getLogger("pyipu.serve")
T = TypeVar("T")
_SERVICE = "inference.GRPCInferenceService"
_METHODS = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods
_REQUEST_TYPES = {m.name: getattr(pb, m.input_type.name) for m in _METHODS}
_RESPONSE_TYPES = {m.name: getattr(pb, m.output_type.name) for m in _METHODS}


def _handled(
    check_token: bool = True,
) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
    """Token check, and typed errors turned into the matching gRPC status."""

    def wrap(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        @functools.wraps(fn)
        async def method(self: Servicer, request: Any, context: Any) -> T:
            try:
                if check_token:
                    self._check_token(context)
                if isinstance(request, bytes):  # registered by start_grpc: parse it here
                    try:
                        request = _REQUEST_TYPES[fn.__name__].FromString(request)
                    except DecodeError as e:
                        raise BadRequestError(f"not a valid {fn.__name__} request: {e}") from e
                return await fn(self, request, context)
            except Exception as e:
                _status, grpc_name, _kind = status_of(e)
                message = str(e) if isinstance(e, Error) else f"internal error: {type(e).__name__}"
                fields = {"protocol": "grpc", "method": fn.__name__, "status": grpc_name}
                if grpc_name == "INTERNAL":
                    log.error("internal error", exc_info=e, extra={"fields": fields})
                else:
                    log.info("request refused", extra={"fields": {**fields, "error": message}})
                await context.abort(getattr(grpc.StatusCode, grpc_name), message)
                raise AssertionError("unreachable: abort raises") from e

        return method

    return wrap


class Servicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.manager = server.models

    def _check_token(self, context: Any) -> None:
        token = self.server.config.token
        if token is None:
            return
        given = dict(context.invocation_metadata()).get("authorization", "")
        if not hmac.compare_digest(str(given).encode(), f"Bearer {token}".encode()):
            raise UnauthorizedError("missing or wrong bearer token")

    def _model(self, name: str, version: str) -> Any:
        return self.manager.find(name, version)

    @_handled(check_token=False)
    async def ServerLive(self, request: Any, context: Any) -> Any:  # noqa: N802
        return pb.ServerLiveResponse(live=True)

    @_handled(check_token=False)
    async def ServerReady(self, request: Any, context: Any) -> Any:  # noqa: N802
        return pb.ServerReadyResponse(ready=self.server.accepting)

    @_handled()
    async def ModelReady(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            self._model(request.name, request.version)
        except Error:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)

    @_handled()
    async def ServerMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
        return pb.ServerMetadataResponse(**self.server.metadata())

    @_handled()
    async def ModelMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
        doc = self.server.model_metadata(self._model(request.name, request.version))
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=doc["name"],
            versions=doc["versions"],
            platform=doc["platform"],
            inputs=[tensor(**t) for t in doc["inputs"]],
            outputs=[tensor(**t) for t in doc["outputs"]],
        )

    @_handled()
    async def ModelConfig(self, request: Any, context: Any) -> Any:  # noqa: N802
        from google.protobuf import json_format
        from tritonclient.grpc import model_config_pb2

        doc = self.server.model_config(self._model(request.name, request.version))
        config = json_format.ParseDict(doc, model_config_pb2.ModelConfig())
        return pb.ModelConfigResponse(config=config)

    @_handled()
    async def ModelInfer(self, request: Any, context: Any) -> Any:  # noqa: N802
        if not self.server.accepting:
            raise UnavailableError("the server is shutting down")
        model = self._model(request.model_name, request.model_version)
        req = decode_grpc(request, self.server.config.max_body_bytes)
        remaining = context.time_remaining()  # the client's deadline, if it set one
        if remaining is not None and (req.timeout_s is None or remaining < req.timeout_s):
            req.timeout_s = max(remaining, 1e-3)
        results = await model.infer(req, self.server.metrics, "grpc")
        response = pb.ModelInferResponse(
            model_name=model.name, model_version=model.version, id=request.id
        )
        encode_grpc(response, req, results)
        return response

    @_handled()
    async def RepositoryIndex(self, request: Any, context: Any) -> Any:  # noqa: N802
        entries = await self.server.run_blocking(self.manager.index)
        if request.ready:
            entries = [e for e in entries if e["state"] == "READY"]
        index = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(models=[index(**e) for e in entries])

    @_handled()
    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:  # noqa: N802
        await self.server.run_blocking(self.manager.load, check_name(request.model_name))
        return pb.RepositoryModelLoadResponse()

    @_handled()
    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:  # noqa: N802
        await self.server.run_blocking(self.manager.unload, check_name(request.model_name))
        return pb.RepositoryModelUnloadResponse()


async def start_grpc(server: Server, host: str, port: int) -> tuple[Any, int]:
    """A started grpc.aio server and the port it bound."""
    limit = server.config.max_body_bytes
    aio = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", max(limit, 1 << 30)),
            ("grpc.so_reuseport", 0),
        ]
    )
    # The messages are parsed in the methods (not by grpc's deserializer), so that bytes that
    # are no message of the method's type get INVALID_ARGUMENT rather than UNKNOWN.
    servicer = Servicer(server)
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name), response_serializer=_RESPONSE_TYPES[name].SerializeToString
        )
        for name in _REQUEST_TYPES
        if name in Servicer.__dict__
    }
    aio.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, handlers),))
    bound = aio.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind gRPC to {host}:{port}")
    await aio.start()
    return aio, bound
