"""A widget output that JupyterLab's widget manager gave up on is shown once its model exists.

The manager polls two seconds for a model and then shows "Error displaying
widget: model not found" for good, even when the model is registered just
after (a restore after a page reload that finishes in the poll's last sleep).
nbtune's lab extension renders such outputs again. Deterministic: the kernel
displays an output for a model that does not exist yet, the test waits until
the page shows the error, and only then lets the kernel create the model.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tests.browser.tune_notebook import run_all_cells, wait_until

pytestmark = pytest.mark.browser

GATE = "late-model.go"


def cells(gate: Path) -> list[str]:
    return [
        """\
import os, time, uuid
import ipywidgets
from IPython.display import display
model_id = uuid.uuid4().hex
display({"application/vnd.jupyter.widget-view+json":
         {"model_id": model_id, "version_major": 2, "version_minor": 0}}, raw=True)""",
        f"""\
while not os.path.exists({str(gate)!r}):
    time.sleep(0.1)
late = ipywidgets.HTML(value="<b>the late model</b>", model_id=model_id)""",
    ]


def test_an_output_whose_model_came_late_is_rendered(page, lab_server, lab_root: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells(lab_root / GATE)]
    path = lab_root / "late_model.ipynb"
    nbformat.write(nb, path)
    run_all_cells(page, lab_server, path.name)
    output = page.locator(".jp-Cell").first.locator(".jp-OutputArea-output")
    wait_until(lambda: "model not found" in output.inner_text(), 60,
               "the widget manager to give up on the missing model")
    (lab_root / GATE).touch()  # now the kernel creates it
    wait_until(lambda: "the late model" in output.inner_text(), 60,
               "the output to show the model once it exists")
