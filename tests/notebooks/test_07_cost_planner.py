"""Notebook 07 (cost planner) executes top to bottom and shows the plan, chart and real run."""

from __future__ import annotations

import pytest

from tests.notebooks.run import execute
from tests.notebooks.test_03_what_if import outputs

pytestmark = pytest.mark.slow


def test_notebook_07_executes():
    nb = execute("07-cost-planner.ipynb")
    code = [c for c in nb.cells if c.cell_type == "code"]
    html = outputs(nb, "text/html")
    assert "naive elastic" in html and "planned" in html and "gpus_per_trial" in html
    assert "iframe" in html  # the plan's own chart
    show_cell = next(c for c in code if "show(p20.plot())" in c.source)
    assert any("bokeh" in str(o.get("data", {})).lower() for o in show_cell.outputs)
    assert "predicted" in html and "measured" in html  # the real run, side by side
