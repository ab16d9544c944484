"""Loaded models: one pyipu Runner per model version, requests submitted with `execute_async`
(so that the runtime's dynamic batching merges concurrent requests), a bounded in-flight count,
per-request timeouts, and load/unload that complete every accepted request exactly once."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyipu.errors import CancelledError, Error
from pyipu.runtime import Runner, RuntimeConfig
from pyipu.runtime.descriptors import DataDesc
from pyipu.serve.errors import (
    BadRequestError,
    DeadlineError,
    ModelNotFoundError,
    OverloadedError,
    UnavailableError,
    status_of,
)
from pyipu.serve.metrics import Metrics
from pyipu.serve.protocol import InferRequest, datatype_of
from pyipu.serve.repository import ModelConfig, Repository, check_name, check_version

log = logging.getLogger("pyipu.serve")
PLATFORM = "pyipu_popef"  # the platform name in model metadata and configs


def server_metadata(extensions: list[str]) -> dict[str, Any]:
    """The KServe server metadata document, with the protocol extensions a server implements."""
    from pyipu import __version__

    return {"name": "pyipu", "version": __version__, "extensions": extensions}


@dataclass
class TensorInfo:
    name: str
    datatype: str
    shape: list[int]  # -1 on the batching dim when the model batches dynamically


class LoadedModel:
    """One version of a model on its own Runner."""

    def __init__(self, name: str, version: str, path: Any, config: ModelConfig) -> None:
        self.name, self.version, self.config = name, version, config
        source: Any = path
        if str(path).endswith(".onnx"):
            source = _compile_onnx(path, config)
        # The runtime's timeout 0 means "forever"; a batch timeout of 0 (Triton's
        # max_queue_delay 0) runs a partial batch with the rows queued: a 1 ns wait.
        rc = RuntimeConfig(timeout_ns=max(config.batch_timeout_us * 1000, 1), pin_threads=False)
        if config.batching_dim is not None:
            rc.batching_dim = config.batching_dim
            # a lone request does not wait for others' rows: none are in flight
            rc.no_wait_when_alone = True
        if config.num_threads is not None:
            rc.num_threads = config.num_threads
        self.runner = Runner(source, rc)
        self.batching_dim = config.batching_dim
        self._inputs = {d.name: d for d in self.runner.get_execute_inputs()}
        self._outputs = {d.name: d for d in self.runner.get_execute_outputs()}
        self.inputs = [self._info(d) for d in self._inputs.values()]
        self.outputs = [self._info(d) for d in self._outputs.values()]
        self._lock = threading.Lock()
        self._inflight = 0
        self._idle = threading.Condition(self._lock)
        self._closing = False
        # Waits for completions; one thread per request in flight at most.
        self._waiters = ThreadPoolExecutor(config.max_inflight, f"pyipu-serve-{name}")

    def _info(self, d: DataDesc) -> TensorInfo:
        shape = list(d.shape)
        if self.batching_dim is not None:
            shape[self.batching_dim] = -1
        return TensorInfo(d.name, datatype_of(d.numpy_data_type()), shape)

    @property
    def inflight(self) -> int:
        return self._inflight

    def _check(self, req: InferRequest) -> tuple[dict[str, np.ndarray], list[str], int]:
        """The output arrays, by name, the output names to return, and the batches (rows with
        batching_dim) the request carries."""
        for name, array in req.inputs.items():
            desc = self._inputs.get(name)
            if desc is None:
                raise BadRequestError(
                    f"unknown input {name!r} for model {self.name!r} "
                    f"(inputs: {', '.join(self._inputs)})"
                )
            want = desc.numpy_data_type()
            if array.dtype != want:
                raise BadRequestError(
                    f"input {name!r}: datatype {datatype_of(array.dtype)}, the model expects "
                    f"{datatype_of(want)}"
                )
        missing = [n for n in self._inputs if n not in req.inputs]
        if missing:
            raise BadRequestError(f"missing inputs {missing} for model {self.name!r}")
        wanted = [o.name for o in req.outputs] if req.outputs is not None else list(self._outputs)
        for name in wanted:
            if name not in self._outputs:
                raise BadRequestError(
                    f"unknown output {name!r} for model {self.name!r} "
                    f"(outputs: {', '.join(self._outputs)})"
                )
        if len(set(wanted)) != len(wanted):
            raise BadRequestError("an output is requested twice")
        try:
            n = self.runner.check_request(req.inputs, {})
        except Error as e:  # ShapeError and friends: the request's fault
            raise BadRequestError(str(e)) from e
        outputs = {
            d.name: np.empty(self.runner.shape_for(d, n), d.numpy_data_type())
            for d in self._outputs.values()
        }
        return outputs, wanted, n

    async def infer(
        self, req: InferRequest, metrics: Metrics, protocol: str
    ) -> dict[str, np.ndarray]:
        labels = (self.name, self.version)
        metrics.requests.labels(*labels, protocol).inc()
        start = time.perf_counter()
        try:
            outputs, wanted, rows = self._check(req)
            with self._lock:
                if self._closing:
                    raise UnavailableError(f"model {self.name!r} is unloading")
                if self._inflight >= self.config.max_inflight:
                    raise OverloadedError(
                        f"model {self.name!r} has {self._inflight} requests in flight "
                        f"(max_inflight {self.config.max_inflight}); retry later"
                    )
                self._inflight += 1
            metrics.inflight.labels(*labels).inc()
            metrics.rows.labels(*labels).observe(rows)
            # Submitting may block while the runtime's queues are full, so it runs on a waiter
            # thread too. The waiter owns the arrays until the runtime completes the request,
            # even if this task is cancelled (a client that goes away): exactly once.
            loop = asyncio.get_running_loop()
            timeout = self.config.request_timeout_s
            if req.timeout_s is not None:
                timeout = min(timeout, req.timeout_s)
            try:
                waiting = loop.run_in_executor(
                    self._waiters, self._run, req.inputs, outputs, timeout, metrics
                )
            except RuntimeError as e:  # the pool shut down: close() gave up waiting for us
                self._release(metrics)
                raise UnavailableError(f"model {self.name!r} is unloading") from e
            await waiting
            metrics.latency.labels(*labels).observe(time.perf_counter() - start)
            return {name: outputs[name] for name in wanted}
        except BaseException as e:
            metrics.failures.labels(*labels, protocol, status_of(e)[2]).inc()
            raise

    def _run(
        self, inputs: dict, outputs: dict, timeout: float, metrics: Metrics
    ) -> None:  # on a waiter thread
        try:
            future = self.runner.execute_async(inputs, outputs)
            if not future.wait(timeout):
                future.cancel()
                try:
                    future.wait()
                except CancelledError:
                    pass
                raise DeadlineError(f"model {self.name!r}: no result within {timeout:g} s")
            future.wait()  # raises the request's error
        finally:
            self._release(metrics)

    def _release(self, metrics: Metrics) -> None:
        with self._lock:
            self._inflight -= 1
            self._idle.notify_all()
        metrics.inflight.labels(self.name, self.version).dec()

    def close(self, grace_s: float) -> None:
        """Refuse new requests, let those in flight finish (up to `grace_s`), close the runner:
        any request still pending then completes with ClosedError, exactly once."""
        with self._lock:
            self._closing = True
            self._idle.wait_for(lambda: self._inflight == 0, timeout=grace_s)
        self.runner.close()
        self._waiters.shutdown(wait=True)

    def stats(self) -> dict[str, Any]:
        return self.runner.stats()

    def config_document(self) -> dict[str, Any]:
        """A Triton ModelConfig subset (JSON field names), for clients that ask for one."""
        doc: dict[str, Any] = {
            "name": self.name,
            "platform": PLATFORM,
            "max_batch_size": 0,
            "input": [
                {"name": t.name, "data_type": "TYPE_" + t.datatype, "dims": t.shape}
                for t in self.inputs
            ],
            "output": [
                {"name": t.name, "data_type": "TYPE_" + t.datatype, "dims": t.shape}
                for t in self.outputs
            ],
        }
        if self.batching_dim is not None:
            doc["dynamic_batching"] = {"max_queue_delay_microseconds": self.config.batch_timeout_us}
        return doc


def _compile_onnx(path: Any, config: ModelConfig) -> Any:
    """Compile an ONNX model file, through the engine cache when it is enabled
    ($PYIPU_CACHE_DIR), so that a restart does not compile again."""
    from pyipu.compiler import Compiler, CompilerOptions

    opts = CompilerOptions()
    opts.replication_factor = config.replication_factor
    return Compiler.compile(str(path), None, opts)


class ModelManager:
    """The loaded models of a repository: name -> version -> LoadedModel."""

    def __init__(
        self, repository: Repository, grace_s: float = 30.0, default_threads: int | None = None
    ) -> None:
        self.repository = repository
        self.grace_s = grace_s
        # compute threads of a model whose config sets none (a Ray replica: its CPU share)
        self.default_threads = default_threads
        self._lock = threading.Lock()
        self._models: dict[str, dict[str, LoadedModel]] = {}
        self._errors: dict[str, str] = {}

    def load(self, name: str) -> list[str]:
        """Load (or reload) a model's newest versions; returns the versions loaded."""
        config = self.repository.config(name)
        if config.num_threads is None and self.default_threads is not None:
            config = dataclasses.replace(config, num_threads=self.default_threads)
        versions = self.repository.versions(name)
        if not versions:
            raise ModelNotFoundError(f"model {name!r} has no version with a model file")
        chosen = versions[-config.max_versions :]
        try:
            loaded = {
                v: LoadedModel(name, v, self.repository.model_file(name, v), config) for v in chosen
            }
        except Exception as e:
            with self._lock:
                self._errors[name] = str(e)
            raise
        with self._lock:
            old = self._models.get(name, {})
            self._models[name] = loaded
            self._errors.pop(name, None)
        for model in old.values():
            model.close(self.grace_s)
        log.info("model loaded", extra={"fields": {"model": name, "versions": chosen}})
        return chosen

    def load_all(self) -> None:
        """Load every model of the repository. A folder without a usable version is skipped
        (the index lists it UNAVAILABLE); a model that fails to load stops the start, as
        Triton's --exit-on-error does, after closing the models loaded before it."""
        try:
            for name in self.repository.models():
                if self.repository.versions(name):
                    self.load(name)
                else:
                    log.warning("no model file", extra={"fields": {"model": name}})
        except BaseException:
            self.close()
            raise

    def unload(self, name: str) -> None:
        with self._lock:
            old = self._models.pop(name, None)
        if old is None:
            raise ModelNotFoundError(f"model {name!r} is not loaded")
        for model in old.values():
            model.close(self.grace_s)
        log.info("model unloaded", extra={"fields": {"model": name}})

    def find(self, name: str, version: str | None) -> LoadedModel:
        """A loaded model by the name and version a request gives (checked first: a bad one is
        a BadRequestError before anything is looked up)."""
        return self.get(check_name(name), check_version(version) if version else None)

    def get(self, name: str, version: str | None = None) -> LoadedModel:
        with self._lock:
            versions = self._models.get(name)
        if not versions:
            raise ModelNotFoundError(f"model {name!r} is not loaded")
        if not version:
            return versions[max(versions, key=int)]
        model = versions.get(version)
        if model is None:
            raise ModelNotFoundError(f"model {name!r} has no loaded version {version!r}")
        return model

    def metadata(self, model: LoadedModel) -> dict[str, Any]:
        """The KServe model metadata document of a loaded model version."""
        versions = [m.version for m in self.loaded() if m.name == model.name]
        return {
            "name": model.name,
            "versions": sorted(versions, key=int),
            "platform": PLATFORM,
            "inputs": [vars(t) for t in model.inputs],
            "outputs": [vars(t) for t in model.outputs],
        }

    def loaded(self) -> list[LoadedModel]:
        with self._lock:
            return [m for versions in self._models.values() for m in versions.values()]

    def index(self) -> list[dict[str, str]]:
        """Every model of the repository with its state (Triton's repository index)."""
        with self._lock:
            models = {n: dict(v) for n, v in self._models.items()}
            errors = dict(self._errors)
        out = []
        for name in self.repository.models():
            try:
                versions = self.repository.versions(name)
            except Error:
                versions = []
            for v in versions or [""]:
                entry = {"name": name, "version": v}
                if v in models.get(name, {}):
                    entry["state"] = "READY"
                else:
                    entry["state"] = "UNAVAILABLE"
                    entry["reason"] = errors.get(name, "unloaded")
                out.append(entry)
        return out

    def runner_stats(self) -> list[tuple[str, str, dict[str, Any]]]:
        out = []
        for m in self.loaded():
            try:
                out.append((m.name, m.version, m.stats()))
            except Error:  # closed meanwhile
                continue
        return out

    def close(self) -> None:
        with self._lock:
            models = [m for versions in self._models.values() for m in versions.values()]
            self._models.clear()
        for m in models:
            m.close(self.grace_s)
