"""The experiment panel's analysis views from the server: what ``exp.results()`` and
``nbtune.ui.analysis`` say of the same run, from a store and from a kernel's memory,
computed once per change of the experiment."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from tornado.httpclient import HTTPClientError

import nbtune
from nbtune.runtimes.sim import SimRuntime
from nbtune.server.sources import Sources, kernel_id, store_id
from nbtune.server.views_data import ViewsCache, ViewsInput, axis_ticks, store_input
from nbtune.store import Store
from nbtune.ui import analysis as an
from nbtune.ui.dashboard_model import DashboardModel
from nbtune.ui.snapshot import Snapshots
from nbtune.workloads import SyntheticWorkload
from tests.server.test_sources import kernel_env  # noqa: F401  (a fixture)

SPACE = {"lr": nbtune.loguniform(1e-4, 1e-1), "dropout": nbtune.uniform(0.0, 0.5),
         "width": nbtune.choice([32, 64, 128])}
ENABLED = {"ServerApp": {"jpserver_extensions": {"nbtune.server": True}}}


def run(store: Path | None, name: str, seed: int = 3) -> nbtune.Experiment:
    return nbtune.tune(SyntheticWorkload(SPACE, seed=seed), algorithm="asha", metric="loss",
                       max_budget=9, num_trials=24, store=store, name=name, seed=seed,
                       runtime=SimRuntime(cluster=4))


def check_views(reply: dict, exp: nbtune.Experiment, *, space: bool = True) -> None:
    res = exp.results().sort_values("trial_id")
    assert [t["trial_id"] for t in reply["trials"]] == list(res["trial_id"])
    assert [t["state"] for t in reply["trials"]] == list(res["state"])
    assert [t["budget"] for t in reply["trials"]] == list(res["budget_used"])
    for k in SPACE:
        assert [t["config"][k] for t in reply["trials"]] == list(res[f"config/{k}"])
    b = reply["budget"]
    shown = res[res["budget_used"] >= b - 1e-9]
    h = reply["history"]["trial"]
    assert h["trial_id"] == list(shown["trial_id"]) and h["value"] == list(shown["last"])
    assert h["best"] == list(np.minimum.accumulate(shown["last"].to_numpy()))
    assert reply["parallel"]["trial_id"] == list(shown["trial_id"])
    snap = Snapshots(DashboardModel(exp.engine, runtime=exp.runtime)).take()
    assert reply["default_budget"] == an.default_budget(snap)
    assert reply["budgets"] == an.budgets(snap)
    if space:
        assert reply["importance"] == an.importance(snap, SPACE, budget=b)
        assert reply["parallel"] == {
            k: list(v) for k, v in an.parallel_coordinates(snap, SPACE, budget=b).items()}
    else:  # a kernel does not write its space: no importance, axes over the shown values
        assert reply["importance"] is None
        for k in SPACE:
            assert reply["parallel"][k] == list(shown[f"config/{k}"])


def test_store_views_agree_with_the_results_and_are_cached(tmp_path: Path) -> None:
    exp = run(tmp_path / "s", "a")
    sources = Sources(str(tmp_path / "s" / "nbtune.db"), tmp_path / "rt", tmp_path)
    reply = sources.read_views("a")
    assert reply["budget"] == reply["default_budget"] and reply["params"] == list(SPACE)
    assert reply["source"] == store_id(str(tmp_path / "s" / "nbtune.db"))
    check_views(reply, exp)
    json.dumps(reply, allow_nan=False)  # what the handler sends is strict JSON
    assert sources.views.computed == 1
    assert sources.read_views("a") == reply  # a poll with nothing changed: from the cache
    assert sources.views.computed == 1
    every = sources.read_views("a", budget=0)  # all budgets: one point per ended trial
    assert every["budget"] == 0 and len(every["history"]["time"]["trial_id"]) == 24
    check_views(every, exp)
    assert sources.views.computed == 2
    assert sources.read_views("a", budget=123.0)["budget"] == reply["default_budget"]
    assert sources.read_views("nowhere") is None


def test_a_change_recomputes(tmp_path: Path) -> None:
    run(tmp_path / "s", "a")
    store = Store(tmp_path / "s" / "nbtune.db")
    try:
        inp = store_input(store, "a")
    finally:
        store.close()
    cache = ViewsCache()
    first = cache.reply(("s", "a"), inp, None)
    assert cache.reply(("s", "a"), inp, None) is first and cache.computed == 1
    trials = [dict(t) for t in inp.trials]
    trials[0]["state"] = "running"  # any change of what the views show
    changed = ViewsInput(inp.table, inp.space, trials)
    assert changed.fingerprint() != inp.fingerprint()
    cache.reply(("s", "a"), changed, None)
    assert cache.computed == 2


def test_axis_ticks_follow_the_domain() -> None:
    assert [t[1] for t in axis_ticks(SPACE["lr"])] == ["0.0001", "0.001", "0.01", "0.1"]
    assert [t[0] for t in axis_ticks(SPACE["lr"])] == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert [t[1] for t in axis_ticks(SPACE["width"])] == ["32", "64", "128"]
    lin = axis_ticks(SPACE["dropout"])
    assert [t[1] for t in lin] == ["0", "0.2", "0.4"]
    assert [t[0] for t in lin] == pytest.approx([0, 0.4, 0.8])


def test_kernel_memory_views(kernel_env: Path, tmp_path: Path) -> None:  # noqa: F811
    exp = run(None, "in-memory")
    sources = Sources(str(tmp_path / "none.db"), kernel_env, tmp_path)
    reply = sources.read_views("in-memory", kernel_id(os.getpid()))
    assert reply["source"] == kernel_id(os.getpid())
    check_views(reply, exp, space=False)


@pytest.fixture
def jp_server_config() -> dict:
    return ENABLED


async def test_rest_endpoint(jp_fetch, jp_root_dir: Path) -> None:
    exp = run(jp_root_dir / "nbtune-store", "rest")
    resp = await jp_fetch("nbtune", "api", "experiments", "rest", "analysis")
    assert resp.code == 200 and resp.headers["Content-Type"].startswith("application/json")
    check_views(json.loads(resp.body), exp)
    resp = await jp_fetch("nbtune", "api", "experiments", "rest", "analysis",
                          params={"budget": "0"})
    assert json.loads(resp.body)["budget"] == 0
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("nbtune", "api", "experiments", "rest", "analysis",
                       params={"budget": "lots"})
    assert err.value.code == 400
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("nbtune", "api", "experiments", "nowhere", "analysis")
    assert err.value.code == 404
    # the detail endpoint is still the one without /analysis
    resp = await jp_fetch("nbtune", "api", "experiments", "rest")
    assert json.loads(resp.body)["summary"]["name"] == "rest"
