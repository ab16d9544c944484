"""Engine cache: compiled executables stored on disk, addressed by what they were compiled from.

The key is a SHA-256 over the model's bytes (a file's bytes as they are on disk, plus its
external-data files; a ModelProto's deterministic serialization), the requested outputs, every
compiler option that can change the executable, and the compiler's fingerprint (pyipu's version
and the source of the compiler, so a changed compiler never serves an old entry). An entry is a
PopEF file `pyipu-<key>.popef` written atomically (atomic_file.py) that carries a CACHE_BLOB
record: the full key and the header fields the C reader cannot check (compiler hash, blob count).
On a hit the file is opened without following links, and validated by the C container reader (its
checksum covers every byte after the header) and executable verifier; the record then vouches for
the rest of the header and for the entry being this key's. An entry that fails (truncated, bit rot,
hand-edited, another model's file) is reported with a `CacheWarning` and rebuilt.

Where: `CompilerOptions.cache_path` when caching is enabled there, else `$PYIPU_CACHE_DIR`, which
also turns caching on for every compile (like `POPART_CACHE_DIR`), else the platform cache
directory (`_config.default_cache_dir`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import struct
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx

from pyipu import _config
from pyipu.compiler.atomic_file import remove_stale_temps, write_atomic
from pyipu.compiler.executable import Executable
from pyipu.compiler.onnx_import import ModelLike, load_model
from pyipu.compiler.options import CompilerOptions
from pyipu.compiler.serialize import BLOB_OPAQUE, CACHE_BLOB, split_container
from pyipu.errors import CorruptFileError

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
        if opts.cache_path or _config.cache_dir():
            return Path(opts.cache_path or _config.cache_dir() or "")
        try:
            return Path(_config.default_cache_dir())
        except RuntimeError as e:
            warnings.warn(f"engine cache off: {e}", CacheWarning, stacklevel=3)
            return None
    env = _config.cache_dir()
    return Path(env) if env else None


@functools.cache
def compiler_fingerprint() -> str:
    """pyipu's version + a hash of the compiler's source and of the IPU targets it checks fit."""
    from pyipu import __version__

    h = hashlib.sha256(__version__.encode())
    try:  # the C writer's hash: a rebuilt runtime must not be served an entry it rejects
        from pyipu import _core

        h.update(str(_core.compiler_hash()).encode())
    except ImportError:
        pass  # nothing can be written without _core, so nothing is served either
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


def entry_key(model: ModelLike, outputs: Sequence[str] | None, opts: CompilerOptions) -> bytes:
    """The SHA-256 that addresses the executable of this (model, outputs, options)."""
    options = {k: v for k, v in opts.to_dict().items() if k not in _NOT_IN_KEY}
    h = hashlib.sha256(_model_digest(model))
    h.update(repr((list(outputs) if outputs else None, sorted(options.items()))).encode())
    h.update(compiler_fingerprint().encode())
    return h.digest()


def _entry_path(directory: Path, key: bytes) -> Path:
    return directory / f"pyipu-{key.hex()[:40]}.popef"


def entry_path(
    directory: Path, model: ModelLike, outputs: Sequence[str] | None, opts: CompilerOptions
) -> Path:
    """Where the executable of this (model, outputs, options) is or will be cached."""
    return _entry_path(directory, entry_key(model, outputs, opts))


_RECORD = struct.Struct("<32sQI4x")  # key, compiler_hash and blob_count the header must hold


def entry_image(exe: Executable, key: bytes) -> bytes:
    """The executable's container with a CACHE_BLOB record added (key and header fields)."""
    data = memoryview(exe.to_bytes())
    (compiler_hash,) = struct.unpack_from("<Q", data, 24)
    blobs = [
        b
        for b in split_container(data, views=True)
        if not (b[0] == BLOB_OPAQUE and b[2] == CACHE_BLOB)
    ]
    record = _RECORD.pack(key, compiler_hash, len(blobs) + 1)
    blobs.append((BLOB_OPAQUE, 0, CACHE_BLOB, record))
    from pyipu import _core

    return bytes(_core.write_container(blobs, compiler_hash=compiler_hash))


def _check_entry(exe: Executable, key: bytes) -> None:
    """Raise CorruptFileError unless this opened entry is the one for `key`. Every byte is then
    covered: the C reader checked the checksum (all bytes after the header) and the header's
    magic, version, file size, table offset and reserved bytes; the record, under the checksum,
    vouches for the two header fields left, the compiler hash and the blob count."""
    from pyipu import _core

    container = exe.native().container
    blobs = container.blobs()
    found = [i for i, b in enumerate(blobs) if b[0] == BLOB_OPAQUE and b[2] == CACHE_BLOB]
    record = container.blob_bytes(found[0]) if len(found) == 1 else b""
    if len(record) != _RECORD.size:
        raise CorruptFileError("not an engine-cache entry (no cache record)")
    stored_key, compiler_hash, blob_count = _RECORD.unpack(record)
    if stored_key != key:
        raise CorruptFileError("the entry of another model or options")
    if compiler_hash != container.compiler_hash or blob_count != len(blobs):
        raise CorruptFileError("its header was altered")
    if compiler_hash != _core.compiler_hash():
        raise CorruptFileError("written by another compiler")


def _load_valid(path: Path, key: bytes) -> Executable | None:
    """The cached executable, or None (with a CacheWarning) when the entry is unusable."""
    try:
        # memory-mapped: checksum, metadata, program verifier; a link at `path` is refused
        exe = Executable.open(path, follow_symlinks=False)
        _check_entry(exe, key)
        return exe
    except (FileNotFoundError, NotADirectoryError):
        return None
    except Exception as e:  # OSError (ELOOP: a link), or a pyipu.Error from the checks
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
    key = entry_key(model, outputs, opts)
    path = _entry_path(directory, key)
    remove_stale_temps(directory)
    exe = _load_valid(path, key)
    if exe is not None:
        log.info("engine cache hit: %s", os.path.abspath(path))
        return exe, True
    exe = build()
    try:
        image = entry_image(exe, key)
        exe._bytes = image  # a miss returns what a hit would: the entry's bytes
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(path, image)
        log.info("engine cache entry written: %s", os.path.abspath(path))
    except (ImportError, OSError) as e:
        warnings.warn(f"engine cache entry not written to {path}: {e}", CacheWarning, stacklevel=4)
    return exe, False
