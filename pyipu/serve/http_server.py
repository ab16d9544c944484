"""The KServe v2 HTTP/REST endpoints on aiohttp."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from pyipu.errors import Error
from pyipu.serve.errors import (
    BadRequestError,
    UnauthorizedError,
    UnavailableError,
    public_message,
    status_of,
)
from pyipu.serve.protocol import HEADER_LENGTH, infer_http
from pyipu.serve.repository import check_name

if TYPE_CHECKING:
    from pyipu.serve.server import Server

log = logging.getLogger("pyipu.serve")
OPEN_PATHS = ("/v2/health/live", "/v2/health/ready")  # no token needed (probes)


def _json(doc: Any, status: int = 200) -> web.Response:
    return web.json_response(doc, status=status)


def _error(e: BaseException, request: web.Request) -> web.Response:
    status, _grpc, kind = status_of(e)
    message = public_message(e)
    fields = {"protocol": "http", "path": request.path, "status": status, "kind": kind}
    if status == 500:
        log.error("internal error", exc_info=e, extra={"fields": fields})
    else:
        log.info("request refused", extra={"fields": {**fields, "error": message}})
    return _json({"error": message}, status)


def build_app(server: Server) -> web.Application:
    manager = server.models
    cfg = server.config

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            if cfg.token is not None and request.path not in OPEN_PATHS:
                given = request.headers.get("Authorization", "")
                if not hmac.compare_digest(given.encode(), f"Bearer {cfg.token}".encode()):
                    raise UnauthorizedError("missing or wrong bearer token")
            return await handler(request)
        except web.HTTPException as e:
            if e.status == 413:
                return _json({"error": f"request body exceeds {cfg.max_body_bytes} bytes"}, 413)
            if e.status >= 400:
                return _json({"error": e.reason}, e.status)
            raise
        except Exception as e:
            return _error(e, request)

    async def live(request: web.Request) -> web.Response:
        return _json({"live": True})

    async def ready(request: web.Request) -> web.Response:
        ok = server.accepting
        return _json({"ready": ok}, 200 if ok else 503)

    async def metadata(request: web.Request) -> web.Response:
        return _json(server.metadata())

    def _model(request: web.Request) -> Any:
        return manager.find(request.match_info["name"], request.match_info.get("version"))

    async def model_ready(request: web.Request) -> web.Response:
        try:
            _model(request)
        except Error as e:
            if status_of(e)[0] == 404:
                return _json({"ready": False}, 400 if isinstance(e, BadRequestError) else 404)
            raise
        return _json({"ready": True})

    async def model_metadata(request: web.Request) -> web.Response:
        return _json(server.model_metadata(_model(request)))

    async def model_config(request: web.Request) -> web.Response:
        return _json(server.model_config(_model(request)))

    async def infer(request: web.Request) -> web.Response:
        if not server.accepting:
            raise UnavailableError("the server is shutting down")
        model = _model(request)
        body = await request.read()
        payload, header_len = await infer_http(
            model,
            body,
            request.headers.get(HEADER_LENGTH),
            cfg.max_body_bytes,
            server.metrics,
            server.run_io,
        )
        if header_len is None:
            return web.Response(body=payload, content_type="application/json")
        return web.Response(
            body=payload,
            content_type="application/octet-stream",
            headers={HEADER_LENGTH: str(header_len)},
        )

    async def index(request: web.Request) -> web.Response:
        body = await request.read()
        ready_only = False
        if body:
            try:
                doc = json.loads(body)
            except ValueError as e:
                raise BadRequestError(f"request is not valid JSON: {e}") from e
            ready_only = isinstance(doc, dict) and doc.get("ready") is True
        loop = asyncio.get_running_loop()
        entries = await loop.run_in_executor(None, manager.index)
        if ready_only:
            entries = [e for e in entries if e["state"] == "READY"]
        return _json(entries)

    async def load(request: web.Request) -> web.Response:
        name = check_name(request.match_info["name"])
        await server.run_blocking(manager.load, name)
        return _json({})

    async def unload(request: web.Request) -> web.Response:
        name = check_name(request.match_info["name"])
        await server.run_blocking(manager.unload, name)
        return _json({})

    async def metrics(request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(None, server.metrics.render)
        return web.Response(body=text, content_type="text/plain", charset="utf-8")

    app = web.Application(middlewares=[guard], client_max_size=cfg.max_body_bytes)
    model_paths = ["/v2/models/{name}", "/v2/models/{name}/versions/{version}"]
    app.router.add_get("/v2/health/live", live)
    app.router.add_get("/v2/health/ready", ready)
    app.router.add_get("/v2", metadata)
    app.router.add_get("/metrics", metrics)
    for base in model_paths:
        app.router.add_get(base, model_metadata)
        app.router.add_get(base + "/ready", model_ready)
        app.router.add_get(base + "/config", model_config)
        app.router.add_post(base + "/infer", infer)
    app.router.add_post("/v2/repository/index", index)
    app.router.add_post("/v2/repository/models/{name}/load", load)
    app.router.add_post("/v2/repository/models/{name}/unload", unload)
    return app
