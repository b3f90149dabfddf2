"""The ``%%tune`` dashboard works in Notebook 7 too, not only in JupyterLab.

Notebook 7 is a JupyterLab-based app but its own shell (one document per tab,
its own menu bar and kernel indicator), so the widget and Bokeh renderers
must load there as well. The same kernel-side cells as the JupyterLab test
(``tune_notebook.SETUP``: a two-worker Dask runtime) run here under a
different experiment name; the test checks the dashboard renders and updates
and that its "Stop experiment" button stops every trial (read back from the
store the magic writes).
"""

from __future__ import annotations

import re
import urllib.error
from pathlib import Path

import pytest

from tests.browser.bokeh_docs import read_docs
from tests.browser.conftest import ARTIFACTS, LabServer
from tests.browser.tune_notebook import trial_states, wait_until, write_tune_notebook

pytestmark = pytest.mark.browser

NAME = "nb7-demo"
#: Dask workers start inside the kernel; give a loaded 2-core CI machine time
SLOW = 120


@pytest.fixture(scope="module")
def notebook(lab_root: Path) -> Path:
    return write_tune_notebook(lab_root / "tune7.ipynb", NAME)


def kernel_idle(server: LabServer) -> bool:
    """The server's own view of the kernel: Notebook 7's indicator differs from Lab's.

    While a kernel starts, jupyter_server's kernel list can answer 500 (its model reads the
    kernel's ``last_activity`` before it is set; the server log shows the TraitError): not
    started yet, asked again.
    """
    try:
        kernels = server.api("api/kernels")
    except urllib.error.HTTPError as exc:
        if exc.code == 500 and "last_activity" in server.log():
            return False
        raise
    return bool(kernels) and all(k["execution_state"] == "idle" for k in kernels)


def test_tune_dashboard_in_notebook7_renders_updates_and_stops(
        page, notebook_server: LabServer, notebook: Path) -> None:
    page.goto(notebook_server.url(f"notebooks/{notebook.name}"))
    # Notebook 7's shell, not JupyterLab's: one notebook, no lab launcher/sidebar tabs
    page.locator("#main-panel .jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    assert page.locator(".jp-NotebookPanel").count() == 1
    wait_until(lambda: kernel_idle(notebook_server), 60, "the kernel to start")
    # the server's "idle" can come before the page's kernel connection: "Run All Cells" does
    # nothing until the page itself shows the kernel idle (its execution indicator)
    page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').wait_for(timeout=60_000)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel",
                 has_text=re.compile(r"^Run All Cells$")).click()
    page.locator(".jp-InputPrompt", has_text="[1]").wait_for(timeout=60_000)

    # the dashboard renders: its controls, status line and Bokeh figures
    page.get_by_role("button", name="Stop trial").wait_for(timeout=SLOW * 1000)
    page.locator(".jp-OutputArea-output canvas").filter(visible=True).first.wait_for(
        timeout=SLOW * 1000)
    status = page.locator(".widget-html-content", has_text="trials ended")
    # ... and updates: the status line gets a first report, then moves on
    wait_until(lambda: "best loss" in status.inner_text(), SLOW, "a first report")
    t0 = status.inner_text()
    wait_until(lambda: status.inner_text() != t0, 30, "the status line to update")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "notebook7-running.png"))
    assert wait_until(lambda: any(s == "running" for s in trial_states(notebook_server, NAME).values()),
                      60, "running trials in the store")

    # a control works: "Stop experiment" stops every trial, as the store records
    page.get_by_role("button", name="Stop experiment").click()
    wait_until(lambda: (s := trial_states(notebook_server, NAME)) and
               all(v == "stopped" for v in s.values()), 60, "every trial to stop")
    # ... and the dashboard says so (the fixture's end-of-test screenshot shows it)
    wait_until(lambda: status.inner_text().startswith("done"), 30, "the status line to say done")

    # a second page on the same kernel (Notebook 7 opens one per notebook): BokehJS comes with
    # the dashboard's output, so its view renders there too, with every trial
    page.keyboard.press("Control+s")
    page.wait_for_timeout(1500)
    second = page.context.new_page()
    try:
        errors: list[str] = []
        second.on("console", lambda msg: errors.append(msg.text))
        second.goto(notebook_server.url(f"notebooks/{notebook.name}"))
        docs = wait_until(lambda: read_docs(second), SLOW, "the dashboard on a second page")
        assert not [m for m in errors if "Failed to create view" in m], errors[:5]
        ids = sorted(int(t) for t in docs[0]["cols"]["trial_id"])
        assert ids == sorted(trial_states(notebook_server, NAME)), docs[0]["cols"]
        states = docs[0]["cols"]["state"]  # stopped, and the best (starred, its own state)
        assert {s for s in states if not s.startswith("★")} <= {"stopped"}, states
        assert sum(s.startswith("★") for s in states) == 1, states
    finally:
        second.close()
