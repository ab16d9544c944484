"""Pixel checks of the `%ipu profile` pictures, on PNG bytes or a browser's element screenshot.

Each check returns a list of problems (empty: the picture is right), so a test can report every
broken picture of a page at once. tests/test_notebook_pictures.py shows that each check rejects
a broken picture; tests/test_notebooks_browser.py runs them on what JupyterLab showed.
"""

from __future__ import annotations

import io

import numpy as np

# Share of the heat map's viridis pixels that may lie in the colour map's top quarter (yellow)
# and must lie in its bottom sixteenth (dark purple): every notebook's model uses under 5 % of
# the memory of most tiles, and the heat map scales to tile capacity, so its grid is nearly all
# dark purple.
# (Scaled to the fullest tile instead, the grid is yellow, or with 128 KiB I/O tiles the
# fullest, a lighter purple around 9 % of the scale.)
TOP_SHARE_MAX = 0.5
LOW_SHARE_MIN = 0.5
LOW_END = 16  # of viridis' 256 colours
MIN_LANE_COLUMNS = 3  # every interval is drawn at least 3 px wide


def rgb(png: bytes) -> np.ndarray:
    """The picture as an (h, w, 3) int array."""
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int32)


def _viridis_index(pixels: np.ndarray, tolerance: float = 12.0) -> np.ndarray:
    """Each pixel's position in viridis (0..255), or -1 for pixels not of the colour map."""
    from matplotlib import colormaps

    lut = colormaps["viridis"](np.linspace(0, 1, 256))[:, :3] * 255
    colours, inverse = np.unique(pixels.reshape(-1, 3), axis=0, return_inverse=True)
    dist = np.sqrt(((colours[:, None, :] - lut[None, :, :]) ** 2).sum(-1))
    index = np.where(dist.min(1) <= tolerance, dist.argmin(1), -1)
    return index[inverse.reshape(-1)]


def heatmap_problems(png: bytes) -> list[str]:
    """The tile-memory heat map of a small model must look nearly empty (viridis' low end)."""
    index = _viridis_index(rgb(png))
    cmap = index[index >= 0]
    if cmap.size < 0.1 * index.size:
        return [f"heat map: only {cmap.size} of {index.size} pixels are viridis colours"]
    top = float((cmap >= 192).mean())
    low = float((cmap < LOW_END).mean())
    problems = []
    if top > TOP_SHARE_MAX:
        problems.append(f"heat map: {top:.0%} of its colour-map pixels are the top colours")
    if low < LOW_SHARE_MIN:
        problems.append(f"heat map: only {low:.0%} of its colour-map pixels are the low end")
    return problems


def _dark_row_groups(dark: np.ndarray) -> list[np.ndarray]:
    """Runs of consecutive rows that are mostly dark: the axes' horizontal spines."""
    rows = np.flatnonzero(dark.mean(1) > 0.4)
    if not rows.size:
        return []
    return np.split(rows, np.flatnonzero(np.diff(rows) > 1) + 1)


def timeline_lanes(png: bytes, lanes: list[tuple[str, str]]) -> dict[str, int]:
    """Columns showing each lane's colour in the timeline's upper axes.

    `lanes`: (name, "#rrggbb") top to bottom. The upper axes lie between the first two
    horizontal spines; its lanes split it in equal bands (broken_barh at y = 0, 1, 2 with
    height 0.8, the y axis inverted), and a lane's bars cover the middle of its band."""
    a = rgb(png)
    dark = a.sum(-1) < 3 * 90
    spines = _dark_row_groups(dark)
    if len(spines) < 2:
        return {name: 0 for name, _ in lanes}
    top, bottom = int(spines[0][-1]) + 1, int(spines[1][0])
    cols = np.flatnonzero(dark[spines[0][0]])
    left, right = int(cols.min()) + 2, int(cols.max()) - 1
    band = (bottom - top) / len(lanes)
    found = {}
    for i, (name, colour) in enumerate(lanes):
        want = np.array([int(colour[k : k + 2], 16) for k in (1, 3, 5)])
        y0, y1 = top + int(band * (i + 0.35)), top + int(band * (i + 0.65))
        region = a[y0 : max(y1, y0 + 1), left:right]
        match = np.abs(region - want).sum(-1) < 60
        found[name] = int(match.any(0).sum())
    return found


def timeline_problems(png: bytes, lanes: list[tuple[str, str]]) -> list[str]:
    """Every lane of the timeline shows bars."""
    found = timeline_lanes(png, lanes)
    return [
        f"timeline: lane {name} shows its colour in {n} columns (< {MIN_LANE_COLUMNS})"
        for name, n in found.items()
        if n < MIN_LANE_COLUMNS
    ]


def kind_lanes() -> list[tuple[str, str]]:
    """The timeline's lanes top to bottom (one replica): tracepoint kinds by value, coloured as
    magics/pictures.py draws them."""
    from pyipu.magics.pictures import _KIND_COLORS

    from pyipu.runtime.tracepoints import KINDS

    return [(name, _KIND_COLORS[name]) for _, name in sorted(KINDS.items())]
