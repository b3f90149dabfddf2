"""Notebook 03 (what-if at scale) executes top to bottom and shows what it claims."""

from __future__ import annotations

from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "03-what-if-at-scale.ipynb"


def outputs(nb, mime: str) -> str:
    return "".join(str(o.get("data", {}).get(mime, "")) for c in nb.cells
                   if c.cell_type == "code" for o in c.get("outputs", []))


def test_notebook_03_executes():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    client = nbclient.NotebookClient(nb, timeout=120, startup_timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors, errors
    html = outputs(nb, "text/html")
    # the what-if table: every cluster size and allocator, with makespan and utilization
    for needle in ("makespan s", "mean utilization", "2048", "fluid+knapsack",
                   "waterfill speed-up vs FIFO"):
        assert needle in html, needle
    # the resume section: interrupted, then resumed to the uninterrupted run's end
    text = "".join(str(o.get("text", "")) for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "interrupted:" in text and "resumed" in html and "uninterrupted" in html
    # exp.what_if on a real LocalCluster run: the real and the simulated run side by side
    assert "real run: 6 trials" in text and "<b>what-if</b>" in html and "aws" not in text
    for needle in ("makespan_s", "mean_utilization", "cost", "waterfill"):
        assert needle in html, needle
    # one Bokeh figure, rendered with inline resources
    assert "application/vnd.bokehjs_exec.v0+json" in str([c.get("outputs") for c in nb.cells])
