"""Build the C core with meson and run its unit tests and the C embedding example (meson test).

The 'stress' suite (long ring stress) is left to tests/test_c_sanitizers.py, which runs it under
ThreadSanitizer."""

from __future__ import annotations

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
    for name in (
        "test_ring",
        "test_container",
        "test_kernels",
        "test_kernels_eltwise",
        "test_kernels_gemm",
        "test_kernels_wino",
        "test_conv_plans",
        "test_vmath",
        "test_executable",
        "test_runtime",
        "test_cancel",
        "test_session",
        "test_serving",
        "test_overlap",
        "test_inline",
        "test_pool",
        "test_trace",
        "test_oom",
        "test_oom_popef",
        "example_embed",
        "example_callbacks",
        "fuzz_replay_container",
        "fuzz_replay_metadata",
        "fuzz_replay_bytecode",
    ):
        assert name in result.stdout
    assert "ring_stress" not in result.stdout
    assert " 0 failed" in result.stdout or "Fail:              0" in result.stdout
