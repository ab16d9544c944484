"""Small HTML builders for the magics' rich outputs (no template engine, escaped text)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

_STYLE = "border-collapse:collapse;font-size:12px;margin:4px 0"
_CELL = "border:1px solid #ccc;padding:2px 6px;text-align:left"


def esc(value: Any) -> str:
    return html.escape(str(value))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "") -> str:
    """An HTML table of escaped text cells."""
    head = "".join(f'<th style="{_CELL}">{esc(h)}</th>' for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td style="{_CELL}">{esc(c)}</td>' for c in row) + "</tr>"
        for row in rows
    )
    klass = f' class="{esc(cls)}"' if cls else ""
    return f'<table{klass} style="{_STYLE}"><tr>{head}</tr>{body}</table>'


def pairs(items: Iterable[tuple[str, Any]], cls: str = "") -> str:
    """A two-column key/value table."""
    return table(("", ""), items, cls).replace(
        f'<tr><th style="{_CELL}"></th><th style="{_CELL}"></th></tr>', "", 1
    )


def section(title: str, body: str, cls: str = "") -> str:
    klass = f' class="{esc(cls)}"' if cls else ""
    return f"<div{klass}><b>{esc(title)}</b>{body}</div>"


def size(nbytes: float) -> str:
    """Bytes in B/KiB/MiB/GiB, three significant digits."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:.3g} GiB"  # unreachable: the loop returns at GiB


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
