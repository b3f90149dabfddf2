"""``%%tune`` with a cell body on the real Dask runtime, the live dashboard following it."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

pytestmark = pytest.mark.integration


@pytest.fixture
def ip(tmp_path):
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nbtune")
    saved = dict(shell.user_ns)
    shell.run_cell(f"""
import time
from nbtune import uniform
from nbtune.runtimes.dask import DaskRuntime
space = {{"lr": uniform(0.1, 1.0)}}
rt = DaskRuntime(n_workers=2, preload=(), warm_processes=1, sample_interval=0.25,
                 checkpoint_dir={str(tmp_path)!r})
OFFSET = 0.5
""")
    yield shell
    shell.user_ns["rt"].close()
    shell.user_ns.clear()
    shell.user_ns.update(saved)


def test_cell_body_runs_as_trials_on_dask_with_a_live_dashboard(ip, wire):
    from nbtune.ui.dashboard import Dashboard

    ip.run_cell_magic("tune", "space -m loss -b 4 -n 4 -a random --runtime rt --name on-dask "
                      "--no-dashboard", """
for step in trial.steps():
    time.sleep(0.05)
    trial.report(step, loss=(config["lr"] - OFFSET) ** 2 + 1.0 / step)
""")
    exp = ip.user_ns["exp"]
    assert exp.name == "on-dask"
    dash = Dashboard(exp, period=0.1)  # what display(exp) builds, updating on its thread
    assert exp.wait(120).done
    if dash._thread is not None:  # a run that ended before the dashboard started has none
        dash._thread.join(120)
    assert dash.finished and len(dash.figures.table_src.data["trial_id"]) == 4
    assert set(exp.results()["state"]) == {"completed"}
    # the body really ran: every trial reported the loss the cell computes
    for t in exp.engine.trials.values():
        b, loss = t.results[-1][1], t.results[-1][2]["loss"]
        assert b == 4 and loss == pytest.approx((t.config["lr"] - 0.5) ** 2 + 0.25)
    assert dash.last.util_kind == "measured"  # the Dask runtime samples utilization
    dash.close()


def test_a_dashboard_attached_to_an_idle_run_shows_everything(ip, wire, tmp_path):
    """Trials that reported once and then wait (nothing reaches the engine: utilization is
    sampled once a minute here): a dashboard attached now asks the engine's thread for its
    state and shows every trial, and the finished run afterwards."""
    from nbtune.core import events as ev
    from nbtune.runtimes.dask import DaskRuntime
    from nbtune.ui.dashboard import Dashboard
    from tests.dask_cluster import wait_for_budget

    gate = tmp_path / "go"
    ip.user_ns["quiet_rt"] = rt = DaskRuntime(n_workers=2, preload=(), warm_processes=1,
                                              sample_interval=60.0,
                                              checkpoint_dir=str(tmp_path / "ck"))
    try:
        ip.run_cell_magic("tune", "space -m loss -b 3 -n 2 -a random --runtime quiet_rt --name idle "
                          "--no-dashboard", f"""
import os
for step in trial.steps():
    trial.report(step, loss=config["lr"] + 1.0 / step)
    while step == 1 and not os.path.exists({str(gate)!r}):
        time.sleep(0.05)
""")
        exp = ip.user_ns["exp"]
        handled: list[type] = []
        exp.engine.subscribe(lambda events, cmds: handled.extend(type(e) for e in events))
        for tid in (0, 1):
            wait_for_budget(exp.engine, tid, 1.0, timeout=120)
        dash = Dashboard(exp, autostart=False)
        assert dash.model.settle(timeout=60)  # asked, and handed over on the engine's thread
        snap = dash.update()
        assert ev.SnapshotRequested in handled
        assert {r["trial_id"]: r["last"] for r in snap.rows} == {
            t: 1.0 + exp.engine.trials[t].config["lr"] for t in (0, 1)}
        assert not snap.done
        assert sorted(r["state"].removeprefix("★ ") for r in snap.rows) == ["running"] * 2
        gate.touch()
        assert exp.wait(120).done
        snap = dash.update()
        assert snap.done and dash.finished
        assert {r["budget"] for r in snap.rows} == {3.0}
        dash.close()
    finally:
        rt.close()
