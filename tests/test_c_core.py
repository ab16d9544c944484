"""Build the C core with meson and run its unit tests and the C embedding example (meson test).

The 'stress' suite (long ring stress) is left to tests/test_c_sanitizers.py, which runs it under
ThreadSanitizer."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from helpers import subprocess_env, tool


@pytest.mark.slow
def test_meson_test(repo, tmp_path):
    build = tmp_path / "build"
    env = subprocess_env()
    setup = subprocess.run(
        [tool("meson"), "setup", str(build), str(repo), "-Dtests=true", "--werror"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    result = subprocess.run(
        [tool("meson"), "test", "-C", str(build), "--print-errorlogs", "--no-suite", "stress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    # every test meson.build defines (meson introspect), less the stress suite, ran and passed
    listed = subprocess.run(
        [tool("meson"), "introspect", "--tests", str(build)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    names = [
        t["name"]
        for t in json.loads(listed.stdout)
        if not any(s.endswith("stress") for s in t["suite"])
    ]
    assert len(names) >= 20, names
    for name in names:
        assert re.search(rf"[ :]{re.escape(name)} +OK ", result.stdout), name
    assert "ring_stress" not in result.stdout
    assert " 0 failed" in result.stdout or "Fail:              0" in result.stdout
