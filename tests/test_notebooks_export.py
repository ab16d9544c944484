"""Every example notebook, run and exported to HTML with nbconvert, shows its results without a
kernel: each output has a static form (HTML, PNG, SVG or text), none is only a widget, and no
widget's text repr (`VBox(children=...)`) reaches the page."""

from __future__ import annotations

import importlib
import os
import pathlib
import re

import pytest

pytestmark = pytest.mark.slow  # left out of the quick subset, pytest -m "not slow"

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
STATIC = ("text/html", "image/png", "image/svg+xml", "text/markdown", "text/latex")
WIDGET_REPR = re.compile(r"\b(VBox|HBox|IntProgress|FloatProgress|Button|HTML|Label)\(")


def _need(module: str):
    """Import a notebook tool; skip locally without it, fail under CI=true."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is in the test extras")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exported_html_shows_every_result(path: pathlib.Path) -> None:
    nbformat = _need("nbformat")
    nbclient = _need("nbclient")
    nbconvert = _need("nbconvert")
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        shown = [o for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
        static = [o for o in shown if any(k in o.data for k in STATIC)]
        for o in shown:
            text = o.data.get("text/plain", "")
            if o in static:
                continue
            where = f"{path.name}, cell {cell.get('id')}"
            assert WIDGET_VIEW not in o.data or static, f"{where}: a widget and nothing static"
            assert not WIDGET_REPR.search(text), f"{where}: a widget's repr as text: {text[:80]}"
    assert any(c.get("outputs") for c in nb.cells), f"{path.name}: no output at all"
    page, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    assert "(children=" not in page, f"{path.name}: a widget's repr on the exported page"
