"""Engine cache in a shared directory: links, concurrent writers, failed writes, leftovers,
integrity of every byte of an entry, and the default directory."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from models import fusion_model0, run_c
from test_cache import _entries, _options

from pyipu.compiler import Compiler, CompilerOptions, Executable, atomic_file
from pyipu.compiler import cache as cache_module
from pyipu.compiler.cache import CacheWarning, entry_path

X, Y = np.array([[1, 2]], np.float32), np.array([[10, 20]], np.float32)


def _sub_model():
    """fusion_model0 with the same inputs and outputs but O = Reshape(X - Y)."""
    model = fusion_model0()
    model.graph.node[0].op_type = "Sub"
    return model


def _temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp" in p.name or "-tmp-" in p.name)


def test_save_does_not_write_through_a_link_at_the_old_temp_name(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    target = tmp_path / "model.popef"
    os.symlink(victim, f"{target}.tmp{os.getpid()}")
    exe = Compiler.compile(fusion_model0())
    exe.save(target)
    assert victim.read_bytes() == b"precious"
    assert not target.is_symlink()
    assert Executable(target).to_bytes() == exe.to_bytes()


def test_a_link_at_the_entry_name_is_never_followed(tmp_path, count_compiles):
    cache = tmp_path / "cache"
    opts = _options(cache)
    elsewhere = _options(tmp_path / "elsewhere")
    Compiler.compile(fusion_model0(), None, elsewhere)  # a valid entry for the same key
    (real,) = _entries(tmp_path / "elsewhere")
    before = real.read_bytes()
    cache.mkdir()
    entry = entry_path(cache, fusion_model0(), None, opts)
    os.symlink(real, entry)
    with pytest.warns(CacheWarning, match="unusable"):
        exe = Compiler.compile(fusion_model0(), None, opts)
    assert len(count_compiles) == 2, "the linked file is not served"
    assert not entry.is_symlink() and entry.read_bytes() == exe.to_bytes()
    assert real.read_bytes() == before
    np.testing.assert_array_equal(run_c(exe, {"X": X, "Y": Y})["O"], [11, 22])


def test_a_fifo_at_the_entry_name_is_rebuilt_not_waited_on(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    opts = _options(cache)
    entry = entry_path(cache, fusion_model0(), None, opts)
    os.mkfifo(entry)
    with pytest.warns(CacheWarning, match="not a regular file"):
        exe = Compiler.compile(fusion_model0(), None, opts)
    assert entry.is_file() and entry.read_bytes() == exe.to_bytes()


def test_many_threads_compiling_one_key_share_the_entry_cleanly(tmp_path):
    model = fusion_model0()
    opts = _options(tmp_path / "cache")
    errors: list[BaseException] = []
    results: list[Executable] = []

    def compile_once(barrier: threading.Barrier) -> None:
        try:
            barrier.wait()
            results.append(Compiler.compile(model, None, opts))
        except BaseException as e:  # collected: a thread's exception would be lost
            errors.append(e)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):  # the entry is removed between rounds: every round writes it
            for entry in _entries(tmp_path / "cache"):
                entry.unlink()
            barrier = threading.Barrier(8)
            threads = [threading.Thread(target=compile_once, args=(barrier,)) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert not errors
    assert [str(w.message) for w in caught if issubclass(w.category, CacheWarning)] == []
    (entry,) = _entries(tmp_path / "cache")
    assert _temps(tmp_path / "cache") == []
    assert {r.to_bytes() for r in results} == {entry.read_bytes()}


def test_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    def half_then_enospc(fd: int, data) -> None:
        os.write(fd, memoryview(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_file, "_write_all", half_then_enospc)
    cache = tmp_path / "cache"
    with pytest.warns(CacheWarning, match="not written.*No space left"):
        exe = Compiler.compile(fusion_model0(), None, _options(cache))
    assert exe.output_names == ["O"]
    assert list(cache.iterdir()) == []

    target = tmp_path / "model.popef"
    target.write_bytes(b"old file")
    with pytest.raises(OSError, match="No space left"):
        exe.save(target)
    assert target.read_bytes() == b"old file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "model.popef"]


def test_leftovers_of_dead_writers_are_removed(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = atomic_file._host()
    prefix = atomic_file.TEMP_PREFIX
    dead_writer = cache / f"{prefix}{host}-{dead.pid}-0123456789abcdef"
    live_writer = cache / f"{prefix}{host}-{os.getppid()}-0123456789abcdef"
    other_host = cache / f"{prefix}elsewhere-{dead.pid}-0123456789abcdef"
    old_style = cache / f"pyipu-{'ab' * 20}.popef.tmp{dead.pid}"
    old_other_host = cache / f"{prefix}elsewhere-1-0123456789abcdef"
    not_ours = cache / "notes.tmp"
    for p in (dead_writer, live_writer, other_host, old_style, old_other_host, not_ours):
        p.write_bytes(b"x" * 100)
    two_hours_ago = time.time() - 7200
    for p in (old_style, old_other_host, not_ours):
        os.utime(p, (two_hours_ago, two_hours_ago))
    Compiler.compile(fusion_model0(), None, _options(cache))
    left = sorted(p.name for p in cache.iterdir() if not p.name.endswith(".popef"))
    assert left == sorted([live_writer.name, other_host.name, not_ours.name])


def _entry_and_key(tmp_path: Path) -> tuple[Path, bytes, bytes]:
    opts = _options(tmp_path / "cache")
    Compiler.compile(fusion_model0(), None, opts)
    (entry,) = _entries(tmp_path / "cache")
    return entry, cache_module.entry_key(fusion_model0(), None, opts), entry.read_bytes()


def test_every_single_byte_flip_of_an_entry_is_refused(tmp_path):
    entry, key, good = _entry_and_key(tmp_path)
    assert cache_module._load_valid(entry, key) is not None
    served = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        for i in range(len(good)):
            data = bytearray(good)
            data[i] ^= 0x01 if i % 2 else 0x80
            entry.write_bytes(bytes(data))
            if cache_module._load_valid(entry, key) is not None:
                served.append(i)
    assert served == [], "these flipped bytes were served"


def test_a_flipped_compiler_hash_is_rebuilt_not_served(tmp_path, count_compiles):
    entry, _, good = _entry_and_key(tmp_path)
    data = bytearray(good)
    data[24] ^= 0x01  # header field compiler_hash: outside the container checksum
    entry.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="header"):
        exe = Compiler.compile(fusion_model0(), None, _options(tmp_path / "cache"))
    assert len(count_compiles) == 2
    assert entry.read_bytes() == good
    np.testing.assert_array_equal(run_c(exe, {"X": X, "Y": Y})["O"], [11, 22])


@pytest.mark.parametrize("foreign", ["cache entry", "exported PopEF"])
def test_another_models_file_under_a_key_is_rebuilt(tmp_path, count_compiles, foreign):
    opts = _options(tmp_path / "cache")
    if foreign == "cache entry":
        other = Compiler.compile(_sub_model(), None, opts).to_bytes()
    else:
        other = Compiler.compile(_sub_model()).to_bytes()
    entry = entry_path(tmp_path / "cache", fusion_model0(), None, opts)
    entry.parent.mkdir(exist_ok=True)
    entry.write_bytes(other)
    with pytest.warns(CacheWarning, match="another model|no cache record"):
        exe = Compiler.compile(fusion_model0(), None, opts)
    np.testing.assert_array_equal(run_c(exe, {"X": X, "Y": Y})["O"], [11, 22])
    assert entry.read_bytes() == exe.to_bytes() != other


def test_a_hit_returns_the_same_bytes_as_the_miss(tmp_path):
    opts = _options(tmp_path / "cache")
    miss = Compiler.compile(fusion_model0(), None, opts)
    hit = Compiler.compile(fusion_model0(), None, opts)
    assert hit.to_bytes() == miss.to_bytes()
    assert hit.program.opaque == miss.program.opaque
    assert [name for name, _ in hit.program.opaque] == ["pyipu.sources"]  # no cache record


def test_default_directory_is_the_platform_cache_dir(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYIPU_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    opts = CompilerOptions.from_dict({"enable_engine_caching": True})
    with caplog.at_level(logging.INFO, logger="pyipu.compiler"):
        Compiler.compile(fusion_model0(), None, opts)
    (entry,) = _entries(tmp_path / "xdg" / "pyipu")
    assert f"engine cache entry written: {entry}" in caplog.text
    assert _entries(tmp_path) == []

    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # not absolute: ignored, as XDG says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    Compiler.compile(fusion_model0(), None, opts)
    assert len(_entries(tmp_path / "home" / ".cache" / "pyipu")) == 1
    assert not (tmp_path / "relative").exists()


def test_a_relative_cache_path_is_logged_absolute(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO, logger="pyipu.compiler"):
        Compiler.compile(fusion_model0(), None, _options(Path("rel")))
    (entry,) = _entries(tmp_path / "rel")
    assert f"engine cache entry written: {entry}" in caplog.text


def test_users_cannot_name_a_blob_like_the_cache_record():
    from pyipu.compiler.errors import CompileError
    from pyipu.compiler.serialize import CACHE_BLOB

    with pytest.raises(CompileError, match="reserved"):
        CompilerOptions.from_dict({"opaque_blobs": {CACHE_BLOB: b"x"}})


def test_an_interrupted_save_leaves_the_old_file(tmp_path, monkeypatch):
    def interrupted(fd: int, data) -> None:
        os.write(fd, b"PYIPUEF")
        raise KeyboardInterrupt

    target = tmp_path / "model.popef"
    target.write_bytes(b"old file")
    monkeypatch.setattr(atomic_file, "_write_all", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Compiler.compile(fusion_model0()).save(target)
    assert target.read_bytes() == b"old file"
    assert [p.name for p in tmp_path.iterdir()] == ["model.popef"]


def test_a_served_entry_keeps_its_bytes_when_the_file_is_replaced(tmp_path):
    opts = _options(tmp_path / "cache")
    first = Compiler.compile(fusion_model0(), None, opts)
    hit = Compiler.compile(fusion_model0(), None, opts)
    (entry,) = _entries(tmp_path / "cache")
    entry.unlink()
    os.symlink(tmp_path / "elsewhere", entry)  # what was mapped is still what it reads
    assert hit.to_bytes() == first.to_bytes()


_KILLED_SAVE = """
import os, signal, sys
sys.path.insert(0, sys.argv[2])
from models import fusion_model0
from pyipu.compiler import Compiler
exe = Compiler.compile(fusion_model0(), None)
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # dies with the temp file written
exe.save(sys.argv[1])
"""


def test_a_save_after_a_killed_save_removes_its_temporary_file(tmp_path):
    target = tmp_path / "model.popef"
    here = str(Path(__file__).resolve().parent)
    child = subprocess.run([sys.executable, "-P", "-c", _KILLED_SAVE, str(target), here])
    assert child.returncode == -9
    (left,) = _temps(tmp_path)
    assert left.startswith(atomic_file.TEMP_PREFIX) and not target.exists()
    exe = Compiler.compile(fusion_model0(), None)
    exe.save(target)
    assert _temps(tmp_path) == []
    np.testing.assert_array_equal(run_c(Executable.open(target), {"X": X, "Y": Y})["O"], [11, 22])
