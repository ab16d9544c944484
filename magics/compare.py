"""`%ipu compare A B ...`: several runs, or several executables, side by side, as a pandas
DataFrame when pandas is installed, else as a table with an HTML representation."""

from __future__ import annotations

from typing import Any

from . import html as H
from .run import RunResult

RUN_COLUMNS = (
    "run",
    "state",
    "completed",
    "failed",
    "seconds",
    "requests/s",
    "batches/s",
    "p50 ms",
    "p99 ms",
    "threads",
    "vs first",
)


def _row(label: str, r: RunResult, first: RunResult) -> tuple[Any, ...]:
    state = "interrupted" if r.interrupted else ("done" if not r.failed else "failed")
    speedup = r.throughput_rps / first.throughput_rps if first.throughput_rps > 0 else float("nan")
    return (
        label,
        state,
        r.completed,
        r.failed,
        round(r.seconds, 3),
        round(r.throughput_rps, 1),
        round(r.throughput_rps * r.batch, 1),
        round(r.latency_p50_ms, 3),
        round(r.latency_p99_ms, 3),
        r.threads,
        round(speedup, 3),
    )


# the IPU Model's estimates of executables
EXECUTABLE_COLUMNS = (
    "executable",
    "fits",
    "anchors",
    "memory MiB",
    "fullest tile KiB",
    "batch cycles",
    "latency us",
    "batches/s",
    "vs first",
)


def _executable_row(label: str, exe: Any, first: Any) -> tuple[Any, ...]:
    rep, base = exe.report(), first.report()
    speedup = rep.throughput / base.throughput if base.throughput > 0 else float("nan")
    return (
        label,
        rep.fits,
        len(exe.program.anchors),
        round(float(rep.memory.sum()) / 2**20, 2),
        round(float(rep.memory.max()) / 1024, 1),
        rep.batch_cycles,
        round(rep.latency_s * 1e6, 2),
        round(rep.throughput, 1),
        round(speedup, 3),
    )


class RunTable:
    """The comparison without pandas: `columns`, `rows`, and an HTML table."""

    def __init__(self, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        self.columns = columns
        self.rows = rows

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{H.esc(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{H.esc(v)}</td>" for v in row) + "</tr>" for row in self.rows
        )
        return f'<table class="ipu-compare"><tr>{head}</tr>{body}</table>'

    def __repr__(self) -> str:
        return "\n".join("  ".join(str(v) for v in row) for row in [self.columns, *self.rows])


def compare(items: list[tuple[str, Any]]) -> Any:
    """RunResults or Executables as rows; the first is the baseline of "vs first" (a
    throughput ratio)."""
    first = items[0][1]
    if isinstance(first, RunResult):
        columns = RUN_COLUMNS
        rows = [_row(label, r, first) for label, r in items]
    else:
        columns = EXECUTABLE_COLUMNS
        rows = [_executable_row(label, e, first) for label, e in items]
    try:
        import pandas as pd
    except ImportError:
        return RunTable(columns, rows)
    return pd.DataFrame(rows, columns=list(columns)).set_index(columns[0])
