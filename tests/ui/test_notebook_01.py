"""Notebook 01 (first tuning) executes top to bottom on the Dask runtime and shows its dashboard."""

from __future__ import annotations

import shutil
from pathlib import Path

import distributed  # noqa: F401  (a hard dependency: a broken install fails here)
import nbclient
import nbformat
import pytest

pytestmark = pytest.mark.integration
NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "01-first-tuning.ipynb"
WIDGET = "application/vnd.jupyter.widget-view+json"


def test_notebook_01_executes(tmp_path):
    work = tmp_path / NOTEBOOK.name
    shutil.copy(NOTEBOOK, work)  # the report it writes lands in tmp_path, not the repo
    nb = nbformat.read(work, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, startup_timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, errors[0].get("evalue") if errors else ""
    # the %%tune cell and the nbtune.tune(...) cell both displayed a live dashboard widget
    tune_cells = [c for c in nb.cells if c.cell_type == "code"
                  and (c.source.startswith("%%tune") or "nbtune.tune(" in c.source)]
    assert len(tune_cells) == 2
    for cell in tune_cells:
        assert any(WIDGET in o.get("data", {}) for o in cell.outputs)
    # every dashboard output loads BokehJS itself, before its widget: a page that shows only
    # that output (Notebook 7's second page, a reload) has BokehJS
    load = "application/vnd.bokehjs_load.v0+json"
    for cell in tune_cells:
        kinds = [next(iter(o.get("data", {})), None) for o in cell.outputs]
        first_widget = next(i for i, o in enumerate(cell.outputs) if WIDGET in o.get("data", {}))
        assert any(load in o.get("data", {}) for o in cell.outputs[:first_widget]), kinds
    report = tmp_path / "first-tuning.html"
    assert report.exists() and "first-tuning" in report.read_text()
    text = "".join(str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "first-tuning" in text and "'trial_id'" in text  # %tune_list and exp.best
    # it ends with what mattered: the importance and parallel-coordinates views, as widgets,
    # then the words on what they show
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.source for c in code_cells[-2:]] == ['exp.plot("importance")', 'exp.plot("parallel")']
    assert nb.cells[-1].cell_type == "markdown" and "Importance" in nb.cells[-1].source
    for view in ("importance", "parallel"):
        cell = next(c for c in nb.cells if c.cell_type == "code"
                    and c.source == f'exp.plot("{view}")')
        assert any(WIDGET in o.get("data", {}) for o in cell.outputs), view
