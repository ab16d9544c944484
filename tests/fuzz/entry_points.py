"""The Python entry points under fuzzing, shared by the atheris target (fuzz_python.py) and the
hypothesis tests (tests/test_fuzz_python.py). Each lets only pyipu.Error through, so anything
else that escapes is a finding."""

from __future__ import annotations

import warnings
from pathlib import Path

import pyipu
from pyipu import runtime
from pyipu.compiler import Compiler
from pyipu.compiler.executable import Executable


def compile_onnx(data: bytes) -> None:
    """Compile ONNX bytes; what the compiler produced must then load."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exe = Compiler.compile(data)
        runtime.Runner(exe).close()
    except pyipu.Error:
        pass


def load_popef(data: bytes, path: Path | None = None) -> None:
    """Load a PopEF image: the C reader and verifier (runtime.Runner), the pure-Python decoder,
    and, given a path, the memory-mapped file."""
    try:
        runtime.Runner(data).close()
    except pyipu.Error:
        pass
    try:
        Executable.from_bytes(data).program  # noqa: B018 - the pure-Python decoder
    except pyipu.Error:
        pass
    if path is not None:
        path.write_bytes(data)
        try:
            Executable.open(path)
        except pyipu.Error:
            pass
