"""The example notebooks in notebooks/: stored without outputs, and each runs top to bottom."""

from __future__ import annotations

import importlib
import os
import pathlib

import pytest

pytestmark = pytest.mark.slow  # left out of the quick subset, pytest -m "not slow"

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
EXPECTED = {
    "quickstart",
    "overlap_io",
    "model_fusion",
    "dynamic_batching",
    "ipu_model_report",
    "c_embedding",
    "converter_and_precision",
    "model_runtime_session",
    "training",
    "poptorch_training",
}


def _need(module: str):
    """Import a notebook tool; skip locally without it, fail under CI=true."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is in the test extras")


def test_every_notebook_is_there() -> None:
    assert {p.stem for p in NOTEBOOKS} >= EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs(path: pathlib.Path) -> None:
    nbformat = _need("nbformat")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: cell {cell.id} has outputs (clear them)"
            assert cell.execution_count is None, f"{path.name}: cell {cell.id} has a count"
    assert "widgets" not in nb.metadata, f"{path.name}: saved widget state in the metadata"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_top_to_bottom(path: pathlib.Path) -> None:
    nbformat = _need("nbformat")
    nbclient = _need("nbclient")
    _need("ipykernel")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError naming the cell on any error
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors
