"""Engine cache: compiled executables stored on disk, addressed by what they were compiled from.

The key is a SHA-256 over the model's bytes (a file's bytes as they are on disk, plus its
external-data files; a ModelProto's deterministic serialization), the requested outputs, every
compiler option that can change the executable, and the compiler's fingerprint (pyipu's version
and the source of the compiler, so a changed compiler never serves an old entry). An entry is a
PopEF file `pyipu-<key>.popef`, written atomically; on a hit it is validated by the C container
reader and executable verifier, and an entry that fails (truncated, bit rot, hand-edited) is
reported with a `CacheWarning` and rebuilt.

Where: `CompilerOptions.cache_path` when caching is enabled there, else `$PYIPU_CACHE_DIR`, which
also turns caching on for every compile (like `POPART_CACHE_DIR`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx

from pyipu import _config
from pyipu.compiler.executable import Executable
from pyipu.compiler.onnx_import import ModelLike, load_model
from pyipu.compiler.options import CompilerOptions

log = logging.getLogger("pyipu.compiler")

_EXTERNAL_DATA_MARK = b"location"  # key of TensorProto.external_data entries

# Options that only say where/whether to cache or how to report progress.
_NOT_IN_KEY = frozenset(
    {
        "enable_engine_caching",
        "cache_path",
        "compilation_progress_logger",
        "show_compilation_progress_bar",
        "serialize_ir",
        "serialized_ir_dest",
    }
)


class CacheWarning(UserWarning):
    """An engine-cache entry was unusable (it is rebuilt) or could not be written."""


def cache_dir(opts: CompilerOptions) -> Path | None:
    """The cache directory for these options, or None when caching is off."""
    if opts.enable_engine_caching:
        return Path(opts.cache_path or _config.cache_dir() or ".")
    env = _config.cache_dir()
    return Path(env) if env else None


@functools.cache
def compiler_fingerprint() -> str:
    """pyipu's version + a hash of the compiler's source and of the IPU targets it checks fit."""
    from pyipu import __version__

    h = hashlib.sha256(__version__.encode())
    package = Path(__file__).parent.parent
    for path in sorted([*(package / "compiler").rglob("*.py"), package / "ipu_targets.py"]):
        h.update(path.relative_to(package).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _model_digest(model: ModelLike) -> bytes:
    if isinstance(model, (str, os.PathLike)) and os.path.isfile(model):
        data = Path(model).read_bytes()
        h = hashlib.sha256(data)
        if _EXTERNAL_DATA_MARK in data:  # rare: parse to find the external-data files
            _hash_external_data(h, Path(model))
        return h.digest()
    if isinstance(model, (bytes, bytearray, memoryview)):
        return hashlib.sha256(model).digest()
    return hashlib.sha256(load_model(model).SerializeToString(deterministic=True)).digest()


def _hash_external_data(h: hashlib._Hash, path: Path) -> None:
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    proto = onnx.load(str(path), load_external_data=False)
    for t in _get_all_tensors(proto):
        if uses_external_data(t):
            location = path.parent / ExternalDataInfo(t).location
            h.update(location.name.encode())
            h.update(location.read_bytes() if location.is_file() else b"<missing>")


def entry_path(
    directory: Path, model: ModelLike, outputs: Sequence[str] | None, opts: CompilerOptions
) -> Path:
    """Where the executable of this (model, outputs, options) is or will be cached."""
    options = {k: v for k, v in opts.to_dict().items() if k not in _NOT_IN_KEY}
    h = hashlib.sha256(_model_digest(model))
    h.update(repr((list(outputs) if outputs else None, sorted(options.items()))).encode())
    h.update(compiler_fingerprint().encode())
    return directory / f"pyipu-{h.hexdigest()[:40]}.popef"


def _load_valid(path: Path) -> Executable | None:
    """The cached executable, or None (with a CacheWarning) when the entry is corrupt."""
    try:
        return Executable.open(path)  # memory-mapped: checksum, metadata, program verifier
    except FileNotFoundError:
        return None
    except Exception as e:  # OSError, or a pyipu.Error from the C reader or verifier
        warnings.warn(
            f"engine cache entry {path} is unusable ({e}); rebuilding it",
            CacheWarning,
            stacklevel=4,
        )
        return None


def cached_compile(
    directory: Path,
    model: ModelLike,
    outputs: Sequence[str] | None,
    opts: CompilerOptions,
    build: Callable[[], Executable],
) -> tuple[Executable, bool]:
    """The executable served from `directory` (hit: True), or built and stored there."""
    path = entry_path(directory, model, outputs, opts)
    exe = _load_valid(path) if path.exists() else None
    if exe is not None:
        log.info("engine cache hit: %s", path)
        return exe, True
    exe = build()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        exe.save(path)
        log.info("engine cache entry written: %s", path)
    except (ImportError, OSError) as e:
        warnings.warn(f"engine cache entry not written to {path}: {e}", CacheWarning, stacklevel=4)
    return exe, False
