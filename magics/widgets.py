"""Live ipywidgets: the compile progress bar and the run dashboard, and the thread updating it.

Widgets are created and displayed on the cell's thread; the Monitor thread only sets their
traits (each set is one comm message, sent at once even while the cell is busy). The thread
exists only while a run does, so nothing polls when nothing runs. When the work ends, the
widget's output is replaced by static HTML of its final state (`Live.settle`), which a saved
notebook, nbviewer or an HTML export shows without a kernel.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as W

from . import html as H

REFRESH_S = 0.2  # 5 Hz: smooth in JupyterLab, negligible next to a run
CHART_POINTS = 120


@dataclass(frozen=True)
class Sample:
    """One reading of Runner.stats() during a run."""

    t: float  # seconds since the run started
    submitted: int
    completed: int
    failed: int
    throughput_rps: float
    latency_p50_ns: int
    latency_p99_ns: int
    queue_depth: dict[str, int] = field(default_factory=dict)


class Live:
    """A widget shown in the cell's output until `settle(html)` replaces it with static HTML."""

    def __init__(self, widget: Any) -> None:
        self.widget = widget
        self._handle: Any = None

    def show(self, display: Callable[..., Any]) -> None:
        self._handle = display(self.widget, display_id=True)

    def settle(self, html: str) -> None:
        if self._handle is not None:
            from IPython.display import HTML

            self._handle.update(HTML(html))


class CompileProgress:
    """A progress bar fed by CompilerOptions.compilation_progress_logger, then the summary."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.bar = W.IntProgress(value=0, min=0, max=1, description="Compiling")
        self.label = W.Label(value=title)
        self.box = W.VBox([W.HBox([self.bar, self.label])], _dom_classes=["ipu-compile"])
        self.live = Live(self.box)

    def __call__(self, step: int, total: int) -> None:
        self.bar.max = max(total, 1)
        self.bar.value = min(step, self.bar.max)

    def done(self, summary_html: str) -> None:
        self.bar.bar_style = "success"
        self.box.children = (*self.box.children, W.HTML(summary_html))
        self.live.settle(f'<div class="ipu-compile">{summary_html}</div>')

    def failed(self, message: str) -> None:
        self.bar.bar_style = "danger"
        self.label.value = message
        self.live.settle(
            f'<div class="ipu-compile"><b>{H.esc(self.title)}</b>: failed: {H.esc(message)}</div>'
        )


# The chart's colours follow JupyterLab's theme (light fallbacks outside JupyterLab); the
# line's mid blue reads on light and dark backgrounds.
_LINE = "var(--jp-border-color2, #ddd)"
_BACKGROUND = "var(--jp-layout-color1, #fafafa)"
_TEXT = "var(--jp-ui-font-color1, #555)"


def sparkline(
    values: Sequence[float],
    width: int = 320,
    height: int = 60,
    title: str = "throughput",
    unit: str = " req/s",
    fmt: str = ",.0f",
) -> str:
    """An inline SVG line chart (no JavaScript library: renders offline and in exports); the
    caption shows the last value and the largest."""
    pts = list(values)[-CHART_POINTS:]
    top = max(pts) if pts and max(pts) > 0 else 1.0
    n = len(pts)
    coords = " ".join(
        f"{(i * (width - 4) / max(n - 1, 1)) + 2:.1f},{height - 2 - v / top * (height - 14):.1f}"
        for i, v in enumerate(pts)
    )
    last = f"{pts[-1]:{fmt}}{unit}" if pts else "no data yet"
    return (
        f'<svg class="ipu-{H.esc(title)}" data-n="{n}" width="{width}" height="{height}" '
        f'style="border:1px solid {_LINE};background:{_BACKGROUND}">'
        f'<text x="4" y="11" font-size="10" style="fill:{_TEXT}">{H.esc(title)}: {H.esc(last)} '
        f"(max {top:{fmt}})</text>"
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{coords}"/></svg>'
    )


class RunDashboard:
    """Request progress, per-anchor queue depth bars, throughput chart, latency p50/p99."""

    def __init__(
        self,
        title: str,
        anchors: Sequence[str],
        queue_capacity: int,
        total_requests: int | None,
        seconds: float | None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.total = total_requests
        self.seconds = seconds
        # CSS classes given at construction travel in the widget's first (comm_open) message
        self.progress = W.IntProgress(
            value=0,
            min=0,
            max=total_requests or 1000,
            description="Requests",
            _dom_classes=["ipu-requests"],
        )
        self.progress_label = W.Label(value="starting")
        self.queues = {
            name: W.IntProgress(
                value=0,
                min=0,
                max=max(queue_capacity, 1),
                description=name if len(name) <= 18 else name[:17] + "…",
                tooltip=name,
                _dom_classes=["ipu-queue"],
            )
            for name in anchors
        }
        # each bar's depth and capacity as numbers beside it
        self.queue_labels = {name: W.Label(f"0 / {queue_capacity}") for name in anchors}
        self.chart = W.HTML(sparkline([]))
        self.latency = W.Label(value="latency p50 – · p99 –", _dom_classes=["ipu-latency"])
        self.status = W.Label(value="running", _dom_classes=["ipu-status"])
        header: list[Any] = [self.progress, self.progress_label]
        self.stop_button = None
        if on_stop is not None:  # clicks arrive only while the kernel is idle: --background
            self.stop_button = W.Button(description="Stop", _dom_classes=["ipu-stop"])
            self.stop_button.on_click(lambda _: on_stop())
            header.append(self.stop_button)
        rows: list[Any] = [
            W.HTML(f"<b>{H.esc(title)}</b>"),
            W.HBox(header),
            W.HTML("<i>queue depth per anchor (slots used / capacity)</i>"),
            *(W.HBox([self.queues[n], self.queue_labels[n]]) for n in self.queues),
            self.chart,
            self.latency,
            self.status,
        ]
        self.box = W.VBox(rows, _dom_classes=["ipu-run"])
        self.live = Live(self.box)
        self.title = title
        self._throughput: list[float] = []

    def update(self, s: Sample) -> None:
        done = s.completed + s.failed
        rate = done / s.t if s.t > 0 else 0.0
        if self.total:
            self.progress.value = min(done, self.total)
            eta = f"{(self.total - done) / rate:.1f} s" if rate > 0 else "–"
            text = f"{done}/{self.total} in {s.t:.1f} s · {rate:,.0f} req/s · ETA {eta}"
        else:
            share = min(s.t / self.seconds, 1.0) if self.seconds else 0.0
            self.progress.value = int(share * self.progress.max)
            of = f"/{self.seconds:g}" if self.seconds else ""
            text = f"{done} requests in {s.t:.1f}{of} s · {rate:,.0f} req/s"
        self.progress_label.value = text
        for name, bar in self.queues.items():
            depth = s.queue_depth.get(name, 0)
            bar.value = min(depth, bar.max)
            self.queue_labels[name].value = f"{depth} / {bar.max}"
        self._throughput = [*self._throughput[-CHART_POINTS + 1 :], s.throughput_rps]
        self.chart.value = sparkline(self._throughput)
        self.latency.value = (
            f"latency p50 {s.latency_p50_ns / 1e6:.3f} ms · p99 {s.latency_p99_ns / 1e6:.3f} ms"
        )

    def finish(self, message: str, ok: bool) -> None:
        if self.stop_button is not None:
            self.stop_button.disabled = True
        self.progress.bar_style = "success" if ok else "warning"
        if self.total is None and ok:  # a --seconds run cut short keeps its partial bar
            self.progress.value = self.progress.max
        self.status.value = message
        self.live.settle(self.static_html())

    def static_html(self) -> str:
        """The dashboard's current state as HTML (no widgets): what a saved notebook shows."""
        bar = self.progress
        queues = H.table(
            ["anchor", "queue slots used / capacity"],
            [(name, self.queue_labels[name].value) for name in self.queues],
        )
        return (
            f'<div class="ipu-run"><b>{H.esc(self.title)}</b><br>'
            f'<progress value="{bar.value}" max="{bar.max}"></progress> '
            f"{H.esc(self.progress_label.value)}{queues}{self.chart.value}"
            f'<div class="ipu-latency">{H.esc(self.latency.value)}</div>'
            f'<div class="ipu-status">{H.esc(self.status.value)}</div></div>'
        )


class Monitor:
    """A thread calling `sample()` and `on_sample(s)` every REFRESH_S until stopped."""

    def __init__(
        self,
        sample: Callable[[], Sample],
        on_sample: Callable[[Sample], None],
        interval: float = REFRESH_S,
    ) -> None:
        self._sample = sample
        self._on_sample = on_sample
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pyipu-magics-monitor", daemon=True)
        self.samples: list[Sample] = []
        self.error: BaseException | None = None

    def start(self) -> Monitor:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._tick()

    def _tick(self) -> None:
        try:
            s = self._sample()
            self.samples.append(s)
            self._on_sample(s)
        except BaseException as e:  # a broken widget must not kill the run: report it at stop
            self.error = e
            self._stop.set()

    def stop(self) -> None:
        """Stop the thread, then take a last sample on the caller's thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.error is None:
            self._tick()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
