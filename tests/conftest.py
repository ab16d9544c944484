"""Shared test set-up. Tests import the installed pyipu (pytest runs in importlib mode); this
directory goes on sys.path so tests can import their helper modules (models, helpers)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))


@pytest.fixture(scope="session")
def repo() -> Path:
    return TESTS.parent


@pytest.fixture
def count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts real compilations (cache misses)."""
    calls: list[int] = []
    from pyipu.compiler import compiler as compiler_module

    real = compiler_module.compile_ir

    def counted(*args: object, **kw: object):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(compiler_module, "compile_ir", counted)
    return calls
