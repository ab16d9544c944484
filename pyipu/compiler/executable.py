"""Executable: a compiled model as container bytes and/or its ModelIR (poprt.compiler.Executable).

Compiled in-process it holds the ModelIR and encodes the container on first `to_bytes()` (which
needs pyipu._core, the C writer). Loaded from a file or bytes it holds the container and decodes
the ModelIR on first use of `.program` (pure Python), so `run_reference` works either way.
`Executable.open(path)` memory-maps and verifies a file with the C reader instead of reading it:
the engine cache serves hits that way, and runners then share the mapped, verified executable.
"""

from __future__ import annotations

import os
import stat
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pyipu.compiler.atomic_file import remove_stale_temps, write_atomic
from pyipu.compiler.ipu_model import NOT_FIT_LABEL, IPUModelReport, Settings, estimate
from pyipu.compiler.ir import Direction, ModelIR
from pyipu.compiler.serialize import decode, encode_container


class Executable:
    """`Executable(path)` loads a PopEF file; `Executable.from_bytes(b)` an in-memory image."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self._bytes: bytes | None = None
        self._program: ModelIR | None = None
        self._native: Any = None  # pyipu._core.Executable: verified, its kernel plans built
        self._path: str | None = None  # the memory-mapped file behind _native
        self._fd: int | None = None  # that file, kept open: to_bytes reads what was mapped
        self._report: IPUModelReport | None = None
        if path is not None:
            with open(path, "rb") as f:
                self._bytes = f.read()

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Executable:
        exe = cls()
        exe._bytes = bytes(data)
        return exe

    @classmethod
    def open(cls, path: str | os.PathLike, *, follow_symlinks: bool = True) -> Executable:
        """A PopEF file memory-mapped and verified (checksum, metadata, every program) by the C
        reader; a corrupt file raises a pyipu.Error subclass here rather than at first use.
        With `follow_symlinks=False` a link at `path` raises OSError (ELOOP), and anything but a
        regular file raises CorruptFileError (a FIFO would block the reader)."""
        from pyipu import _core
        from pyipu.errors import CorruptFileError

        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        if not follow_symlinks:
            flags |= getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags)
        exe = cls()
        exe._path = os.fspath(path)
        weakref.finalize(exe, os.close, fd)
        exe._fd = fd
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptFileError(f"{exe._path} is not a regular file")
        proc = f"/proc/self/fd/{fd}"  # the file behind fd, whatever replaces `path` meanwhile
        source = proc if os.path.exists(proc) else exe._path
        exe._native = _core.Executable(_core.Container.open(source))  # + program verifier
        if source != proc and not os.path.samestat(st, os.stat(exe._path)):
            raise CorruptFileError(f"{exe._path} was replaced while it was opened")
        return exe

    def native(self) -> Any:
        """The verified `pyipu._core.Executable` (built once: runners and sessions share it, as
        replicas do, so weights are packed for the kernels once)."""
        if self._native is None:
            from pyipu import _core

            self._native = _core.Executable(_core.Container.from_bytes(self.to_bytes()))
        return self._native

    @classmethod
    def from_program(cls, program: ModelIR) -> Executable:
        exe = cls()
        exe._program = program
        return exe

    @property
    def program(self) -> ModelIR:
        """The ModelIR (decoded from the container on first use; ValueError if malformed)."""
        if self._program is None:
            if self._bytes is None and self._path is None:
                raise ValueError("empty Executable: load a file or use from_bytes()")
            self._program = decode(self.to_bytes())
        return self._program

    def to_bytes(self, compiler_hash: int | None = None) -> bytes:
        """The container image (PopEF file contents)."""
        if self._bytes is None and self._fd is not None and compiler_hash is None:
            with os.fdopen(os.dup(self._fd), "rb") as f:
                f.seek(0)
                self._bytes = f.read()
        if self._bytes is None or compiler_hash is not None:
            data = encode_container(self.program, compiler_hash=compiler_hash)
            if compiler_hash is not None:
                return data
            self._bytes = data
        return self._bytes

    def save(self, path: str | os.PathLike) -> None:
        """Write the PopEF file atomically (new temporary file, fsync, rename; atomic_file.py).
        Temporary files that dead writers (a killed save) left in the directory go first."""
        remove_stale_temps(Path(path).parent)
        write_atomic(path, self.to_bytes())

    def run_reference(
        self, inputs: Mapping[str, np.ndarray], subgraph: int | None = None
    ) -> dict[str, np.ndarray]:
        """Run the NumPy reference interpreter (see pyipu.reference.run)."""
        from pyipu.reference import run

        return run(self.program, inputs, subgraph)

    @property
    def input_names(self) -> list[str]:
        """Names of the inputs a caller feeds (weights bound from tensor data excluded)."""
        return [
            a.name
            for a in self.program.anchors
            if a.direction == Direction.INPUT and not a.has_tensor_data
        ]

    @property
    def output_names(self) -> list[str]:
        return [a.name for a in self.program.anchors if a.direction == Direction.OUTPUT]

    def summary(self) -> str:
        return self.program.summary()

    def report(self) -> IPUModelReport:
        """The IPU Model's memory and cycle estimate (recomputed from the program, so a loaded
        PopEF file reports what the compiler saw; docs/ipu-model.md)."""
        if self._report is None:
            self._report = estimate(self.program)
        return self._report

    @property
    def fits(self) -> bool:
        """False when compiled with `debug.allowOutOfMemory` although it does not fit."""
        if not Settings.of(self.program).allow_out_of_memory:
            return True  # the compiler refused anything that does not fit
        return self.report().fits

    def __repr__(self) -> str:
        if self._program is None and self._native is not None:
            return f"<Executable {self._native.container.file_size} bytes>"
        if self._program is None and self._bytes is not None:
            return f"<Executable {len(self._bytes)} bytes>"
        p = self.program
        label = "" if self.fits else f", {NOT_FIT_LABEL}"
        return (
            f"<Executable {len(p.anchors)} anchors, {p.num_subgraphs} subgraph(s), "
            f"arena {p.arena_size} bytes{label}>"
        )
