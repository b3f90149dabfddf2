"""A notebook runs ``%%tune`` on the Dask runtime inside JupyterLab: the live dashboard
renders and updates, its "Stop trial" button stops one trial, and the lab sidebar
lists the experiment from the store the magic writes (``--store``).

The trials sleep between reports so the experiment is still running while the
page is checked; "Stop experiment" ends it before the server is torn down.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.conftest import LabServer
from tests.browser.tune_notebook import (
    run_all_cells,
    trial_states,
    wait_until,
    write_tune_notebook,
)

pytestmark = pytest.mark.browser

NAME = "browser-demo"
#: Dask workers start inside the kernel; give a loaded 2-core CI machine time
SLOW = 120_000


@pytest.fixture(scope="module")
def notebook(lab_root: Path) -> Path:
    return write_tune_notebook(lab_root / "tune.ipynb", NAME)


def test_tune_magic_dashboard_updates_and_stops_a_trial(page, lab_server: LabServer,
                                                        notebook: Path) -> None:
    run_all_cells(page, lab_server, notebook.name)
    page.locator(".jp-InputPrompt", has_text="[1]").wait_for(timeout=60_000)

    # the dashboard renders: controls, status line and the Bokeh figures
    stop_trial = page.get_by_role("button", name="Stop trial")
    stop_trial.wait_for(timeout=SLOW)
    page.locator(".jp-OutputArea-output canvas").filter(visible=True).first.wait_for(
        timeout=SLOW)
    status = page.locator(".widget-html-content", has_text="trials ended")
    # ... and updates: the experiment clock in the status line moves on
    wait_until(lambda: "best loss" in status.inner_text(), SLOW / 1000, "a first report")
    t0 = status.inner_text()
    wait_until(lambda: status.inner_text() != t0, 120, "the status line to update")

    running = wait_until(lambda: [t for t, s in trial_states(lab_server, NAME).items()
                                  if s == "running"], 60, "running trials in the store")
    victim = running[0]
    trial_box = page.locator(".widget-text", has=page.locator(".widget-label", has_text="trial"))
    trial_box.locator("input").fill(str(victim))
    trial_box.locator("input").press("Enter")
    stop_trial.click()
    states = wait_until(lambda: (s := trial_states(lab_server, NAME)).get(victim) == "stopped" and s,
                        60, f"trial {victim} to stop")
    assert any(s == "running" for t, s in states.items() if t != victim), states

    # the lab sidebar lists it from the store the magic wrote
    page.locator('.jp-SideBar [data-id="nbtune-experiments"]').click()
    row = page.locator(f'#nbtune-experiments tr[data-experiment="{NAME}"]')
    row.wait_for(timeout=60_000)
    assert row.get_attribute("data-state") == "running"
    page.locator('#nbtune-experiments tr[data-experiment="browser-demo"] '
                 'td[data-field="trials"]').filter(has_text="1/2").wait_for(timeout=60_000)

    page.get_by_role("button", name="Stop experiment").click()
    wait_until(lambda: all(s == "stopped" for s in trial_states(lab_server, NAME).values()), 60,
               "every trial to stop")
    row.and_(page.locator('[data-state="done"]')).wait_for(timeout=60_000)
