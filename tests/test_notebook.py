"""The example notebook runs top to bottom on the tiny models, and its plots render (so it cannot rot)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "evaluate_drafters.ipynb"


def test_example_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.delenv("LLAMASPEC_NOTEBOOK_GEMMA", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    images = sum(1 for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
                 if "image/png" in out.get("data", {}))
    assert images >= 5, f"expected the 5 plots to render, got {images} images"
    errors = [out for cell in nb.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors
