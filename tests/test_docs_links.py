"""Relative links in the README and docs/ resolve: the file exists and, for `page.md#anchor`,
the page has a heading with that GitHub anchor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        s = slug(h)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_slug_follows_github() -> None:
    assert slug("Pre-packed operands: the `pyipu.packed` OPAQUE blob") == (
        "pre-packed-operands-the-pyipupacked-opaque-blob"
    )
    assert slug("Overlap I/O") == "overlap-io"
    assert slug("Requests on the caller's thread") == "requests-on-the-callers-thread"


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "# Top\n\n[a](p.md#top) [b](missing.md) [c](p.md#nowhere)\n```\n[d](x.md)\n```\n"
    )
    assert relative_links(page) == ["p.md#top", "missing.md", "p.md#nowhere"]
    assert anchors(page) == {"top"}
    assert broken_links(page) == [
        "missing.md: no such file",
        "p.md#nowhere: no heading with that anchor",
    ]


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = broken_links(page)
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
