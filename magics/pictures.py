"""PNG pictures of the IPU Model report and of recorded runs, drawn with matplotlib's Agg canvas.

Figures are made with `matplotlib.figure.Figure` and rendered by `FigureCanvasAgg` directly:
no pyplot state, no backend switch, so the user's own `%matplotlib` setting is untouched and
rendering from any thread is safe. PNGs survive nbconvert, static HTML and offline viewing.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from . import html as H

GRID_COLS = 46  # 46 x 32 = 1472 tiles, drawn row by row from tile 0
DPI = 100


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI)


def _stacked_bars(
    ax: Any, labels: list[str], parts: list[tuple[str, str, np.ndarray]]
) -> np.ndarray:
    """Horizontal bars, one per label, stacked from `parts` (name, colour, one value per
    label); the legend beside the axes. Returns the bars' totals."""
    y = np.arange(len(labels))
    left = np.zeros(len(labels))
    for name, color, values in parts:
        ax.barh(y, values, left=left, color=color, label=name)
        left += values
    ax.set_yticks(y, labels, fontsize=8)
    _legend_beside(ax)
    return left


def _legend_beside(ax: Any) -> None:
    """The legend right of the axes, never over the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def tile_grid(memory: np.ndarray, cols: int = GRID_COLS) -> np.ndarray:
    """One IPU's per-tile bytes as a rows x cols grid (tile t at row t // cols, col t % cols)."""
    rows = -(-memory.size // cols)
    grid = np.full(rows * cols, np.nan)
    grid[: memory.size] = memory
    return grid.reshape(rows, cols)


def memory_heatmap(report: Any, ipu: int = 0) -> bytes:
    """Peak bytes of every tile of one IPU on the 1472-tile grid; tiles over capacity in red."""
    from matplotlib.colors import ListedColormap

    memory = report.memory[ipu].astype(np.float64)
    cap = report.target.memory_bytes_per_tile
    grid = tile_grid(memory) / 1024
    fig = _figure(9, 6.6)
    ax = fig.add_subplot()
    # colours scale to the tile's capacity, as PopVision's: a model using 2 % of tile memory
    # looks nearly empty, not full
    image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=cap / 1024, interpolation="nearest")
    over = tile_grid(memory > cap)
    if np.nansum(over):
        ax.imshow(np.where(over == 1, 1.0, np.nan), cmap=ListedColormap(["red"]), alpha=0.9)
    io_tiles = report.num_io_tiles
    if io_tiles:  # I/O tiles are the last num_io_tiles of the IPU
        for patch in _tile_outline(memory.size - io_tiles, memory.size, GRID_COLS):
            ax.add_patch(patch)
    bar = fig.colorbar(image, ax=ax, shrink=0.8)
    bar.set_label(f"KiB per tile (peak; scale: the {cap / 1024:.0f} KiB capacity)")
    used = memory[memory > 0]
    ax.set_title(
        f"Tile memory, IPU {ipu} ({report.target.ipu_version}): max {memory.max() / 1024:.1f} "
        f"KiB of {cap / 1024:.0f} KiB, {used.size} of {memory.size} tiles used"
        + (f", {int(np.nansum(over))} over (red)" if np.nansum(over) else "")
        + (f"\nlast {io_tiles} tiles: I/O tiles (outlined)" if io_tiles else ""),
        fontsize=10,
    )
    ax.set_xlabel(f"tile % {GRID_COLS}")
    ax.set_ylabel(f"tile // {GRID_COLS}")
    return _png(fig)


_CATEGORY_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")  # CATEGORIES order


def memory_categories(report: Any, ipu: int = 0) -> bytes:
    """What fills tile memory: the fullest tile's and the average tile's bytes by category
    (weights, activations, io, temporaries, code) against the tile capacity."""
    from pyipu.compiler.ipu_model.report import CATEGORIES

    cap_kib = report.target.memory_bytes_per_tile / 1024
    memory = report.memory[ipu]
    fullest = int(np.argmax(memory))
    rows = {
        f"fullest tile ({fullest})": [report.categories[k][ipu, fullest] for k in CATEGORIES],
        "average tile": [report.categories[k][ipu].mean() for k in CATEGORIES],
    }
    fig = _figure(9, 2.4)
    ax = fig.add_subplot()
    parts = [
        (name, color, np.array([p[i] for p in rows.values()], dtype=np.float64) / 1024)
        for i, (name, color) in enumerate(zip(CATEGORIES, _CATEGORY_COLORS, strict=True))
    ]
    totals = _stacked_bars(ax, list(rows), parts)
    ax.axvline(cap_kib, color="black", linestyle="--", linewidth=1)
    ax.set_xlim(0, max(cap_kib, float(totals.max())) * 1.05)
    ax.set_xlabel(f"KiB (dashed: the {cap_kib:.0f} KiB tile capacity)")
    ax.set_title(
        f"Tile memory by category, IPU {ipu}: fullest tile {memory[fullest] / 1024:.1f} KiB "
        f"({memory[fullest] / report.target.memory_bytes_per_tile:.1%} of capacity)",
        fontsize=10,
    )
    return _png(fig)


def liveness(report: Any) -> bytes:
    """Bytes live over each program, summed over the tiles, stacked by category (PopVision's
    liveness report); the peak marked with the instruction running there."""
    from pyipu.compiler.ipu_model.report import CATEGORIES

    lives = report.liveness
    fig = _figure(10, 3.2)
    ax = fig.add_subplot()
    x0 = 0
    peak = (-1.0, 0, "")
    for lv in lives:
        x = np.arange(x0, x0 + len(lv.instructions) + 2)
        ys = [lv.bytes[k] / 2**20 for k in CATEGORIES]
        ax.stackplot(
            x,
            *ys,
            colors=_CATEGORY_COLORS,
            labels=CATEGORIES if x0 == 0 else None,
            step="mid",
            alpha=0.85,
        )
        total = lv.total / 2**20
        i = int(np.argmax(total))
        if total[i] > peak[0]:
            what = (
                _instruction_label(lv.instructions[i - 1]) if 0 < i <= len(lv.instructions) else ""
            )
            peak = (float(total[i]), int(x[i]), what)
        if x0:
            ax.axvline(x0 - 0.5, color="black", linewidth=0.8)
        x0 += len(lv.instructions) + 2
    if peak[0] >= 0:
        ax.axvline(peak[1], color="black", linestyle="--", linewidth=0.8)
        ax.set_ylim(0, peak[0] * 1.3)  # room above the data for the note
        ax.annotate(
            f"peak {peak[0]:.1f} MiB: {peak[2]}",
            (peak[1], peak[0] * 1.27),
            xytext=(4, 0),
            textcoords="offset points",
            va="top",
            fontsize=8,
        )
    ax.set_xlim(0, max(x0 - 1, 1))
    ax.set_xlabel("position in the program (instruction; 0: before the first)")
    ax.set_ylabel("MiB, all tiles")
    programs = ", ".join(str(p) for lv in lives for p in lv.programs)
    ax.set_title(f"Memory live over the program (program {programs}), by category", fontsize=10)
    _legend_beside(ax)
    return _png(fig)


def _tile_outline(first: int, end: int, cols: int) -> list[Any]:
    """White rectangles around tiles [first, end) of the grid, one per grid row."""
    from matplotlib.patches import Rectangle

    patches = []
    for row in range(first // cols, (end - 1) // cols + 1):
        c0 = max(first - row * cols, 0)
        c1 = min(end - row * cols, cols)
        patches.append(
            Rectangle((c0 - 0.5, row - 0.5), c1 - c0, 1, fill=False, edgecolor="white", lw=1.5)
        )
    return patches


def _instruction_label(c: Any) -> str:
    """ "n140…n142 Conv+BatchNormalization+Relu (conv2d)": the ONNX nodes an instruction
    computes (fused nodes included) and its opcode; a file without sources.py's record gives
    "conv2d → r142 (p1#44)": the value it writes and where it is in the program."""
    if c.node:
        names = c.node.split("+")
        who = names[0] if len(names) == 1 else f"{names[0]}…{names[-1]}"
        return f"{H.short(f'{who} {c.op_type}', 44)} ({c.opcode.lower()})"
    what = f"{c.opcode.lower()} → {H.short(c.output, 32)}" if c.output else c.opcode.lower()
    return f"{what} (p{c.program}#{c.index})"


def instruction_cycles(report: Any, top: int = 30) -> bytes:
    """Estimated compute / exchange / sync cycles of the `top` most expensive instructions."""
    costs = sorted(report.instructions, key=lambda c: -c.cycles)[:top]
    costs = costs[::-1]  # barh draws bottom-up: the most expensive on top
    fig = _figure(9, max(2.5, 0.28 * len(costs) + 1.4))
    ax = fig.add_subplot()
    parts = [
        (part, color, np.array([getattr(c, f"{part}_cycles") for c in costs], dtype=np.float64))
        for part, color in (("compute", "#1f77b4"), ("exchange", "#ff7f0e"), ("sync", "#2ca02c"))
    ]
    _stacked_bars(ax, [_instruction_label(c) for c in costs], parts)
    ax.set_xlabel("estimated cycles per batch (IPU Model)")
    total = sum(c.cycles for c in report.instructions)
    ax.set_title(
        f"Cycles per instruction: top {len(costs)} of {len(report.instructions)} "
        f"({total:,} cycles in all, batch {report.batch_cycles:,})",
        fontsize=10,
    )
    return _png(fig)


def overlap_share(events: np.ndarray, kinds: dict[int, str]) -> float:
    """The share of load+store time spent while some compute was running (0..1)."""
    compute = [v for v, k in kinds.items() if k == "compute"][0]
    comp = events[events["kind"] == compute]
    io_ev = events[events["kind"] != compute]
    io_total = float(np.sum(io_ev["end_ns"] - io_ev["start_ns"]))
    if io_total <= 0 or len(comp) == 0:
        return 0.0
    starts, ends = comp["start_ns"].astype(np.int64), comp["end_ns"].astype(np.int64)
    covered = 0.0
    for s, e in zip(
        io_ev["start_ns"].astype(np.int64), io_ev["end_ns"].astype(np.int64), strict=True
    ):
        lo = np.maximum(starts, s)
        hi = np.minimum(ends, e)
        covered += float(np.clip(hi - lo, 0, None).sum())  # compute intervals do not overlap
    return min(covered / io_total, 1.0)


_KIND_COLORS = {"load": "#ff7f0e", "compute": "#1f77b4", "store": "#2ca02c"}
PER_ITERATION_ROWS = 24


def timeline(events: np.ndarray, kinds: dict[int, str], title: str) -> bytes:
    """Load / compute / store intervals of a recorded run, one lane per stage (per replica),
    above the same events per iteration, aligned at each iteration's compute start: short loads
    and stores next to long computes stay visible there, and so does their overlap."""
    fig = _figure(10, 6.4)
    ax, per = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1, 1.3]})
    t0 = int(events["start_ns"].min()) if len(events) else 0
    lanes = []
    replicas = sorted({int(r) for r in events["replica"]}) if len(events) else [0]
    for replica in replicas:
        for value, name in sorted(kinds.items()):
            sel = events[(events["kind"] == value) & (events["replica"] == replica)]
            y = len(lanes)
            lanes.append(name if len(replicas) == 1 else f"{name} r{replica}")
            ax.broken_barh(
                _spans(sel, t0, _min_width(events)),
                (y - 0.4, 0.8),
                facecolors=_KIND_COLORS[name],
                edgecolor="white",
                linewidth=0.3,
            )
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first recorded event")
    share = overlap_share(events, kinds) if len(events) else 0.0
    ax.set_title(
        f"{title}: {len(events)} events; load+store time overlapping compute: {share:.0%}",
        fontsize=10,
    )
    ax.grid(axis="x", alpha=0.3)
    _per_iteration(per, events, kinds)
    fig.tight_layout()
    return _png(fig)


def _spans(sel: np.ndarray, t0: int, min_ms: float) -> list[tuple[float, float]]:
    """broken_barh spans in ms from t0, at least `min_ms` wide: a 50 us store beside 50 ms
    computes still shows as a line."""
    return [
        ((int(s) - t0) / 1e6, max((int(e) - int(s)) / 1e6, min_ms))
        for s, e in zip(sel["start_ns"], sel["end_ns"], strict=True)
    ]


def _min_width(events: np.ndarray) -> float:
    """3 pixels of a 900-pixel axis spanning the events, in ms."""
    if not len(events):
        return 1e-4
    return max((int(events["end_ns"].max()) - int(events["start_ns"].min())) / 1e6 / 300, 1e-4)


def iterations(events: np.ndarray, kinds: dict[int, str]) -> list[dict[str, np.ndarray]]:
    """The iterations of the first replica's events, in order: each a compute, the last load
    that ended before it started and the first store that started after it ended (each kind an
    array of 0 or 1 events)."""
    by_name = {name: value for value, name in kinds.items()}
    first = events[events["replica"] == events["replica"].min()] if len(events) else events

    def of(name: str) -> np.ndarray:
        sel = first[first["kind"] == by_name[name]]
        return sel[np.argsort(sel["start_ns"], kind="stable")]

    loads, computes, stores = of("load"), of("compute"), of("store")
    out = []
    for i, c in enumerate(computes):
        li = int(np.searchsorted(loads["end_ns"], c["start_ns"], side="right")) - 1
        si = int(np.searchsorted(stores["start_ns"], c["end_ns"], side="left"))
        out.append(
            {
                "load": loads[max(li, 0) : li + 1],
                "compute": computes[i : i + 1],
                "store": stores[si : si + 1],
            }
        )
    return out


def _per_iteration(ax: Any, events: np.ndarray, kinds: dict[int, str]) -> None:
    """Up to PER_ITERATION_ROWS iterations from the middle of the run, one row each, time
    relative to the iteration's compute start."""
    every = iterations(events, kinds)
    mid = max(0, len(every) // 2 - PER_ITERATION_ROWS // 2)
    rows = every[mid : mid + PER_ITERATION_ROWS]
    widest = (
        max(
            (float(r["compute"]["end_ns"][0] - r["compute"]["start_ns"][0]) for r in rows),
            default=0.0,
        )
        / 1e6
    )
    for row, parts in enumerate(rows):
        start = int(parts["compute"]["start_ns"][0])
        for name, sel in parts.items():
            ax.broken_barh(
                _spans(sel, start, max(widest / 150, 1e-4)),
                (row - 0.4, 0.8),
                facecolors=_KIND_COLORS[name],
                label=name if row == 0 else None,
            )
    ax.set_yticks(range(len(rows)), [str(mid + i) for i in range(len(rows))], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.6)
    ax.set_ylabel("iteration")
    ax.set_xlabel("ms from the iteration's compute start (negative: before it)")
    ax.set_title("Per iteration: its load, compute and store", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    if rows:
        _legend_beside(ax)
