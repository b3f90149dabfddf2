"""Notebook 02 (water-filling) executes top to bottom and shows what it claims."""

from __future__ import annotations

from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "02-water-filling.ipynb"


def makespans(cell) -> dict[str, float]:
    """``{allocator: makespan}`` from the DataFrame a cell displays (its text/plain repr)."""
    shown = [o for o in cell.get("outputs", []) if o.output_type == "execute_result"]
    assert len(shown) == 1, "the toy cell must end with its makespan table"
    lines = shown[0]["data"]["text/plain"].splitlines()
    assert lines[0].split() == ["makespan", "s"], lines
    return {name: float(value) for name, value in (line.split() for line in lines[1:])}


def test_notebook_02_executes(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    # self-contained: no sys.path edits, and it runs from a copy outside the repository
    assert not any("sys.path" in c.source for c in nb.cells if c.cell_type == "code")
    client = nbclient.NotebookClient(nb, timeout=120, startup_timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors
    # the toy table, read from the very cell that makes it: FIFO 30 s; StaticFluid, which
    # plans at launch before any trial reported (no oracle), the same; DynamicFluid, which
    # re-plans from measured step times, under the 12 s of a StaticFluid told every time
    toy = makespans(next(c for c in nb.cells if c.cell_type == "code"
                         and "toy_runs = {" in c.source))
    assert toy["fifo"] == 30.0 and toy["waterfill-static"] == 30.0, toy
    assert toy["waterfill"] < 12.0, toy
    # bokeh strips were rendered
    assert any("application/vnd.bokehjs_exec.v0+json" in o.get("data", {})
               or "bokeh" in str(o.get("data", {})).lower()
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
