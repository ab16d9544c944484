"""`%ipu profile`: the IPU Model's pictures of an executable and the timeline of a recorded run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import html as H
from . import pictures

CAPTIONS = {
    "memory": "Per-tile memory (IPU Model estimate, peak over the program)",
    "categories": "What fills tile memory, by category (IPU Model estimate)",
    "liveness": "Memory live over the program, all tiles, by category (IPU Model estimate)",
    "cycles": "Estimated cycles per instruction (IPU Model)",
    "timeline": "Load / compute / store timeline of a recorded run (measured)",
}


@dataclass
class ProfileResult:
    """`figures`: name ("memory", "categories", "liveness", "cycles", "timeline") -> PNG bytes;
    `overlap`:
    the share of load+store time that overlapped compute in the recorded run (None without a
    timeline)."""

    name: str
    figures: dict[str, bytes] = field(repr=False)
    overlap: float | None = None
    notes: list[str] = field(default_factory=list)

    def _repr_html_(self) -> str:
        parts = [f'<div class="ipu-profile"><b>Profile of {H.esc(self.name)}</b>']
        for key, png in self.figures.items():
            parts.append(
                f'<figure class="ipu-figure-{H.esc(key)}">{H.image(png, CAPTIONS[key])}'
                f"<figcaption>{H.esc(CAPTIONS[key])}</figcaption></figure>"
            )
        parts += [f"<div><i>{H.esc(n)}</i></div>" for n in self.notes]
        return "".join(parts) + "</div>"

    def _repr_png_(self) -> bytes:
        return next(iter(self.figures.values()))


def profile(name: str, exe: Any, ipu: int, top: int, run: Any | None, notes: list[str]) -> Any:
    """Pictures of `exe`; the timeline from `run` (a RunResult with a trace) when given."""
    from pyipu.runtime.tracepoints import KINDS

    report = exe.report()
    if not 0 <= ipu < report.num_ipus:
        from IPython.core.error import UsageError

        raise UsageError(f"--ipu {ipu}: the executable has {report.num_ipus} IPU(s)")
    figures = {
        "memory": pictures.memory_heatmap(report, ipu),
        "categories": pictures.memory_categories(report, ipu),
        "liveness": pictures.liveness(report),
        "cycles": pictures.instruction_cycles(report, top),
    }
    overlap = None
    if run is not None and run.trace is not None and len(run.trace):
        events = run.trace.events
        io = "overlap I/O" if report.num_io_tiles else "no overlap I/O"
        figures["timeline"] = pictures.timeline(events, KINDS, f"Run of {run.name} ({io})")
        overlap = pictures.overlap_share(events, KINDS)
        if run.trace.dropped:
            notes.append(f"{run.trace.dropped} older events were dropped (buffer full)")
    return ProfileResult(name, figures, overlap, notes)
