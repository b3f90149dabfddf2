"""The lab extension in a real JupyterLab + chromium: sidebar rows and the status-bar item.

The store is the server's default (``<root>/nbtune-store/nbtune.db``), written
by real simulated runs before the server starts; a run added while the page is
open must show up at the next poll.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
from pathlib import Path

import pytest

from nbtune.cli import main as nbtune_cli
from tests.browser.conftest import REPO, LabServer
from tests.server.stores import finished_run, interrupted_run

pytestmark = pytest.mark.browser
SHOTS = REPO / "docs" / "_static" if os.environ.get("NBTUNE_DOCS_SCREENSHOTS") else None


@pytest.fixture(scope="module")
def lab_env(lab_root: Path) -> dict[str, str]:
    """Write the store before the module's server starts (lab_server depends on lab_env)."""
    store = lab_root / "nbtune-store"
    interrupted_run(store, "live-asha", gpus=3)
    finished_run(store, "finished-asha", gpus=2)
    return {}


def open_sidebar(page, server: LabServer):
    page.goto(server.url("lab"))
    tab = page.locator('.jp-SideBar [data-id="nbtune-experiments"]')
    tab.wait_for(state="visible", timeout=60_000)
    tab.click()
    panel = page.locator("#nbtune-experiments")
    panel.wait_for(state="visible")
    return panel


def ls_trials(store: Path) -> dict[str, str]:
    """Experiment -> the TRIALS column of ``nbtune ls`` (ended/total)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        nbtune_cli(["ls", "--store", str(store)])
    lines = [ln.split() for ln in out.getvalue().splitlines() if ln.strip()]
    head = next(i for i, ln in enumerate(lines) if ln[:1] == ["NAME"])
    col = lines[head].index("TRIALS")
    return {ln[0]: ln[col] for ln in lines[head + 1:] if len(ln) > col}


def test_sidebar_lists_the_store_experiments(page, lab_server: LabServer) -> None:
    panel = open_sidebar(page, lab_server)
    live = panel.locator('tr[data-experiment="live-asha"]')
    live.wait_for()
    assert live.get_attribute("data-state") == "running"
    # trials ended/total, exactly as `nbtune ls` counts them (not running/total)
    ls = ls_trials(lab_server.root_dir / "nbtune-store")
    assert live.locator('td[data-field="trials"]').inner_text() == ls["live-asha"]
    assert live.locator('td[data-field="gpus"]').inner_text() == "3"
    done = panel.locator('tr[data-experiment="finished-asha"]')
    assert done.locator('td[data-field="state"]').inner_text() == "done"
    assert done.locator('td[data-field="trials"]').inner_text() == ls["finished-asha"] == "8/8"
    assert done.locator('td[data-field="metric"]').inner_text() == "loss ↓"  # its direction
    # the best metric shown is the one the REST endpoint (and so the store) holds
    api = {e["name"]: e for e in lab_server.api("nbtune/api/experiments")["experiments"]}
    best = float(done.locator('td[data-field="best"]').inner_text())
    assert math.isclose(best, api["finished-asha"]["best"], rel_tol=1e-3)
    assert "minimize loss" in (done.get_attribute("title") or "")

    status = page.locator(".jp-nbtune-status")
    status.wait_for()
    assert status.inner_text() == "nbtune: 3 running · 3 GPUs"
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("#nbtune-experiments").screenshot(path=str(SHOTS / "sidebar.png"))

    # a click opens the experiment in the main area: its curves and every trial
    done.click()
    view = page.locator('.jp-nbtune-experiment[data-experiment="finished-asha"]')
    view.wait_for(timeout=15_000)
    exp = api["finished-asha"]
    detail = lab_server.api("nbtune/api/experiments/finished-asha")
    rows = view.locator("tbody tr")
    rows.first.wait_for()
    assert rows.count() == len(detail["trials"]) == exp["trials_total"]
    best_row = view.locator(f'tr[data-trial="{exp["best_trial"]}"] td[data-field="state"]')
    assert best_row.inner_text() == "best"
    assert view.locator("polyline").count() == len(detail["curves"]) > 0
    assert f"{exp['trials']} trials ended" in view.locator(".jp-nbtune-summary").inner_text()
    if SHOTS is not None:
        view.screenshot(path=str(SHOTS / "sidebar-experiment.png"))


def test_sidebar_picks_up_a_new_experiment(page, lab_server: LabServer) -> None:
    page.goto(lab_server.url("lab"))
    status = page.locator(".jp-nbtune-status", has_text="3 running")
    status.wait_for(timeout=60_000)
    # show the file browser instead, then the status-bar item brings the panel back
    page.locator('.jp-SideBar [data-id="filebrowser"]').click()
    panel = page.locator("#nbtune-experiments")
    panel.wait_for(state="hidden")
    status.click()
    panel.locator('tr[data-experiment="live-asha"]').wait_for()
    finished_run(lab_server.root_dir / "nbtune-store", "added-later", seed=7)
    # polled every 3 s
    panel.locator('tr[data-experiment="added-later"]').wait_for(timeout=15_000)
    assert panel.locator("tbody tr").count() == 3
