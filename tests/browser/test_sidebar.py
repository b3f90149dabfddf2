"""The lab extension in a real JupyterLab + chromium: sidebar rows and the status-bar item.

The store is the server's default (``<root>/nbtune-store/nbtune.db``), written
by real simulated runs before the server starts; a run added while the page is
open must show up at the next poll. Then a notebook's kernel runs two real
experiments on a Dask cluster, one kept in memory only and one with a store
outside the server's root: the sidebar lists both under their sources, as the
kernel sees them, and the memory-only one goes when the kernel shuts down.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import urllib.request
from pathlib import Path

import nbformat
import pytest

from nbtune.cli import main as nbtune_cli
from nbtune.core.trial import ended_of_total
from tests.browser.conftest import REPO, LabServer
from tests.browser.tune_notebook import SETUP, json_written, run_all_cells, wait_until
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
    # simulated GPUs are GPUs: the words say so (issue #27: GPUs only on GPUs)
    assert status.inner_text() == "nbtune: 3 running · 3 GPUs"
    assert status.get_attribute("data-device") == "GPU"
    assert panel.locator('th[data-field="gpus"]').inner_text() == "GPUs"
    assert live.locator('td[data-field="gpus"]').get_attribute("data-device") == "GPU"
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("#nbtune-experiments").screenshot(path=str(SHOTS / "sidebar.png"))

    # a click opens the experiment in the main area: its curves and every trial
    done.click()
    view = page.locator('.jp-nbtune-experiment[data-experiment="finished-asha"]')
    view.wait_for(timeout=60_000)
    exp = api["finished-asha"]
    detail = lab_server.api("nbtune/api/experiments/finished-asha")
    rows = view.locator("tbody tr")
    rows.first.wait_for()
    assert rows.count() == len(detail["trials"]) == exp["trials_total"]
    best_row = view.locator(f'tr[data-trial="{exp["best_trial"]}"] td[data-field="state"]')
    assert best_row.inner_text().startswith("★ ")  # the best, starred; its state still shows
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
    panel.locator('tr[data-experiment="added-later"]').wait_for(timeout=60_000)
    assert panel.locator("tr.jp-nbtune-row").count() == 3


def tune_cell(name: str, store: str = "") -> str:
    """A real run on the notebook's two Dask workers, long enough to be seen running; the
    experiment is bound to ``exp_<name>``."""
    return f"""\
%%tune space --metric loss --max-budget 9 --num-trials 6 -a asha --runtime rt --name {name} --seed 0 --as exp_{name} {store}
for step in trial.steps():
    time.sleep(0.4)
    trial.report(step, loss=1.0 / step + config["lr"])"""


KERNEL_TRUTH = """\
import json, os
exp_mem.wait(); exp_kept.wait()
json.dump({n: {"states": list(e.results()["state"]), "best": e.best["loss"],
               "best_trial": int(e.best["trial_id"]), "num_trials": 6}
           for n, e in (("mem", exp_mem), ("kept", exp_kept))} | {"pid": os.getpid()},
          open("kernel-truth.json", "w"))"""


def check_words_fit_the_hardware(page, panel, mem) -> None:
    """Issue #27: the status bar said "5 GPUs" on a machine without one. The notebook's Dask
    workers are CPU workers standing in for GPUs (as ``DaskRuntime`` finds no GPU here): the
    status bar names them workers, GPUs only the store's simulated GPUs (3, held by the
    interrupted run), and the sidebar's column and cell say workers."""
    from nbtune.runtimes.dask.gpu import nvml_gpu_count

    cell = mem.locator('td[data-field="gpus"]')
    want = "GPU" if nvml_gpu_count() > 0 else "CPU"  # as DaskRuntime chooses
    # (a row listed before the run's cluster started says no device yet)
    wait_until(lambda: cell.get_attribute("data-device") == want, 15,
               f"the memory-only run's lanes said to be {want}")
    if want == "GPU":  # the notebook's workers have GPUs: GPUs they are
        return
    assert "CPU worker" in (cell.get_attribute("title") or "")
    assert "GPU" not in (cell.get_attribute("title") or "")
    assert panel.locator('th[data-field="gpus"]').inner_text() == "Workers"  # GPUs and CPUs
    status = page.locator(".jp-nbtune-status")
    # the two runs hold the CPU workers for some 20 s, the status bar polls every 3 s
    def naming_workers() -> str | None:
        t = status.inner_text()
        return t if re.search(r"· 3 GPUs · [12] CPU workers?$", t) else None

    text = wait_until(naming_workers, 60,
                      "the status bar naming the CPU workers the notebook's trials hold")
    assert status.get_attribute("data-device") == "mixed", text
    assert re.fullmatch(r"nbtune: \d+ running · 3 GPUs · [12] CPU workers?", text), text


def shown_row(row, server: LabServer) -> str:
    """What a sidebar row shows, and the kernel files the server reads: a failure's evidence."""
    files = sorted(p.name for p in (server.root_dir / ".jupyter-test" / "runtime")
                   .glob("nbtune-kernel-*"))
    if not row.count():
        return f"no such row; kernel files {files}"
    trials = row.locator('td[data-field="trials"]').inner_text()
    return f"state {row.get_attribute('data-state')}, trials {trials}; kernel files {files}"


def shut_down_kernels(server: LabServer) -> None:
    for kernel in server.api("api/kernels"):
        req = urllib.request.Request(f"{server.base_url}api/kernels/{kernel['id']}",
                                     method="DELETE",
                                     headers={"Authorization": f"token {server.token}"})
        urllib.request.urlopen(req, timeout=30).close()


def test_sidebar_lists_the_running_kernels_experiments(page, lab_server: LabServer,
                                                       tmp_path_factory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # a store outside the server's root
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    setup = SETUP.replace("preload=())", "preload=(), keep=True)")  # two runs on one cluster
    assert setup != SETUP
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (
        setup, tune_cell("mem"), "exp_mem.wait();", tune_cell("kept", f"--store {elsewhere}"),
        KERNEL_TRUTH)]
    (lab_server.root_dir / "kernels.ipynb").write_text(nbformat.writes(nb))
    run_all_cells(page, lab_server, "kernels.ipynb")
    page.locator('.jp-SideBar [data-id="nbtune-experiments"]').click()
    panel = page.locator("#nbtune-experiments")
    # live: the memory-only run shows while it runs, under its notebook's kernel
    mem = panel.locator('tr.jp-nbtune-row[data-experiment="mem"]')
    wait_until(lambda: mem.count() and mem.get_attribute("data-state") == "running", 120,
               "the memory-only run in the sidebar, running")
    source = mem.get_attribute("data-source")
    assert source.startswith("kernel:")
    check_words_fit_the_hardware(page, panel, mem)
    header = panel.locator(f'tr.jp-nbtune-source[data-source="{source}"]')
    assert "notebook kernels.ipynb" in header.inner_text()

    truth_file = lab_server.root_dir / "kernel-truth.json"
    truth = json_written(truth_file, 180, "both runs to end and kernel-truth.json")
    assert source == f"kernel:{truth['pid']}"
    kept_source = f"store:{(elsewhere / 'nbtune.db').resolve()}"
    rows = {"mem": mem, "kept": panel.locator(
        f'tr.jp-nbtune-row[data-experiment="kept"][data-source="{kept_source}"]')}
    for name, row in rows.items():
        want = truth[name]
        trials = ended_of_total(want["states"], want["num_trials"], True)
        wait_until(lambda r=row, t=trials: r.count() and r.get_attribute("data-state") == "done"
                   and r.locator('td[data-field="trials"]').inner_text() == t, 15,
                   f"{name}: done with {trials} trials ended in the sidebar",
                   lambda r=row: shown_row(r, lab_server))
        best = float(row.locator('td[data-field="best"]').inner_text())
        assert math.isclose(best, want["best"], rel_tol=1e-3), (name, best, want["best"])
        assert row.locator('td[data-field="metric"]').inner_text() == "loss ↓"
    store_header = panel.locator(f'tr.jp-nbtune-source[data-source="{kept_source}"]')
    assert "used by kernels.ipynb" in store_header.inner_text()
    # the configured store's experiments are still there, under their own header
    assert panel.locator('tr.jp-nbtune-row[data-experiment="finished-asha"]').count() == 1
    if SHOTS is not None:
        panel.screenshot(path=str(SHOTS / "sidebar-kernels.png"))

    # the memory-only run opens in the main area from the kernel: every trial, the best marked
    mem.click()
    view = page.locator(f'.jp-nbtune-experiment[data-experiment="mem"][data-source="{source}"]')
    view.locator("tbody tr").first.wait_for(timeout=60_000)
    assert view.locator("tbody tr").count() == len(truth["mem"]["states"])
    best_cell = view.locator(f'tr[data-trial="{truth["mem"]["best_trial"]}"] '
                             f'td[data-field="state"]')
    assert best_cell.inner_text().startswith("★ ")
    assert view.locator("polyline").count() == len(truth["mem"]["states"])
    assert "kernels.ipynb" in view.locator(".jp-nbtune-where").inner_text()

    # the kernel shuts down: its memory-only run goes, the stored one stays
    shut_down_kernels(lab_server)
    mem.wait_for(state="detached", timeout=60_000)
    assert rows["kept"].count() == 1
    assert not list((lab_server.root_dir / ".jupyter-test" / "runtime").glob("nbtune-kernel-*"))
