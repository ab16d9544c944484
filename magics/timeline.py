"""`%ipu timeline`: a recorded run's load / compute / store lanes with zoom and pan.

The lanes are an inline SVG redrawn by the kernel for the window shown: intervals narrower than
two pixels are drawn two pixels wide and neighbours closer than a pixel merged, so 50 µs loads
beside 50 ms computes stay visible and a window of any length draws at most a few thousand
shapes. The drawing is a plain HTML output that the controls (ipywidgets: a range slider, zoom
and pan buttons) update in place, so a saved or exported notebook shows the last window drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import html as H

_COLORS = {"load": "#ff7f0e", "compute": "#1f77b4", "store": "#2ca02c"}
WIDTH, LABEL_W, LANE_H, AXIS_H = 900, 90, 20, 34
MIN_PX = 2.0  # the narrowest interval drawn
MIN_SPAN_NS = 1000  # the deepest zoom: a 1 µs window
_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@dataclass
class TimelineView:
    """Zoomable timeline of `events` (pyipu.runtime.tracepoints, times in ns). `window` is
    the (start, end) shown, in ns since the first event."""

    name: str
    events: np.ndarray = field(repr=False)
    kinds: dict[int, str] = field(repr=False)
    window: tuple[int, int] = (0, 0)
    _handle: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.t0 = int(self.events["start_ns"].min()) if len(self.events) else 0
        self.span = int(self.events["end_ns"].max()) - self.t0 if len(self.events) else 1
        self.span = max(self.span, MIN_SPAN_NS)
        if self.window == (0, 0):
            self.window = (0, self.span)

    # --- navigation ------------------------------------------------------------------------
    def set_window(self, start_ns: float, end_ns: float) -> None:
        """Show [start, end) ns since the first event, clamped to the run, at least 1 µs."""
        width = min(max(end_ns - start_ns, MIN_SPAN_NS), self.span)
        start = min(max(start_ns, 0), self.span - width)
        self.window = (int(start), int(start + width))
        self._redraw()

    def zoom(self, factor: float) -> None:
        """Zoom in (factor > 1) or out around the window's centre."""
        lo, hi = self.window
        mid, half = (lo + hi) / 2, (hi - lo) / 2 / factor
        self.set_window(mid - half, mid + half)

    def pan(self, fraction: float) -> None:
        """Move the window by a fraction of its width (negative: earlier)."""
        lo, hi = self.window
        shift = (hi - lo) * fraction
        self.set_window(lo + shift, hi + shift)

    def reset(self) -> None:
        self.set_window(0, self.span)

    # --- drawing ---------------------------------------------------------------------------
    def lanes(self) -> list[tuple[str, np.ndarray]]:
        """(label, events) per lane: each stage of each replica."""
        replicas = sorted({int(r) for r in self.events["replica"]}) or [0]
        out = []
        for replica in replicas:
            for value, name in sorted(self.kinds.items()):
                sel = self.events[
                    (self.events["kind"] == value) & (self.events["replica"] == replica)
                ]
                out.append((name if len(replicas) == 1 else f"{name} r{replica}", sel))
        return out

    def svg(self) -> str:
        lo, hi = self.window
        scale = WIDTH / (hi - lo)
        lanes = self.lanes()
        height = len(lanes) * LANE_H + AXIS_H
        parts = [
            f'<svg class="ipu-timeline" xmlns="http://www.w3.org/2000/svg" '
            f'width="{LABEL_W + WIDTH + 10}" height="{height}" font-family="sans-serif" '
            f'font-size="11" data-window="{lo},{hi}">',
            f'<rect x="{LABEL_W}" y="0" width="{WIDTH}" height="{len(lanes) * LANE_H}" '
            'fill="#fafafa" stroke="#bbb"/>',
        ]
        for row, (label, sel) in enumerate(lanes):
            y = row * LANE_H
            name = label.split()[0]
            parts.append(
                f'<text x="{LABEL_W - 6}" y="{y + 14}" text-anchor="end" fill="#555">'
                f"{H.esc(label)}</text>"
            )
            shapes = _merged(sel, self.t0 + lo, self.t0 + hi, scale)
            parts.append(f'<g class="ipu-lane-{H.esc(name)}" fill="{_COLORS.get(name, "#777")}">')
            for x0, x1, n, first in shapes:
                tip = f"{n} {name}s" if n > 1 else f"{name}: {H.duration(first / 1e9)}"
                parts.append(
                    f'<rect x="{LABEL_W + x0:.1f}" y="{y + 3}" width="{x1 - x0:.1f}" '
                    f'height="{LANE_H - 6}"><title>{H.esc(tip)}</title></rect>'
                )
            parts.append("</g>")
        parts += _axis(lo, hi, len(lanes) * LANE_H)
        parts.append("</svg>")
        return "".join(parts)

    def _repr_html_(self) -> str:
        lo, hi = self.window
        head = (
            f"<b>Timeline of {H.esc(self.name)}</b>: {len(self.events)} events; showing "
            f"{H.duration(lo / 1e9)} – {H.duration(hi / 1e9)} of {H.duration(self.span / 1e9)}"
        )
        # the drawing keeps a light background of its own: readable under a dark theme
        return (
            f'<div class="ipu-timeline-view">{head}<div style="background:#fff;'
            f'display:inline-block;padding:4px">{self.svg()}</div></div>'
        )

    # --- live view -------------------------------------------------------------------------
    def _redraw(self) -> None:
        if self._handle is not None:
            from IPython.display import HTML

            self._handle.update(HTML(self._repr_html_()))

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        self._handle = display(HTML(self._repr_html_()), display_id=True)
        controls = self.controls()
        if controls is not None:  # without a kernel (an exported page) a note, not a repr
            view = {"version_major": 2, "version_minor": 0, "model_id": controls.model_id}
            note = "(zoom and pan controls: they need a running kernel)"
            display({_WIDGET_VIEW: view, "text/plain": note}, raw=True)

    def controls(self) -> Any:
        """The zoom / pan widgets bound to this view (None without ipywidgets)."""
        try:
            import ipywidgets as W
        except ImportError:
            return None
        ms = self.span / 1e6
        slider = W.FloatRangeSlider(
            value=(self.window[0] / 1e6, self.window[1] / 1e6),
            min=0.0,
            max=ms,
            step=ms / 1000,
            description="window ms",
            continuous_update=False,
            readout_format=".3f",
            layout=W.Layout(width="100%"),
        )
        slider.add_class("ipu-timeline-window")
        syncing = [False]

        def from_slider(change: dict[str, Any]) -> None:
            if not syncing[0]:
                lo, hi = change["new"]
                self.set_window(lo * 1e6, hi * 1e6)

        slider.observe(from_slider, names="value")

        def act(fn: Any) -> Any:
            def run(_button: Any) -> None:
                fn()
                syncing[0] = True
                slider.value = (self.window[0] / 1e6, self.window[1] / 1e6)
                syncing[0] = False

            return run

        buttons = []
        for text, tip, fn in (
            ("＋", "zoom in ×2", lambda: self.zoom(2)),
            ("－", "zoom out ×2", lambda: self.zoom(0.5)),
            ("◀", "earlier by half a window", lambda: self.pan(-0.5)),
            ("▶", "later by half a window", lambda: self.pan(0.5)),
            ("all", "the whole run", self.reset),
        ):
            b = W.Button(description=text, tooltip=tip, layout=W.Layout(width="52px"))
            b.on_click(act(fn))
            buttons.append(b)
        box = W.VBox([W.HBox(buttons), slider])
        box.add_class("ipu-timeline-controls")
        return box


def timeline(name: str, run: Any) -> TimelineView:
    from IPython.core.error import UsageError

    from pyipu.runtime.tracepoints import KINDS

    trace = getattr(run, "trace", None)
    if trace is None or not len(trace):
        raise UsageError(f"{name}: not a RunResult of `%ipu run ... --record` with events")
    return TimelineView(name, trace.events, KINDS)


def _merged(sel: np.ndarray, lo: int, hi: int, scale: float) -> list[tuple[float, float, int, int]]:
    """(x0, x1, how many, first one's ns) per drawn shape: the events overlapping [lo, hi) in
    pixels, each at least MIN_PX wide, neighbours closer than a pixel merged."""
    keep = sel[(sel["end_ns"] > lo) & (sel["start_ns"] < hi)]
    keep = keep[np.argsort(keep["start_ns"], kind="stable")]
    x0 = np.clip((keep["start_ns"].astype(np.int64) - lo) * scale, 0, WIDTH)
    x1 = np.clip((keep["end_ns"].astype(np.int64) - lo) * scale, 0, WIDTH)
    x1 = np.minimum(np.maximum(x1, x0 + MIN_PX), WIDTH)
    x0 = np.minimum(x0, x1 - MIN_PX)
    dur = (keep["end_ns"].astype(np.int64) - keep["start_ns"].astype(np.int64)).tolist()
    out: list[tuple[float, float, int, int]] = []
    for a, b, d in zip(x0.tolist(), x1.tolist(), dur, strict=True):
        if out and a <= out[-1][1] + 1.0:
            p = out[-1]
            out[-1] = (p[0], max(p[1], b), p[2] + 1, p[3])
        else:
            out.append((a, b, 1, d))
    return out


def _axis(lo: int, hi: int, y: int) -> list[str]:
    """Tick marks and labels at round times (ns, µs or ms) along the bottom."""
    span = hi - lo
    step = 10 ** math.floor(math.log10(span / 6))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 8:
            step *= m
            break
    unit, div = ("ms", 1e6) if step >= 1e5 else ("µs", 1e3) if step >= 100 else ("ns", 1.0)
    out = [f'<line x1="{LABEL_W}" x2="{LABEL_W + WIDTH}" y1="{y}" y2="{y}" stroke="#777"/>']
    t = math.ceil(lo / step) * step
    while t <= hi:
        x = LABEL_W + (t - lo) / span * WIDTH
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + 5}" stroke="#777"/>')
        out.append(
            f'<text x="{x:.1f}" y="{y + 17}" text-anchor="middle" fill="#555">{t / div:g}</text>'
        )
        t += step
    out.append(
        f'<text x="{LABEL_W + WIDTH}" y="{y + 31}" text-anchor="end" fill="#555">'
        f"{unit} since the first event</text>"
    )
    return out
