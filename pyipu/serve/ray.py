"""`pyipu serve` on Ray Serve: replicas of a model repository across the nodes of a Ray cluster,
with Ray's routing and autoscaling. Needs the `serve-ray` extra: `pip install pyipu[serve-ray]`.

Each replica loads the whole repository into its own ModelManager (one Runner per model
version) and forwards every request to it, so batching is the runtime's dynamic batching inside
each replica; Ray Serve only routes requests to replicas (no `@serve.batch` on top). HTTP goes
through Ray Serve's proxy to `PyipuReplica.__call__` (KServe v2 routes, JSON and binary
tensors, decoded by pyipu.serve.protocol); Python callers use a DeploymentHandle:

    from pyipu.serve.ray import RayServeConfig, deploy
    handle = deploy(RayServeConfig("models", num_replicas=2))
    y = handle.infer.remote("mlp", {"X": x}).result()["Y"]

docs/serving.md ("Scale-out on Ray Serve") describes the commands and options."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pyipu.errors import ConfigError, Error
from pyipu.serve.errors import (
    BadRequestError,
    ModelNotFoundError,
    RayNotInstalledError,
    UnauthorizedError,
    public_message,
    status_of,
)

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

# The KServe extensions a replica implements: no repository load/unload (each replica owns its
# models; a redeploy reloads them everywhere).
EXTENSIONS = ["binary_tensor_data", "model_configuration"]
DEPLOYMENT = "PyipuReplica"
log = logging.getLogger("pyipu.serve")
_MODEL_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([^/]+))?(?:/(ready|config|infer))?")


def import_serve() -> Any:
    """ray.serve, or a RayNotInstalledError saying what to install."""
    try:
        from ray import serve
    except ImportError as e:
        raise RayNotInstalledError(
            f"pyipu.serve.ray needs Ray Serve ({e}): pip install pyipu[serve-ray]"
        ) from e
    return serve


@dataclass
class RayServeConfig:
    repository: str  # the same path on every node (a shared or copied folder)
    num_replicas: int | None = 1  # fixed replica count; None with autoscaling_config
    autoscaling_config: dict[str, Any] | None = None  # Ray Serve's AutoscalingConfig fields
    replica_cpus: float = 1.0  # ray_actor_options num_cpus; default compute threads per model
    max_ongoing_requests: int = 64  # per replica: room for the runtime to batch requests
    max_queued_requests: int = -1  # per caller; more get 503 from Ray Serve (-1: unbounded)
    max_replicas_per_node: int | None = None
    token: str | None = None  # bearer token on every HTTP route but the health probes
    max_body_bytes: int = 64 << 20
    grace_s: float = 30.0  # a stopping replica lets accepted requests finish this long
    ray_actor_options: dict[str, Any] = field(default_factory=dict)  # merged over num_cpus

    def __post_init__(self) -> None:
        # replicas run in other working directories (and on other nodes)
        self.repository = os.path.abspath(self.repository)

    def deployment_options(self) -> dict[str, Any]:
        if (self.num_replicas is None) == (self.autoscaling_config is None):
            raise ConfigError("give one of num_replicas and autoscaling_config")
        if self.num_replicas is not None and self.num_replicas < 1:
            raise ConfigError(f"num_replicas {self.num_replicas} must be at least 1")
        if self.replica_cpus <= 0 or self.max_ongoing_requests < 1:
            raise ConfigError("replica_cpus and max_ongoing_requests must be positive")
        options: dict[str, Any] = {
            "name": DEPLOYMENT,
            "max_ongoing_requests": self.max_ongoing_requests,
            "max_queued_requests": self.max_queued_requests,
            "ray_actor_options": {"num_cpus": self.replica_cpus, **self.ray_actor_options},
            "graceful_shutdown_timeout_s": self.grace_s,
        }
        if self.num_replicas is not None:
            options["num_replicas"] = self.num_replicas
        else:
            options["autoscaling_config"] = self.autoscaling_config
        if self.max_replicas_per_node is not None:
            options["max_replicas_per_node"] = self.max_replicas_per_node
        return options


class PyipuReplica:
    """One Ray Serve replica: the repository's models on their Runners, KServe v2 over HTTP
    (`__call__`) and a handle API (`infer`, `ready`, `metadata`, `model_metadata`)."""

    def __init__(self, config: RayServeConfig) -> None:
        from pyipu.serve.metrics import Metrics
        from pyipu.serve.models import ModelManager
        from pyipu.serve.repository import Repository

        self.config = config
        threads = max(1, int(config.replica_cpus))
        self.models = ModelManager(Repository(config.repository), config.grace_s, threads)
        self.metrics = Metrics(self.models.runner_stats)
        self.models.load_all()

    # --- handle API ---------------------------------------------------------------------------
    async def infer(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        outputs: list[str] | None = None,
        version: str | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, np.ndarray]:
        """Run one request; the outputs by name (all, or those asked for). Errors are the
        server's typed errors (BadRequestError, ModelNotFoundError, OverloadedError, ...)."""
        from pyipu.serve.protocol import DATATYPES, InferRequest, RequestedOutput

        if not isinstance(inputs, dict) or not inputs:
            raise BadRequestError("inputs must be a non-empty dict of NumPy arrays")
        arrays = {}
        for name, a in inputs.items():
            if not isinstance(a, np.ndarray) or a.dtype not in DATATYPES.values():
                raise BadRequestError(f"input {name!r} must be a NumPy array of a KServe datatype")
            # arrays from Ray's object store are read-only; the runtime takes writable ones
            arrays[name] = np.require(a, requirements=["C", "W"])
        if timeout_s is not None and not timeout_s > 0:
            raise BadRequestError(f"timeout_s {timeout_s!r} must be positive")
        req = InferRequest(inputs=arrays, timeout_s=timeout_s)
        if outputs is not None:
            req.outputs = [RequestedOutput(n) for n in outputs]
        loaded = self.models.find(model, version)
        return await loaded.infer(req, self.metrics, "ray")

    def ready(self, model: str | None = None, version: str | None = None) -> bool:
        if model is None:
            return True
        try:
            self.models.find(model, version)
        except Error:
            return False
        return True

    def metadata(self) -> dict[str, Any]:
        from pyipu.serve.models import server_metadata

        return server_metadata(EXTENSIONS)

    def model_metadata(self, model: str, version: str | None = None) -> dict[str, Any]:
        return self.models.metadata(self.models.find(model, version))

    # --- HTTP (through Ray Serve's proxy) -------------------------------------------------------
    async def __call__(self, request: Request) -> Response:
        from pyipu.serve.http_server import OPEN_PATHS

        path = request.url.path
        root = request.scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        try:
            if self.config.token is not None and path not in OPEN_PATHS:
                given = request.headers.get("Authorization", "")
                if not hmac.compare_digest(given.encode(), f"Bearer {self.config.token}".encode()):
                    raise UnauthorizedError("missing or wrong bearer token")
            return await self._route(request, request.method, path)
        except Exception as e:
            status = status_of(e)[0]
            if status == 500:
                log.error("internal error", exc_info=e, extra={"fields": {"path": path}})
            return _json({"error": public_message(e)}, status)

    async def _route(self, request: Request, method: str, path: str) -> Response:
        if method == "GET" and path in ("/v2/health/live", "/v2/health/ready"):
            return _json({path.rsplit("/", 1)[1]: True})
        if method == "GET" and path == "/v2":
            return _json(self.metadata())
        if method == "GET" and path == "/metrics":
            from starlette.responses import Response

            text = await asyncio.to_thread(self.metrics.render)
            return Response(text, media_type="text/plain; charset=utf-8")
        match = _MODEL_PATH.fullmatch(path)
        if match is None:
            raise ModelNotFoundError(f"no route {method} {path}")
        name, version, verb = match.groups()
        if verb == "infer" and method == "POST":
            return await self._infer_http(request, name, version)
        if method != "GET" or verb == "infer":
            raise ModelNotFoundError(f"no route {method} {path}")
        if verb == "ready":
            try:
                self.models.find(name, version)
            except Error as e:
                status = status_of(e)[0]
                if status == 404:
                    return _json({"ready": False}, 400 if isinstance(e, BadRequestError) else 404)
                raise
            return _json({"ready": True})
        model = self.models.find(name, version)
        if verb == "config":
            return _json(model.config_document())
        return _json(self.models.metadata(model))

    async def _infer_http(self, request: Request, name: str, version: str | None) -> Response:
        from starlette.responses import Response

        from pyipu.serve.protocol import HEADER_LENGTH, infer_http

        model = self.models.find(name, version)
        limit = self.config.max_body_bytes
        declared = request.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return _json({"error": f"request body exceeds {limit} bytes"}, 413)
        body = await request.body()
        if len(body) > limit:
            return _json({"error": f"request body exceeds {limit} bytes"}, 413)
        payload, header_len = await infer_http(
            model, body, request.headers.get(HEADER_LENGTH), limit, self.metrics, asyncio.to_thread
        )
        if header_len is None:
            return Response(payload, media_type="application/json")
        return Response(
            payload,
            media_type="application/octet-stream",
            headers={HEADER_LENGTH: str(header_len)},
        )

    def __del__(self) -> None:
        # Ray Serve calls this when it stops a replica: in-flight requests get grace_s to finish
        models = getattr(self, "models", None)
        if models is not None:
            models.close()


def _json(doc: Any, status: int = 200) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse(doc, status_code=status)


def build(config: RayServeConfig) -> Any:
    """The Ray Serve application (`serve.run` it, or `serve build` a config from it)."""
    serve = import_serve()
    options = config.deployment_options()
    try:
        deployment = serve.deployment(PyipuReplica, **options)
    except (ValueError, TypeError) as e:  # Ray's checks (pydantic) of the options
        raise ConfigError(f"Ray Serve refused the deployment options: {e}") from e
    return deployment.bind(config)


def deploy(
    config: RayServeConfig,
    *,
    name: str = "pyipu",
    http_host: str = "127.0.0.1",
    http_port: int = 8000,
    route_prefix: str = "/",
) -> Any:
    """Start Ray Serve on the connected cluster (ray.init first, or it starts a local one),
    deploy the repository and return the deployment's handle once every replica is ready."""
    serve = import_serve()
    serve.start(http_options={"host": http_host, "port": http_port})
    handle = serve.run(build(config), name=name, route_prefix=route_prefix)
    _wait_for_proxies(serve, timeout_s=120.0)
    return handle


def _wait_for_proxies(serve: Any, timeout_s: float) -> None:
    """Until no HTTP proxy is starting: serve.run returns once the replicas are, while the proxy
    of a node that just got its first replica may still be starting (and answer 404 until it
    has the routes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        proxies = serve.status().proxies
        if proxies and all(status != "STARTING" for status in proxies.values()):
            return
        time.sleep(0.2)
    log.warning("HTTP proxies not ready", extra={"fields": {"timeout_s": timeout_s}})
