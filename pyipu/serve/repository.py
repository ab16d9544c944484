"""A Triton-style model repository: `<repo>/<model>/<version>/model.popef|model.onnx`, with an
optional `<repo>/<model>/config.json` or Triton `config.pbtxt` (a subset).

Names and versions are validated before they touch the file system, and every file is opened
only when its resolved path lies inside the repository: `..`, absolute names and symlinks that
leave the repository are refused."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pyipu.errors import ConfigError
from pyipu.serve.errors import BadRequestError, ModelNotFoundError

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_VERSION = re.compile(r"^[1-9][0-9]{0,17}$")
MODEL_FILES = ("model.popef", "model.onnx")  # in this order of preference


@dataclass
class ModelConfig:
    """Per-model serving options (config.json keys; Triton config.pbtxt maps onto them)."""

    batching_dim: int | None = None  # dynamic batching along this dim (runtime batching_dim)
    batch_timeout_us: int = 1000  # wait this long for other requests' rows to fill a batch
    max_inflight: int = 64  # accepted requests not yet completed; more get 429
    request_timeout_s: float = 60.0  # then the request is cancelled: 504
    num_threads: int | None = None  # compute threads of the runner (None: the runtime default)
    replication_factor: int = 1  # ONNX models: replicas compiled, one per virtual IPU
    max_versions: int = 1  # the highest N versions are loaded (Triton's "latest" policy)

    def check(self) -> ModelConfig:
        if self.batching_dim is not None and not (0 <= self.batching_dim < 32):
            raise ConfigError(f"batching_dim {self.batching_dim} out of range 0..31")
        for name in ("batch_timeout_us", "max_inflight", "replication_factor", "max_versions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be a non-negative int, got {value!r}")
        if self.max_inflight < 1 or self.replication_factor < 1 or self.max_versions < 1:
            raise ConfigError("max_inflight, replication_factor and max_versions must be >= 1")
        if not isinstance(self.request_timeout_s, (int, float)) or not (
            0 < self.request_timeout_s < 1e9
        ):
            raise ConfigError(f"request_timeout_s must be > 0, got {self.request_timeout_s!r}")
        if self.num_threads is not None and (
            not isinstance(self.num_threads, int) or self.num_threads < 1
        ):
            raise ConfigError(f"num_threads must be >= 1, got {self.num_threads!r}")
        return self


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadRequestError(f"invalid model name {name!r}")
    return name


def check_version(version: str) -> str:
    if not isinstance(version, str) or not _VERSION.match(version):
        raise BadRequestError(f"invalid model version {version!r} (a positive integer)")
    return version


class Repository:
    """Read access to one repository folder."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).resolve(strict=True)
        if not self.root.is_dir():
            raise ConfigError(f"model repository {str(root)!r} is not a directory")

    def _inside(self, path: Path) -> Path:
        """`path` resolved, refused unless it stays inside the repository."""
        real = path.resolve()
        if real != self.root and self.root not in real.parents:
            raise ModelNotFoundError(f"{path.relative_to(self.root)} leaves the repository")
        return real

    def models(self) -> list[str]:
        """The model folders' names (invalid names and folders outside the root skipped)."""
        out = []
        for entry in sorted(self.root.iterdir()):
            if _NAME.match(entry.name) and entry.is_dir():
                try:
                    self._inside(entry)
                except ModelNotFoundError:
                    continue
                out.append(entry.name)
        return out

    def versions(self, name: str) -> list[str]:
        """Versions of `name` that hold a model file, lowest first."""
        folder = self._model_dir(name)
        found = []
        for entry in folder.iterdir():
            if _VERSION.match(entry.name) and entry.is_dir():
                try:
                    self.model_file(name, entry.name)
                except ModelNotFoundError:
                    continue
                found.append(entry.name)
        return sorted(found, key=int)

    def _model_dir(self, name: str) -> Path:
        folder = self._inside(self.root / check_name(name))
        if not folder.is_dir():
            raise ModelNotFoundError(f"unknown model {name!r}")
        return folder

    def model_file(self, name: str, version: str) -> Path:
        """The version's model file (PopEF preferred over ONNX)."""
        folder = self._inside(self._model_dir(name) / check_version(version))
        for file in MODEL_FILES:
            path = folder / file
            if path.is_file():
                return self._inside(path)
        raise ModelNotFoundError(
            f"model {name!r} version {version} has no {' or '.join(MODEL_FILES)}"
        )

    def config(self, name: str) -> ModelConfig:
        folder = self._model_dir(name)
        path = folder / "config.json"
        if path.exists():
            try:
                doc = json.loads(self._inside(path).read_text())
            except (OSError, ValueError) as e:
                raise ConfigError(f"{name}/config.json: {e}") from e
            return config_from_dict(doc, f"{name}/config.json")
        path = folder / "config.pbtxt"
        if path.exists():
            return config_from_pbtxt(self._inside(path).read_text(), f"{name}/config.pbtxt")
        return ModelConfig()


def config_from_dict(doc: Any, where: str) -> ModelConfig:
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    known = {f.name for f in fields(ModelConfig)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown} (known: {sorted(known)})")
    try:
        return ModelConfig(**doc).check()
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from e


def config_from_pbtxt(text: str, where: str) -> ModelConfig:
    """Triton's config.pbtxt: `dynamic_batching` (batching along dim 0, its
    max_queue_delay_microseconds), `instance_group[].count` (replicas), `version_policy.latest`,
    and parameters `num_threads`, `max_inflight`, `request_timeout_s`."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    msg = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as e:
        raise ConfigError(f"{where}: {e}") from e
    cfg = ModelConfig()
    if msg.HasField("dynamic_batching"):
        cfg.batching_dim = 0
        if msg.dynamic_batching.max_queue_delay_microseconds:
            cfg.batch_timeout_us = int(msg.dynamic_batching.max_queue_delay_microseconds)
    if msg.instance_group:
        cfg.replication_factor = max(1, sum(g.count or 1 for g in msg.instance_group))
    if msg.version_policy.HasField("latest"):
        cfg.max_versions = max(1, msg.version_policy.latest.num_versions)
    for key, conv in (("num_threads", int), ("max_inflight", int), ("request_timeout_s", float)):
        if key in msg.parameters:
            try:
                setattr(cfg, key, conv(msg.parameters[key].string_value))
            except ValueError as e:
                raise ConfigError(f"{where}: parameter {key}: {e}") from e
    try:
        return cfg.check()
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from e
