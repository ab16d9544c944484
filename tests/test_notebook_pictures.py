"""The pixel checks the browser test runs on the profile pictures accept right pictures and reject
broken ones: a heat map scaled to the fullest tile instead of the tile capacity, a timeline with
an empty lane."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("PIL")

import notebook_pictures as P  # noqa: E402

from pyipu import demo  # noqa: E402
from pyipu.compiler import Compiler, CompilerOptions  # noqa: E402


def _report(num_io_tiles: int) -> object:
    options = CompilerOptions()
    options.batches_per_step = 4
    options.num_io_tiles = num_io_tiles
    return Compiler.compile(demo.demo_model(), None, options).report()


@pytest.fixture(scope="module", params=[0, 4], ids=["no-io-tiles", "io-tiles"])
def report(request):
    return _report(request.param)


def _events(kinds: list[int], n: int = 200) -> np.ndarray:
    """n iterations of load 20 us, compute 100 us, store 20 us (only the given kinds)."""
    from pyipu.runtime.tracepoints import EVENT_DTYPE

    rows = []
    for i in range(n):
        t = i * 150_000
        spans = {1: (t, t + 20_000), 2: (t + 20_000, t + 120_000), 3: (t + 120_000, t + 140_000)}
        rows += [(s, e, k, 0, i, 0) for k, (s, e) in spans.items() if k in kinds]
    return np.array(rows, dtype=EVENT_DTYPE)


def test_heatmap_check(report) -> None:
    from pyipu.magics import pictures

    cap = report.target.memory_bytes_per_tile
    assert np.median(report.memory) < 0.05 * cap  # a small model, on most tiles
    assert P.heatmap_problems(pictures.memory_heatmap(report)) == []
    # the same memory scaled to its fullest tile: nearly every tile is the top colour
    full = dataclasses.replace(
        report,
        target=dataclasses.replace(report.target, memory_bytes_per_tile=int(report.memory.max())),
    )
    problems = P.heatmap_problems(pictures.memory_heatmap(full))
    if report.num_io_tiles:  # the I/O tiles are the fullest: the rest turn a lighter purple
        assert any("low end" in p for p in problems), problems
    else:  # nearly every tile is the fullest: top colours
        assert any("top colours" in p for p in problems), problems


def test_timeline_check() -> None:
    from pyipu.magics import pictures

    from pyipu.runtime.tracepoints import KINDS

    lanes = P.kind_lanes()
    assert [name for name, _ in lanes] == ["load", "compute", "store"]
    png = pictures.timeline(_events([1, 2, 3]), KINDS, "all lanes")
    assert P.timeline_problems(png, lanes) == []
    for missing, name in KINDS.items():
        kept = [k for k in KINDS if k != missing]
        problems = P.timeline_problems(pictures.timeline(_events(kept), KINDS, "gap"), lanes)
        assert len(problems) == 1 and f"lane {name} " in problems[0], problems
    # each lane is read where it is drawn: lanes in the wrong order fail
    problems = P.timeline_problems(png, [lanes[1], lanes[0], lanes[2]])
    assert len(problems) == 2, problems
