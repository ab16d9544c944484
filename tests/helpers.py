"""Helpers for tests that run pyipu's command-line tools and build tools in subprocesses."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


def tool(name: str) -> str:
    """A console script installed next to this interpreter (pyipu, popef_dump, meson...)."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (pip install '.[test]')")
    return found


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env
