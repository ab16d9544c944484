"""Small HTML builders for the magics' rich outputs (no template engine, escaped text)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

# JupyterLab's theme variables (light or dark), with light fallbacks where they are undefined
# (nbviewer, other front ends): text and background come from the page, only lines are set.
_STYLE = "border-collapse:collapse;font-size:12px;margin:4px 0"
_CELL = "border:1px solid var(--jp-border-color2, #ccc);padding:2px 6px;text-align:left"


def esc(value: Any) -> str:
    return html.escape(str(value))


def table(headers: Sequence[str] | None, rows: Iterable[Sequence[Any]], cls: str = "") -> str:
    """An HTML table of escaped text cells (no header row when `headers` is None)."""
    head = ""
    if headers is not None:
        head = "<tr>" + "".join(f'<th style="{_CELL}">{esc(h)}</th>' for h in headers) + "</tr>"
    body = "".join(
        "<tr>" + "".join(f'<td style="{_CELL}">{esc(c)}</td>' for c in row) + "</tr>"
        for row in rows
    )
    klass = f' class="{esc(cls)}"' if cls else ""
    return f'<table{klass} style="{_STYLE}">{head}{body}</table>'


def pairs(items: Iterable[tuple[str, Any]], cls: str = "") -> str:
    """A two-column key/value table."""
    return table(None, items, cls)


def section(title: str, body: str, cls: str = "") -> str:
    klass = f' class="{esc(cls)}"' if cls else ""
    return f"<div{klass}><b>{esc(title)}</b>{body}</div>"


def size(nbytes: float) -> str:
    """Bytes in B/KiB/MiB/GiB, four significant digits."""
    if abs(nbytes) < 1024:
        return f"{nbytes:.0f} B"
    power = min(int(math.log(abs(nbytes), 1024)), 3)
    return f"{nbytes / 1024**power:.4g} {('KiB', 'MiB', 'GiB')[power - 1]}"


def short(text: str, n: int) -> str:
    """`text` cut to n characters, an ellipsis marking the cut."""
    return text if len(text) <= n else text[: n - 1] + "…"


def duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def image(png: bytes, alt: str) -> str:
    import base64

    data = base64.b64encode(png).decode()
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}"/>'
