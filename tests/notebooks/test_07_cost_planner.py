"""Notebook 07 (cost planner) executes top to bottom and shows the plan, chart and real run."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "07-cost-planner.ipynb"

pytestmark = pytest.mark.slow


def outputs(nb, mime: str) -> str:
    return "".join(str(o.get("data", {}).get(mime, "")) for c in nb.cells
                   if c.cell_type == "code" for o in c.get("outputs", []))


def test_notebook_07_executes():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors, errors
    html = outputs(nb, "text/html")
    assert "naive elastic" in html and "planned" in html and "gpus_per_trial" in html
    assert "iframe" in html  # the plan's own chart
    show_cell = next(c for c in nb.cells if c.cell_type == "code" and "show(p20.plot())" in c.source)
    assert any("bokeh" in str(o.get("data", {})).lower() for o in show_cell.outputs)
    assert "predicted" in html and "measured" in html  # the real run, side by side
