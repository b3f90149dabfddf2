"""Notebook 07 (cost planner) executes top to bottom and shows the plan, chart and real run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebooks.test_03_what_if import outputs

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "07-cost-planner.ipynb"

pytestmark = pytest.mark.slow


def test_notebook_07_executes():
    nb = nbclient.execute(nbformat.read(NOTEBOOK, as_version=4), cwd=str(NOTEBOOK.parent),
                          timeout=300, kernel_name="python3")
    code = [c for c in nb.cells if c.cell_type == "code"]
    failed = [(c.source[:60], o) for c in code for o in c.outputs if o.output_type == "error"]
    assert not failed, failed
    html = outputs(nb, "text/html")
    assert "naive elastic" in html and "planned" in html and "gpus_per_trial" in html
    assert "iframe" in html  # the plan's own chart
    show_cell = next(c for c in code if "show(p20.plot())" in c.source)
    assert any("bokeh" in str(o.get("data", {})).lower() for o in show_cell.outputs)
    assert "predicted" in html and "measured" in html  # the real run, side by side
