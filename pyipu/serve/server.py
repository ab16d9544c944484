"""The server's lifecycle: load the repository, serve HTTP and gRPC from one asyncio loop on a
background thread, and stop gracefully (stop accepting, finish every accepted request exactly
once, close the runners)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from pyipu.errors import InvalidStateError
from pyipu.serve.cli import TOKEN_ENV
from pyipu.serve.grpc_server import start_grpc
from pyipu.serve.http_server import build_app
from pyipu.serve.metrics import Metrics
from pyipu.serve.models import LoadedModel, ModelManager, server_metadata
from pyipu.serve.repository import Repository

log = logging.getLogger("pyipu.serve")
T = TypeVar("T")
# KServe protocol extensions this server implements (Triton's names).
EXTENSIONS = ["binary_tensor_data", "model_repository", "model_configuration"]


@dataclass
class ServerConfig:
    repository: str
    host: str = "127.0.0.1"
    http_port: int | None = 8000  # None: no HTTP; 0: a free port
    grpc_port: int | None = 8001  # None: no gRPC; 0: a free port
    token: str | None = None  # bearer token required on every endpoint but health
    max_body_bytes: int = 64 << 20  # HTTP body and gRPC message limit
    grace_s: float = 30.0  # how long stop() lets accepted requests finish
    load_models: bool = True  # load every model of the repository at start


class Server:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.models = ModelManager(Repository(config.repository), config.grace_s)
        self.metrics = Metrics(self.models.runner_stats)
        self.accepting = False
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._blocking = ThreadPoolExecutor(2, "pyipu-serve-admin")  # loads, unloads, index
        self._io = ThreadPoolExecutor(2, "pyipu-serve-io")  # decoding large requests
        self._http: web.AppRunner | None = None
        self._grpc: Any = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    # --- endpoints' data (built in pyipu.serve.models, shared with pyipu.serve.ray) ---------
    def metadata(self) -> dict[str, Any]:
        return server_metadata(EXTENSIONS)

    def model_metadata(self, model: LoadedModel) -> dict[str, Any]:
        return self.models.metadata(model)

    def model_config(self, model: LoadedModel) -> dict[str, Any]:
        return model.config_document()

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._blocking, fn, *args)

    async def run_io(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> Server:
        """Load the models, bind the ports and serve on a background thread; returns once the
        server answers (a bind or load error is raised here)."""
        if self._thread is not None:
            raise InvalidStateError("the server was already started")
        if self.config.load_models:
            self.models.load_all()
        started: asyncio.Future | None = None
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            nonlocal started
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._bind())
            except BaseException as e:
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="pyipu-serve", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self.models.close()
            raise failure[0]
        self.accepting = True
        log.info(
            "serving",
            extra={
                "fields": {
                    "http_port": self.http_port,
                    "grpc_port": self.grpc_port,
                    "host": self.config.host,
                }
            },
        )
        return self

    async def _bind(self) -> None:
        cfg = self.config
        if cfg.http_port is not None:
            runner = web.AppRunner(build_app(self), access_log=None, shutdown_timeout=cfg.grace_s)
            await runner.setup()
            self._http = runner
            site = web.TCPSite(runner, cfg.host, cfg.http_port)
            await site.start()
            self.http_port = int(runner.addresses[0][1])
        if cfg.grpc_port is not None:
            self._grpc, self.grpc_port = await start_grpc(self, cfg.host, cfg.grpc_port)

    def stop(self) -> None:
        """Stop accepting, let accepted requests finish (each completes exactly once), close
        the runners. Idempotent; safe from any thread but the server's own."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self.accepting = False
            loop, thread = self._loop, self._thread
            if loop is not None and thread is not None and thread.is_alive():
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result()
                loop.call_soon_threadsafe(loop.stop)
                thread.join()
            self.models.close()
            self._blocking.shutdown(wait=True)
            self._io.shutdown(wait=True)
            self._stopped.set()
            log.info("stopped", extra={"fields": {}})

    async def _shutdown(self) -> None:
        waits = []
        if self._grpc is not None:
            waits.append(self._grpc.stop(self.config.grace_s))
        if self._http is not None:
            waits.append(self._http.cleanup())
        await asyncio.gather(*waits, return_exceptions=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stop() has finished."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def resolve_token(token: str | None) -> str | None:
    """--token, else $PYIPU_SERVE_TOKEN; an empty value means no token."""
    value = token if token is not None else os.environ.get(TOKEN_ENV)
    return value or None
