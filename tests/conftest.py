"""Shared test set-up. Tests import the installed pyipu (pytest runs in importlib mode); this
directory goes on sys.path so tests can import their helper modules (models, helpers)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`isa_level`: the test runs once per instruction-set level this CPU runs, forced for every
    kernel family (pyipu._core.set_isa), so each SIMD variant meets the reference."""
    if "isa_level" in metafunc.fixturenames:
        from pyipu import _core

        names = {level: name for name, level in _core.ISA_LEVELS.items()}
        levels = [level for level in sorted(names) if level <= _core.isa_best()]
        metafunc.parametrize("isa_level", levels, ids=[names[lv] for lv in levels], indirect=True)


@pytest.fixture
def isa_level(request: pytest.FixtureRequest) -> Iterator[int]:
    from pyipu import _core

    assert _core.set_isa(request.param) == request.param
    yield request.param
    _core.set_isa(0)


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
