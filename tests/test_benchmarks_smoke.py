"""The side-by-side benchmark harness on its smallest case, so it cannot rot: pytest-benchmark
runs benchmarks/bench_vs_ort.py in quick mode on the fusion seed model 0 at 1 thread (pyipu,
ORT IOBinding, ORT run), then tools/perf_table.py renders the JSON. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_side_by_side_harness_quick(repo, tmp_path):
    pytest.importorskip("pytest_benchmark")
    out = tmp_path / "bench.json"
    subprocess.run(
        [
            sys.executable, "-P", "-m", "pytest", "-q", "--bench-quick",
            str(repo / "benchmarks" / "bench_vs_ort.py"),
            "-k", "fusion_model0-1T",
            f"--benchmark-json={out}",
        ],
        cwd=repo, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    data = json.loads(out.read_text())
    engines = {b["extra_info"]["engine"] for b in data["benchmarks"]}
    assert engines == {"pyipu", "ort", "ort_run"}
    table = subprocess.run(
        [sys.executable, str(repo / "tools" / "perf_table.py"), str(out)],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    (row,) = [line for line in table.splitlines() if line.startswith("| fusion_model0 | 1 |")]
    cells = [c.strip(" *") for c in row.strip("|").split("|")]
    assert all(c.endswith(("µs", "ms")) for c in cells[2:5]), row  # three latencies
    assert float(cells[5]) > 0 and float(cells[6]) > 0, row


def test_pass_ab_tool(repo):
    """tools/pass_ab.py compiles with and without a pass and reports both (no timing asserted)."""
    out = subprocess.run(
        [sys.executable, "-P", str(repo / "tools" / "pass_ab.py"), "fuse_affine_chains",
         "fusion_model0", "--rounds", "2"],
        cwd=repo, check=True, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    assert "max rel. diff 0.0e+00" in out, out
    assert out.count("instructions") == 2 and "with/without" in out, out


def test_train_side_by_side_quick(repo):
    """benchmarks/train_side_by_side.py on the MLP at 1 thread, two steps a round: the
    throughput row and both engines' peak RSS (children of their own). No timing asserted."""
    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, "-P", str(repo / "benchmarks" / "train_side_by_side.py"), "mlp",
         "--threads", "1", "--steps", "2", "--seconds", "0.2", "--rss-rounds", "1"],
        cwd=repo, check=True, capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    (row,) = [line for line in out.splitlines() if line.startswith("| mlp | 32 | 1 |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[3].replace(",", "")) > 0 and float(cells[5]) > 0, row
    (rss,) = [line for line in out.splitlines() if line.startswith("| mlp |") and "MB" in line]
    pyipu_mb, torch_mb = (float(c.split()[0]) for c in rss.strip("|").split("|")[1:3])
    assert 0 < pyipu_mb < torch_mb, rss  # pyipu's child does not import torch
