"""One "best trial" everywhere: ``exp.best``, ``nbtune ls/show``, the sidebar and the report.

The run is built so the early leader is not the late one: one trial's loss
goes up with training (overfitting), so it holds the lowest loss of the whole
run at budget 1 and still loses its rung at budget 3. Every view must
name the furthest-trained trials' best (:mod:`nbtune.core.best`), not that
early leader; the old sidebar (best over all budgets) named the early one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

import nbtune
from nbtune.cli import main
from nbtune.core.best import best_index
from nbtune.core.space import uniform
from nbtune.server.summary import summarize
from nbtune.store import Store
from nbtune.ui.dashboard_model import DashboardModel
from nbtune.workloads.workload_protocol import WorkloadModel

SPACE = {"x": uniform(0.0, 1.0)}
#: loss = a + b·budget per trial id: trial 0 leads at budget 1 (0.1) and overfits (0.3 at 3),
#: trial 1 starts behind and wins (0.22 at 3, 0.16 at 9); the rest trail
CURVES = {0: (0.0, 0.1), 1: (0.25, -0.01), 2: (0.26, 0.0)}


class Overfitting(WorkloadModel):
    """Successive halving's early leader is cut at the second rung; the late leader wins."""

    metric = "loss"

    def unit_time(self, trial_id: int, config: Mapping[str, Any]) -> float:
        return 1.0

    def metrics(self, trial_id: int, config: Mapping[str, Any], budget: float) -> dict[str, float]:
        a, b = CURVES.get(trial_id, (0.5, 0.0))
        return {"loss": a + b * budget}

    @property
    def space(self) -> dict[str, Any]:
        return dict(SPACE)


WL = Overfitting()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("best") / "st.db"
    exp = nbtune.tune(WL, SPACE, algorithm="sha", metric="loss", max_budget=9, num_trials=9,
                      eta=3, seed=5, runtime=nbtune.SimRuntime(cluster=4), store=path, name="overfit")
    exp.recorder.close()
    return exp, path


def test_the_early_leader_is_not_the_late_one(run):
    exp, _ = run
    trials = list(exp.engine.trials.values())
    early = min((t for t in trials if t.best is not None), key=lambda t: t.best)
    top = max(t.budget_used for t in trials)
    assert early.budget_used < top  # the lowest loss of the run was seen on a trial cut early
    assert early.trial_id == 0 and early.best == pytest.approx(0.1)
    assert exp.best is not None and exp.best["trial_id"] == 1 and exp.best["budget_used"] == top


def test_every_view_names_the_same_best_trial(run, capsys):
    exp, path = run
    best = exp.best["trial_id"]
    # the CLI: `nbtune ls` and `nbtune show`
    assert main(["ls", "--store", str(path)]) == 0
    ls = capsys.readouterr().out
    assert f"loss {exp.best['loss']:.4f}" in ls
    assert main(["show", "overfit", "--store", str(path)]) == 0
    show = capsys.readouterr().out
    assert re.search(rf"^best trial {best}: loss {exp.best['loss']:.4f}", show, re.M), show
    # the JupyterLab sidebar's summary
    summary = summarize(Store(path), str(path))["experiments"][0]
    assert summary["best_trial"] == best and summary["best"] == pytest.approx(exp.best["loss"])
    # the dashboard and the HTML report, which render this model's delta
    model = DashboardModel(exp.engine)
    try:
        delta = model.pull()
    finally:
        model.close()
    assert delta.best == best
    assert model.display_state(best) == "best"


@pytest.mark.parametrize("mode", ["min", "max"])
def test_best_index_takes_the_furthest_trained(mode):
    sign = 1 if mode == "min" else -1
    scores = [(sign * 0.1, 1.0), (sign * 0.5, 9.0), (sign * 0.4, 9.0), (None, 9.0),
              (float("nan"), 9.0), (sign * float("inf"), 3.0)]
    assert best_index(scores, mode) == 2
    assert best_index([(None, 1.0)], mode) is None
    assert best_index([(1.0, 3.0), (1.0, 3.0)], mode) == 0  # a tie goes to the first
