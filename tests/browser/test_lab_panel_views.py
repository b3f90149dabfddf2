"""The experiment panel's analysis views in a real JupyterLab + chromium, read back from the page.

Two real simulated ASHA runs over four hyperparameters (a log range, a linear
one, an integer choice and a text choice) are written to the server's default
store before it starts. The panel opened from the sidebar must show what the
runs' own ``exp.results()`` hold: one history point per ended trial and a
best-so-far line equal to the running best, one parallel-coordinates line per
trial with its values on every axis, the importance bars that
``nbtune.ui.analysis`` computes from the same trials, a trial grid whose
sorting and filtering give the rows pandas gives, and the second run's history
on the same plot. All of it again after a page reload and in a second tab.
The allocation timeline draws every placement the store recorded on the lane
it was on, labelled as the hardware is: the first run on GPUs ("GPU 0"), the
second on CPU workers standing in for GPUs ("worker 0", never "GPU").
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import nbtune
from nbtune.core.resources import ClusterSpec
from nbtune.runtimes.sim import SimRuntime
from nbtune.store import Store
from nbtune.ui import analysis as an
from nbtune.ui.dashboard_model import DashboardModel
from nbtune.ui.snapshot import Snapshots
from nbtune.workloads import SyntheticWorkload
from tests.browser.conftest import REPO, LabServer
from tests.browser.tune_notebook import wait_until

pytestmark = pytest.mark.browser
SHOTS = REPO / "docs" / "_static" if os.environ.get("NBTUNE_DOCS_SCREENSHOTS") else None
SPACE = {"lr": nbtune.loguniform(1e-4, 1e-1), "dropout": nbtune.uniform(0.0, 0.5),
         "width": nbtune.choice([32, 64, 128]), "optimizer": nbtune.choice(["adam", "sgd"])}
NAMES = ("views-a", "views-b")


#: the first run's lanes are GPUs, the second's CPU workers standing in for GPUs
CLUSTERS = {NAMES[0]: ClusterSpec.homogeneous(4),
            NAMES[1]: ClusterSpec.homogeneous(3, kind="cpu")}


def run(store: Path, name: str, seed: int) -> nbtune.Experiment:
    return nbtune.tune(SyntheticWorkload(SPACE, seed=seed), algorithm="asha", metric="loss",
                       mode="min", max_budget=9, num_trials=24, store=store, name=name,
                       seed=seed, runtime=SimRuntime(cluster=CLUSTERS[name]))


def store_path(lab_root: Path) -> Path:
    return lab_root / "nbtune-store"


@pytest.fixture(scope="module")
def runs(lab_root: Path) -> dict[str, nbtune.Experiment]:
    return {name: run(store_path(lab_root), name, seed)
            for seed, name in enumerate(NAMES, start=3)}


@pytest.fixture(scope="module")
def lab_env(runs: dict[str, nbtune.Experiment]) -> dict[str, str]:
    """The store is written before the module's server starts (lab_server needs lab_env)."""
    return {}


def open_panel(page, server: LabServer, name: str, *, goto: bool = True):
    """Open ``name`` from the sidebar; the panel once its views are rendered."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    if goto:
        page.goto(server.url("lab"))
    tab = page.locator('.jp-SideBar [data-id="nbtune-experiments"]')
    tab.wait_for(state="visible", timeout=60_000)
    sidebar = page.locator("#nbtune-experiments")

    def sidebar_shown() -> bool:
        # the restored layout may show the sidebar already: a click would then hide it
        if sidebar.is_visible():
            return True
        tab.click()
        try:
            sidebar.wait_for(state="visible", timeout=5_000)
        except PlaywrightTimeout:
            return False
        return True

    wait_until(sidebar_shown, 60, "the nbtune sidebar shown")
    page.locator(f'#nbtune-experiments tr.jp-nbtune-row[data-experiment="{name}"]').click()
    view = page.locator(f'.jp-nbtune-experiment[data-experiment="{name}"]')
    view.locator(".jp-nbtune-grid tbody tr").first.wait_for(timeout=60_000)
    view.locator(".jp-nbtune-history circle").first.wait_for(state="attached")
    return view


def datasets(locator) -> list[dict[str, str]]:
    return locator.evaluate_all("els => els.map(e => Object.assign({}, e.dataset))")


def set_budget(view, budget: float) -> None:
    view.locator("select.jp-nbtune-budget").select_option(f"{budget:g}")
    wait_until(lambda: view.get_attribute("data-budget") == f"{budget:g}", 30,
               f"the views at budget {budget}")


def shown_at(res: pd.DataFrame, budget: float) -> pd.DataFrame:
    """The trials the views show at ``budget``: those with a value that reached it."""
    return res[res["last"].notna() & (res["budget_used"] >= budget - 1e-9)]


def check_history(view, exp: nbtune.Experiment, budget: float, name: str) -> None:
    res = shown_at(exp.results(), budget).sort_values("trial_id")
    view.locator(".jp-nbtune-tab[data-tab='history']").click()
    view.locator("select.jp-nbtune-history-by").select_option("trial")
    series = view.locator(f'.jp-nbtune-history g.jp-nbtune-series[data-experiment="{name}"]')
    wait_until(lambda: view.locator('.jp-nbtune-history[data-by="trial"]').count(), 30,
               "history against trial number")
    points = datasets(series.locator("circle.jp-nbtune-point"))
    assert [int(p["trial"]) for p in points] == list(res["trial_id"])
    assert [float(p["value"]) for p in points] == pytest.approx(list(res["last"]), rel=1e-12)
    assert [float(p["budget"]) for p in points] == list(res["budget_used"])
    running_best = list(np.minimum.accumulate(res["last"].to_numpy()))
    best = [float(p["best"]) for p in points]
    assert best == pytest.approx(running_best, rel=1e-12)
    assert all(b <= a for a, b in zip(best, best[1:], strict=False))  # monotone
    line = series.locator("path.jp-nbtune-best").get_attribute("data-best")
    assert [float(x) for x in line.split(",")] == pytest.approx(running_best, rel=1e-12)


def check_parallel(view, exp: nbtune.Experiment, budget: float) -> None:
    res = shown_at(exp.results(), budget).set_index("trial_id")
    view.locator(".jp-nbtune-tab[data-tab='parallel']").click()
    lines = datasets(view.locator("path.jp-nbtune-pc-line"))
    assert sorted(int(x["trial"]) for x in lines) == sorted(res.index)
    for x in lines:
        values, t = json.loads(x["values"]), int(x["trial"])
        assert set(values) == {*SPACE, "loss"}
        for k in SPACE:
            want = res.loc[t, f"config/{k}"]
            assert values[k] == (pytest.approx(want, rel=1e-12) if isinstance(want, float)
                                 else want), (t, k)
        assert values["loss"] == pytest.approx(res.loc[t, "last"], rel=1e-12)
    axes = view.locator(".jp-nbtune-pc-axis")
    assert [axes.nth(i).get_attribute("data-axis") for i in range(axes.count())] == [
        *SPACE, "loss"]
    for i in range(axes.count()):  # every axis has ticks and its label
        assert axes.nth(i).locator("text.jp-nbtune-tick").count() >= 2
    # brush the lower half of the metric's axis: the lines kept are the trials in it
    loss = view.locator('.jp-nbtune-pc-axis[data-axis="loss"]')
    box = loss.locator("rect.jp-nbtune-brush-area").bounding_box()
    x = box["x"] + box["width"] / 2
    page = view.page
    page.mouse.move(x, box["y"] + box["height"] - 1)  # below the axis: from its bottom
    page.mouse.down()
    page.mouse.move(x, box["y"] + box["height"] * 0.5, steps=4)
    page.mouse.up()
    brush = loss.get_attribute("data-brush")
    assert brush, "the brush on the loss axis"
    lo, hi = (float(u) for u in brush.split(","))
    assert lo == 0.0 and 0.2 < hi < 0.8
    v = res["last"]
    unit = (v - v.min()) / (v.max() - v.min())
    want = sorted(int(t) for t in unit.index[(unit >= lo - 1e-9) & (unit <= hi + 1e-9)])
    kept = [int(x["trial"]) for x in datasets(view.locator("path.jp-nbtune-pc-line"))
            if x["brushed"] == "1"]
    assert sorted(kept) == want and 0 < len(want) < len(res)
    # a click without a drag clears it
    page.mouse.click(x, box["y"] + box["height"] * 0.3)
    wait_until(lambda: loss.get_attribute("data-brush") is None, 10, "the brush cleared")
    assert all(x["brushed"] == "1" for x in datasets(view.locator("path.jp-nbtune-pc-line")))


def check_importance(view, exp: nbtune.Experiment, budget: float) -> None:
    view.locator(".jp-nbtune-tab[data-tab='importance']").click()
    snap = Snapshots(DashboardModel(exp.engine, runtime=exp.runtime)).take()
    want = an.importance(snap, SPACE, budget=budget)
    assert want is not None
    bars = {b["param"]: float(b["importance"])
            for b in datasets(view.locator("rect.jp-nbtune-bar"))}
    assert bars.keys() == want.keys()
    for k in want:
        assert bars[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12), k


def grid_ids(view) -> list[int]:
    return [int(r["trial"]) for r in datasets(view.locator(".jp-nbtune-grid tbody tr"))]


def check_grid(view, exp: nbtune.Experiment) -> None:
    res = exp.results().sort_values("trial_id").reset_index(drop=True)
    view.locator(".jp-nbtune-tab[data-tab='trials']").click()
    assert grid_ids(view) == list(res["trial_id"])
    row = view.locator(f'.jp-nbtune-grid tr[data-trial="{int(res.iloc[0]["trial_id"])}"]')
    for k in SPACE:
        cell = row.locator(f'td[data-field="config/{k}"]').get_attribute("data-value")
        assert cell == str(res.iloc[0][f"config/{k}"]) or math.isclose(
            float(cell), float(res.iloc[0][f"config/{k}"]), rel_tol=1e-12)
    head = view.locator(".jp-nbtune-grid thead")
    for field, column in (("config/width", "config/width"), ("value", "loss"),
                          ("config/optimizer", "config/optimizer"), ("budget", "budget_used")):
        for ascending in (True, False):
            head.locator(f'th[data-field="{field}"]').first.click()
            want_dir = "asc" if ascending else "desc"
            wait_until(lambda f=field, d=want_dir: head.locator(
                f'th[data-field="{f}"][data-sort="{d}"]').count(), 10, f"{field} sorted {want_dir}")
            want = list(res.sort_values(column, ascending=ascending, kind="stable",
                                        na_position="last")["trial_id"])
            assert grid_ids(view) == want, (field, ascending)
    # filters: a state, a numeric range of the metric, a text that a choice contains
    head.locator("select[data-filter-state]").select_option("stopped")
    lo, hi = float(res["loss"].quantile(0.2)), float(res["loss"].quantile(0.9))
    head.locator('input[data-filter-min="value"]').fill(repr(lo))
    head.locator('input[data-filter-max="value"]').fill(repr(hi))
    head.locator('input[data-filter-text="config/optimizer"]').fill("ad")
    want_rows = res[(res["state"] == "stopped") & (res["loss"] >= lo) & (res["loss"] <= hi)
                    & res["config/optimizer"].astype(str).str.contains("ad")]
    want = list(want_rows.sort_values("budget_used", ascending=False,
                                      kind="stable")["trial_id"])
    assert 0 < len(want) < len(res)
    wait_until(lambda: grid_ids(view) == want, 10, f"the filtered grid to be {want}")
    for sel in ('input[data-filter-min="value"]', 'input[data-filter-max="value"]',
                'input[data-filter-text="config/optimizer"]'):
        head.locator(sel).fill("")
    head.locator("select[data-filter-state]").select_option("")
    wait_until(lambda: len(grid_ids(view)) == len(res), 10, "the grid unfiltered again")


def check_side_by_side(view, runs: dict[str, nbtune.Experiment]) -> None:
    other = NAMES[1]
    view.locator("select.jp-nbtune-compare").select_option(
        [o for o in view.locator("select.jp-nbtune-compare option").evaluate_all(
            "os => os.map(o => o.value)") if other in o])
    view.locator(".jp-nbtune-tab[data-tab='history']").click()
    series = view.locator(".jp-nbtune-history g.jp-nbtune-series")
    wait_until(lambda: series.count() == 2, 30, "two experiments' history on one plot")
    assert datasets(series) and [s["experiment"] for s in datasets(series)] == list(NAMES)
    colors = {series.nth(i).locator("path.jp-nbtune-best").get_attribute("stroke")
              for i in range(2)}
    assert len(colors) == 2  # one colour per experiment
    budget = float(series.nth(1).get_attribute("data-budget"))
    check_history(view, runs[other], budget, other)


def check_everything(page, server: LabServer, runs: dict[str, nbtune.Experiment],
                     shots: bool = False, goto: bool = True) -> None:
    check_views(open_panel(page, server, NAMES[0], goto=goto), runs, shots)


def check_views(view, runs: dict[str, nbtune.Experiment], shots: bool = False) -> None:
    exp = runs[NAMES[0]]
    res = exp.results()
    default = float(view.get_attribute("data-default-budget"))
    counts = {b: int((res["budget_used"] >= b).sum()) for b in set(res["budget_used"])}
    assert default == max(b for b, n in counts.items() if n >= an.MIN_TRIALS)
    assert float(view.get_attribute("data-budget")) == default
    assert view.locator(".jp-nbtune-history svg .jp-nbtune-axis-label").count() == 2
    check_grid(view, exp)
    if shots and SHOTS is not None:
        view.screenshot(path=str(SHOTS / "lab-panel-trials.png"))
    # every ended trial, whatever budget it reached
    set_budget(view, 0)
    check_history(view, exp, 0.0, NAMES[0])
    assert len(datasets(view.locator(".jp-nbtune-history circle.jp-nbtune-point"))) == int(
        res["state"].isin(["completed", "stopped", "error"]).sum())
    check_parallel(view, exp, 0.0)
    # at the default budget, the forest's importance
    set_budget(view, default)
    check_history(view, exp, default, NAMES[0])
    check_parallel(view, exp, default)
    check_importance(view, exp, default)
    if shots and SHOTS is not None:
        for tab in ("parallel", "importance"):
            view.locator(f".jp-nbtune-tab[data-tab='{tab}']").click()
            view.screenshot(path=str(SHOTS / f"lab-panel-{tab}.png"))
    check_side_by_side(view, runs)
    if shots and SHOTS is not None:
        view.screenshot(path=str(SHOTS / "lab-panel-history.png"))


def test_panel_views_match_the_results(page, lab_server: LabServer,
                                       runs: dict[str, nbtune.Experiment]) -> None:
    check_everything(page, lab_server, runs, shots=True)
    # a reload starts the page afresh: the panel is opened again and shows the same
    page.reload()
    check_everything(page, lab_server, runs, goto=False)


def test_panel_views_in_a_second_tab(page, browser: Any, lab_server: LabServer,
                                     runs: dict[str, nbtune.Experiment]) -> None:
    first = open_panel(page, lab_server, NAMES[0])
    second = browser.new_page()
    second.set_default_timeout(60_000)
    try:
        check_everything(second, lab_server, runs)
    finally:
        second.close()
    # the first tab, open all along, shows the same
    check_views(first, runs)


def test_views_endpoint_is_computed_once_per_change(lab_server: LabServer) -> None:
    """The panel polls every few seconds; the server answers from its cache between changes."""
    first = lab_server.api(f"nbtune/api/experiments/{NAMES[0]}/analysis")
    again = lab_server.api(f"nbtune/api/experiments/{NAMES[0]}/analysis")
    assert first == again
    assert first["budget"] == first["default_budget"]
    assert lab_server.api(f"nbtune/api/experiments/{NAMES[0]}/analysis?budget=0")["budget"] == 0


def check_allocation(view, store: Path, name: str) -> None:
    """The timeline against the store's truth: every placement it recorded (held for some
    time) on its lane with its share and times, the lanes labelled as the hardware is, and
    trials packed on one lane stacked, never drawn over each other."""
    st = Store(store)
    try:
        allocs, cluster = st.allocations(name), st.cluster(name)
    finally:
        st.close()
    view.locator(".jp-nbtune-tab[data-tab='allocation']").click()
    rects = view.locator(".jp-nbtune-allocation rect.jp-nbtune-alloc-rect")
    rects.first.wait_for(state="attached")
    want = [(int(r.trial_id), int(r.gpu_id), float(r.share), float(r.start), float(r.end))
            for r in allocs.itertuples() if r.end > r.start]
    drawn = datasets(rects)
    got = [(int(r["trial"]), int(r["lane"]), float(r["share"]), float(r["start"]),
            float(r["end"])) for r in drawn]
    assert got == want and len(want) >= len(allocs["trial_id"].unique())
    cpu = cluster.cpu_stand_ins
    word = "worker" if cpu else "GPU"
    lanes = datasets(view.locator(".jp-nbtune-allocation g.jp-nbtune-lane"))
    assert [(int(x["lane"]), x["label"]) for x in lanes] == [
        (g.gpu_id, f"{word} {g.gpu_id}") for g in cluster.gpus]
    ticks = view.locator(".jp-nbtune-allocation .jp-nbtune-axis-left text.jp-nbtune-tick")
    assert ticks.all_text_contents() == [f"{word} {g.gpu_id}" for g in cluster.gpus]
    text = view.locator(".jp-nbtune-allocation").inner_text()
    assert ("worker lanes (CPU workers standing in for GPUs)" in text) == cpu
    assert ("GPU lanes" in text) != cpu
    assert view.locator(".jp-nbtune-allocation").get_attribute("data-device") == (
        "CPU" if cpu else "GPU")
    if cpu:  # no lane is called a GPU where there is none
        assert not [t for t in ticks.all_text_contents() if "GPU" in t]
    by_lane: dict[int, list[tuple[float, float, float, float]]] = {}
    for r in drawn:
        lo, share = float(r["offset"]), float(r["share"])
        assert lo >= 0 and lo + share <= 1 + 1e-9  # inside its lane
        by_lane.setdefault(int(r["lane"]), []).append(
            (float(r["start"]), float(r["end"]), lo, lo + share))
    for boxes in by_lane.values():  # overlapping in time: apart in height
        for i, (a0, a1, y0, y1) in enumerate(boxes):
            for b0, b1, z0, z1 in boxes[i + 1:]:
                assert not (a0 < b1 and b0 < a1 and y0 < z1 - 1e-9 and z0 < y1 - 1e-9)


def test_allocation_timeline_matches_the_store(page, lab_server: LabServer, lab_root: Path,
                                               runs: dict[str, nbtune.Experiment]) -> None:
    for i, name in enumerate(NAMES):
        view = open_panel(page, lab_server, name, goto=i == 0)
        check_allocation(view, store_path(lab_root), name)
    if SHOTS is not None:
        view.screenshot(path=str(SHOTS / "lab-panel-allocation.png"))
