"""Notebook 02 (water-filling) executes top to bottom and shows what it claims."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "02-water-filling.ipynb"


def test_notebook_02_executes():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors
    html = "".join(str(o.get("data", {}).get("text/html", "")) for c in nb.cells
                   if c.cell_type == "code" for o in c.get("outputs", []))
    # the toy table: FIFO 30 s, StaticFluid 12 s
    assert "30.0" in html and "12.0" in html
    # bokeh strips were rendered
    assert any("application/vnd.bokehjs_exec.v0+json" in o.get("data", {})
               or "bokeh" in str(o.get("data", {})).lower()
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
