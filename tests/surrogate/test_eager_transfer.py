"""Eager transfer: TargetTrials start at the fraction, get replaced, and the best is trained."""

from __future__ import annotations

import pytest

from nbtune.algorithms.grid import GridSearch
from nbtune.algorithms.random_search import RandomSearch
from nbtune.core.space import grid, uniform
from nbtune.core.trial import Decision, TrialState
from nbtune.surrogate.eager_transfer import TARGET_ID_BASE, TARGET_KEY, EagerTransfer, build
from tests.surrogate.models import MLP


def _grid(n: int = 6) -> GridSearch:
    return GridSearch({"x": grid(list(range(1, n + 1)))}, metric="loss", mode="min",
                      max_budget=2, seed=0)


def _finish(algo: EagerTransfer, tid: int, loss: float) -> None:
    assert algo.on_report(tid, 2, {"loss": loss}) is Decision.CONTINUE
    algo.on_trial_end(tid, TrialState.COMPLETED)


def test_target_starts_at_the_fraction_is_replaced_and_final_best_is_trained():
    algo = EagerTransfer(_grid(), scaling=4, fraction=0.5)
    (g,) = algo.ask(6)
    assert [s.config["scaling"] for s in g.specs] == [4.0] * 6
    ids = [s.trial_id for s in g.specs]
    _finish(algo, ids[0], 5.0)
    _finish(algo, ids[1], 4.0)
    assert algo.ask(1) == []  # 2 of 6 ended: below 50 %
    _finish(algo, ids[2], 3.0)
    assert algo.ask(0) == []  # 50 %, but no idle worker
    (t1,) = algo.ask(1)
    spec = t1.specs[0]
    assert spec.trial_id == TARGET_ID_BASE and spec.budget == 2
    assert spec.config == {"x": 3, "scaling": 1, TARGET_KEY: True}
    assert algo.on_report(spec.trial_id, 1, {"loss": 9.0}) is Decision.CONTINUE
    _finish(algo, ids[3], 2.0)  # a better configuration: x = 4
    (t2,) = algo.ask(1)  # an idle worker: start the new TargetTrial at once
    assert t2.specs[0].config["x"] == 4
    assert algo.on_report(spec.trial_id, 2, {"loss": 8.0}) is Decision.STOP  # the old one
    algo.on_trial_end(spec.trial_id, TrialState.STOPPED)
    _finish(algo, ids[4], 1.0)  # better again, no idle worker: the running target is stopped
    assert algo.on_report(t2.specs[0].trial_id, 1, {"loss": 7.0}) is Decision.STOP
    algo.on_trial_end(t2.specs[0].trial_id, TrialState.STOPPED)
    (t3,) = algo.ask(1)
    assert t3.specs[0].config["x"] == 5
    _finish(algo, ids[5], 6.0)  # worse: no change
    assert not algo.finished  # the best has not been trained on the target yet
    assert algo.ask(1) == []
    _finish(algo, t3.specs[0].trial_id, 0.5)
    assert algo.finished
    res = algo.target_results()
    assert [r["state"] for r in res.values()] == [TrialState.STOPPED, TrialState.STOPPED,
                                                  TrialState.COMPLETED]


def test_fraction_zero_and_bad_options():
    algo = EagerTransfer(RandomSearch({"lr": uniform(0, 1)}, metric="acc", mode="max",
                                      max_budget=1, num_trials=2, seed=1), scaling=2,
                         fraction=0.0)
    (g,) = algo.ask(1)
    tid = g.specs[0].trial_id
    algo.on_report(tid, 1, {"acc": 0.7})
    algo.on_trial_end(tid, TrialState.COMPLETED)
    specs = [s for gr in algo.ask(4) for s in gr.specs]  # with fraction 0: a TargetTrial now
    assert specs[-1].config == {**algo.inner.configs[tid], "scaling": 1, TARGET_KEY: True}
    with pytest.raises(ValueError, match="scaling"):
        EagerTransfer(_grid(), scaling=0.5)
    with pytest.raises(ValueError, match="fraction"):
        EagerTransfer(_grid(), scaling=2, fraction=1.5)


def test_build_reads_the_scaling():
    assert build(lambda: MLP(64), {"scaling": 4}).widths["hid"] == (64, 16)
    assert build(lambda: MLP(64), {}).scale == 1.0


def test_not_finished_while_a_surrogate_still_runs():
    """Random search is "finished" once it has issued its trials; the transfer waits for them."""
    algo = EagerTransfer(RandomSearch({"lr": uniform(0, 1)}, metric="loss", max_budget=1,
                                      num_trials=2, seed=1), scaling=2, fraction=0.5)
    a, b = [s.trial_id for g in algo.ask(2) for s in g.specs]
    _ = algo.on_report(a, 1, {"loss": 2.0}), algo.on_trial_end(a, TrialState.COMPLETED)
    (t1,) = algo.ask(1)
    algo.on_report(t1.specs[0].trial_id, 1, {"loss": 2.0})
    algo.on_trial_end(t1.specs[0].trial_id, TrialState.COMPLETED)
    assert algo.inner.finished and not algo.finished  # b still runs
    _ = algo.on_report(b, 1, {"loss": 1.0}), algo.on_trial_end(b, TrialState.COMPLETED)
    assert not algo.finished
    (t2,) = algo.ask(1)
    assert t2.specs[0].config["lr"] == algo.inner.configs[b]["lr"]
    algo.on_report(t2.specs[0].trial_id, 1, {"loss": 1.0})
    algo.on_trial_end(t2.specs[0].trial_id, TrialState.COMPLETED)
    assert algo.finished


def test_a_best_that_was_trained_already_needs_no_new_target():
    """A report at a higher budget can make an earlier configuration the best again: its
    completed TargetTrial counts, so the run finishes though the last target trained another."""
    algo = EagerTransfer(RandomSearch({"lr": uniform(0, 1)}, metric="loss", max_budget=2,
                                      num_trials=2, seed=1), scaling=2, fraction=0.0)
    a, b = [s.trial_id for g in algo.ask(2) for s in g.specs]

    def target_completes(config_of: int) -> int:
        (t,) = algo.ask(1)
        spec = t.specs[0]
        assert spec.config["lr"] == algo.inner.configs[config_of]["lr"]
        assert algo.on_report(spec.trial_id, 2, {"loss": 1.0}) is Decision.CONTINUE
        algo.on_trial_end(spec.trial_id, TrialState.COMPLETED)
        return spec.trial_id

    algo.on_report(a, 1, {"loss": 3.0})
    algo.on_segment_end(a, 1)
    target_completes(a)
    algo.on_report(b, 1, {"loss": 2.0})  # b leads at budget 1
    algo.on_segment_end(b, 1)
    last = target_completes(b)
    algo.ask(0)  # resumes nothing: the inner search issued both trials already
    algo.on_report(a, 2, {"loss": 0.5})  # a reaches budget 2 first: the best is a again
    algo.on_trial_end(a, TrialState.COMPLETED)
    algo.on_report(b, 2, {"loss": 0.9})
    algo.on_trial_end(b, TrialState.COMPLETED)
    assert algo.best_config() == algo.inner.configs[a] != algo.targets[last]
    assert algo.ask(2) == [] and algo.finished
