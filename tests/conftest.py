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
