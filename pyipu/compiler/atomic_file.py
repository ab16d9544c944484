"""Atomic, link-safe file writes and the clean-up of temporary files that dead writers left.

A file is written to a fresh temporary name in its own directory, created exclusively
(O_CREAT|O_EXCL|O_NOFOLLOW, so a planted link or file at that name is never followed or reused),
flushed to disk, then renamed over the target: readers see the old file or the new one, never
half of one, and a link at the target's name is replaced rather than written through. The
temporary name starts with `TEMP_PREFIX` and carries the writer's host and pid, so
`remove_stale_temps` can tell a dead writer's leftovers from a live writer's file.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import stat
import time
from pathlib import Path

TEMP_PREFIX = ".pyipu-tmp-"
# A temp file is written in one go right after it is created, so one this old has no live writer.
STALE_AFTER_S = 3600.0
# Temp names of pyipu versions that wrote `<entry>.tmp<pid>`: cleaned by age only.
_LEGACY_TEMP = re.compile(r"pyipu-[0-9a-f]{40}\.popef\.tmp\d+")
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname())[:64] or "host"


def _create_temp(directory: Path) -> tuple[int, Path]:
    for _ in range(100):
        name = f"{TEMP_PREFIX}{_host()}-{os.getpid()}-{secrets.token_hex(8)}"
        path = directory / name
        try:
            return os.open(path, _OPEN_FLAGS | _NOFOLLOW, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name in {directory}")


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view) :]


def write_atomic(path: str | os.PathLike, data: bytes | memoryview) -> None:
    """Write `data` to `path` through a new temporary file, fsync and rename. On any failure
    (disk full, interrupt) the temporary file is removed and `path` is left as it was."""
    target = Path(path)
    fd, tmp = _create_temp(target.parent)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)  # replaces a link at `target`, never writes through it
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (best effort: not every platform opens directories)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another thread of this process may be writing it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # PermissionError: it exists under another user
    return True


def _is_stale(name: str, st: os.stat_result, now: float, host: str) -> bool:
    if now - st.st_mtime > STALE_AFTER_S:
        return True
    if not name.startswith(TEMP_PREFIX):
        return False
    writer_host, _, rest = name[len(TEMP_PREFIX) :].rpartition("-")[0].rpartition("-")
    # a pid is only meaningful on the host that wrote it (a shared directory may be on NFS)
    return writer_host == host and rest.isdigit() and not _pid_alive(int(rest))


def remove_stale_temps(directory: str | os.PathLike[str]) -> int:
    """Remove temporary files of writers that died (same host, pid gone) or that are older than
    STALE_AFTER_S. Returns how many were removed; errors (a racing remover) are ignored."""
    removed, now, host = 0, time.time(), _host()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        name = entry.name
        if not (name.startswith(TEMP_PREFIX) or _LEGACY_TEMP.fullmatch(name)):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode) or not _is_stale(name, st, now, host):
                continue
            os.unlink(entry.path)
            removed += 1
        except OSError:
            continue
    return removed
