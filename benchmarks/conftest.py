"""Benchmarks share the tests' model builders (tests/models.py) and their own helpers here.

`--bench-quick` runs every case for two short rounds: a smoke run that checks the harness, not
a measurement (tests/test_benchmarks_smoke.py uses it).
"""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--bench-quick",
        action="store_true",
        help="two short rounds per case: check the harness, measure nothing",
    )


@pytest.fixture(scope="session")
def quick(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--bench-quick"))
