"""`%ipu timeline` (zoom / pan over a recorded run) and the liveness picture of `%ipu profile`."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from magics_shell import magic, require_notebook_libraries, shell, small_model

from pyipu.compiler import Compiler, Executable
from pyipu.runtime.tracepoints import EVENT_DTYPE, KINDS

require_notebook_libraries()

from IPython.core.error import UsageError  # noqa: E402
from pyipu.magics import pictures  # noqa: E402
from pyipu.magics.timeline import MIN_PX, WIDTH, TimelineView  # noqa: E402

MS = 1_000_000
KIND = {name: value for value, name in KINDS.items()}


def _events(iterations: int = 40) -> np.ndarray:
    """50 ms computes, each after a 50 µs load and before a 50 µs store, 1 ms apart."""
    ev = np.zeros(3 * iterations, EVENT_DTYPE)
    for i in range(iterations):
        t = i * 51 * MS
        for j, (kind, start, dur) in enumerate(
            (
                ("load", t, 50_000),
                ("compute", t + 100_000, 50 * MS),
                ("store", t + 50 * MS + 200_000, 50_000),
            )
        ):
            ev[3 * i + j] = (start, start + dur, KIND[kind], 0, i, 0)
    return ev[np.argsort(ev["start_ns"], kind="stable")]


def _rects(svg: str, lane: str) -> list[tuple[float, float]]:
    group = re.search(rf'<g class="ipu-lane-{lane}"[^>]*>(.*?)</g>', svg)
    assert group is not None
    return [
        (float(x), float(w))
        for x, w in re.findall(r'<rect x="([\d.]+)" y="\d+" width="([\d.]+)"', group.group(1))
    ]


def test_short_loads_stay_visible_beside_long_computes() -> None:
    view = TimelineView("r", _events(), KINDS)
    svg = view.svg()
    loads, computes = _rects(svg, "load"), _rects(svg, "compute")
    assert loads and all(w >= MIN_PX - 1e-6 for _, w in loads)
    assert len(computes) <= 40 and sum(w for _, w in computes) > 0.9 * WIDTH
    assert all(90 <= x <= 90 + WIDTH for x, _ in loads + computes)


def test_zoom_and_pan_move_the_window_and_redraw() -> None:
    view = TimelineView("r", _events(), KINDS)
    drawn: list[str] = []

    class Handle:  # records what IPython's DisplayHandle.update would show
        def update(self, obj: Any) -> None:
            drawn.append(obj.data)

    view._handle = Handle()
    full = view.window
    view.zoom(10)
    lo, hi = view.window
    assert hi - lo == pytest.approx((full[1] - full[0]) / 10, rel=1e-6)
    assert drawn and f'data-window="{lo},{hi}"' in drawn[-1]
    view.pan(0.5)
    assert view.window[0] == pytest.approx(lo + (hi - lo) / 2, abs=1)
    view.set_window(-5 * MS, 1 * MS)  # clamped to the run's start
    assert view.window[0] == 0
    view.set_window(10 * MS, 10 * MS)  # at least a microsecond
    assert view.window[1] - view.window[0] == 1000
    view.pan(1e9)  # clamped to the run's end
    assert view.window[1] == view.span
    view.reset()
    assert view.window == full
    # a 1 ms window around one load draws it wide, one shape, with its duration
    t = 20 * 51 * MS
    view.set_window(t - MS // 2, t + MS // 2)
    (load,) = _rects(drawn[-1], "load")
    assert load[1] == pytest.approx(WIDTH * 0.05, rel=0.01)
    assert "load: 50 µs" in drawn[-1]


def test_controls_drive_the_view() -> None:
    view = TimelineView("r", _events(), KINDS)
    box = view.controls()
    buttons, slider = box.children[0].children, box.children[1]
    by_text = {b.description: b for b in buttons}
    by_text["＋"].click()
    assert view.window[1] - view.window[0] == pytest.approx(view.span / 2, rel=1e-6)
    assert slider.value == pytest.approx((view.window[0] / MS, view.window[1] / MS))
    slider.value = (100.0, 200.0)
    assert view.window == (100 * MS, 200 * MS)
    by_text["all"].click()
    assert view.window == (0, view.span)


@pytest.fixture(scope="module")
def ip() -> Any:
    ip = shell()
    ip.user_ns["small"] = small_model()
    ip.user_ns["exe"] = magic(ip, "compile small -q --batches-per-step 2")
    ip.user_ns["rec"] = magic(ip, "run exe --requests 16 --record --no-widgets")
    ip.user_ns["plain"] = magic(ip, "run exe --requests 4 --no-widgets")
    return ip


def test_timeline_magic(ip: Any) -> None:
    view = magic(ip, "timeline rec --window 0,0.5")
    assert isinstance(view, TimelineView) and view.window[1] <= 0.5 * MS
    assert 'class="ipu-timeline"' in view._repr_html_()
    with pytest.raises(UsageError, match="--record"):
        magic(ip, "timeline plain")
    with pytest.raises(UsageError, match="START < END"):
        magic(ip, "timeline rec --window 2,1")


def test_liveness_follows_the_program() -> None:
    exe: Executable = Compiler.compile(small_model())
    rep = exe.report()
    (live,) = rep.liveness
    n = len(live.instructions)
    assert live.programs == (1,) and n == len(rep.instructions)
    assert all(v.shape == (n + 2,) for v in live.bytes.values())
    assert (live.bytes["weights"] == rep.categories["weights"].sum()).all()
    # h (x @ W) is live while the Relu reads it, not before the MatMul runs
    assert live.bytes["activations"][0] < live.bytes["activations"][1]
    assert live.total.max() <= rep.memory.sum()  # each tile's peak bounds its share
    png = pictures.liveness(rep)
    assert png.startswith(b"\x89PNG")
