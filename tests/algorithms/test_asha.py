"""ASHA promotes exactly what Li et al.'s rule allows, and ends cleanly."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.algorithms import ASHA, AlgorithmError
from nbtune.algorithms.asha import promotable
from nbtune.core.space import uniform
from nbtune.core.trial import TrialState

from .driver import Driver, fail_every

SPACE = {"x": uniform(0, 1)}


class CheckedASHA(ASHA):
    """Checks every promotion against the rung results as they were before the ask."""

    def ask(self, max_trials: int):
        before = [dict(r) for r in self.rung_results]
        promoted_before = [set(p) for p in self.promoted]
        paused_before = set(self._paused)
        groups = super().ask(max_trials)
        specs = [s for g in groups for s in g.specs]
        assert len(specs) <= max_trials
        for spec in specs:
            if spec.budget == self.rungs[0]:
                continue
            k = self.rungs.index(spec.budget) - 1
            res = before[k]
            top = sorted(res, key=lambda t: (res[t], t))[: len(res) // self.eta_int]
            assert spec.trial_id in top, (spec.trial_id, k, res)
            assert spec.trial_id not in promoted_before[k]
            assert spec.trial_id in paused_before
        if len(specs) < max_trials:  # capacity left: nothing promotable may remain
            assert self.find_promotion() is None
        return groups

    @property
    def eta_int(self) -> int:
        return int(self.eta)


@settings(max_examples=40, deadline=None)
@given(
    losses=st.lists(st.floats(0, 1, allow_nan=False), min_size=30, max_size=30),
    slots=st.integers(1, 12),
    eta=st.sampled_from([2, 3]),
    fail=st.booleans(),
)
def test_promotion_rule(losses: list[float], slots: int, eta: int, fail: bool) -> None:
    def metric(space: Any, cfg: Any, budget: float) -> float:
        # a per-trial loss independent of the config: x is sampled, so key on it
        return losses[int(cfg["x"] * 1e6) % 30] / budget

    n = 20
    algo = CheckedASHA(SPACE, metric="loss", max_budget=eta**3, num_trials=n, eta=eta, seed=1,
                       type="promotion")
    res = Driver(algo, slots=slots, metric_fn=metric, fail=fail_every(4) if fail else None).run()
    assert len(res.trials) == n
    assert algo.finished
    # a trial in rung k+1 was promoted from rung k
    for k in range(1, len(algo.rungs)):
        assert set(algo.rung_results[k]) <= algo.promoted[k - 1]


@given(st.dictionaries(st.integers(0, 100), st.floats(allow_nan=False), max_size=40),
       st.sampled_from([2, 3, 4]))
def test_promotable_is_top_fraction(results: dict[int, float], eta: int) -> None:
    top = promotable(results, eta)
    assert len(top) == len(results) // eta
    worst_top = max((results[t] for t in top), default=None)
    for t in set(results) - set(top):
        assert worst_top is None or results[t] >= worst_top


def test_first_promotion_after_eta_results() -> None:
    algo = ASHA(SPACE, metric="loss", max_budget=9, num_trials=9, eta=3, seed=0, type="promotion")
    (g,) = algo.ask(3)
    ids = [s.trial_id for s in g.specs]
    for t, loss in zip(ids, [5.0, 1.0, 3.0], strict=True):
        algo.on_report(t, 1, {"loss": loss})
        algo.on_segment_end(t, 1)
    (g,) = algo.ask(1)
    assert [(s.trial_id, s.budget) for s in g.specs] == [(ids[1], 3.0)]
    (g,) = algo.ask(1)  # nothing else in the top third: a new config
    assert g.specs[0].trial_id not in ids and g.specs[0].budget == 1.0


def test_leftovers_retired_when_exhausted() -> None:
    algo = ASHA(SPACE, metric="loss", max_budget=9, num_trials=2, eta=3, seed=0, type="promotion")
    (g,) = algo.ask(5)
    assert len(g) == 2
    for s in g.specs:
        algo.on_report(s.trial_id, 1, {"loss": 1.0})
        algo.on_segment_end(s.trial_id, 1)
    # 2 results at rung 0: floor(2/3) = 0 promotions, no configs left -> done
    assert algo.finished
    assert sorted(algo.pop_retired()) == sorted(s.trial_id for s in g.specs)
    assert algo.ask(5) == []


def test_engine_pause_before_rung_is_ignored() -> None:
    algo = ASHA(SPACE, metric="loss", max_budget=9, num_trials=3, eta=3, seed=0, type="promotion")
    (g,) = algo.ask(1)
    t = g.specs[0].trial_id
    algo.on_report(t, 0.5, {"loss": 1.0})
    algo.on_segment_end(t, 0.5)  # not a rung result: still counted as running
    assert algo.rung_results[0] == {}
    algo.on_trial_end(t, TrialState.ERROR)
    assert not algo.finished


def test_default_size_is_successive_halvings() -> None:
    assert ASHA(SPACE, metric="loss", max_budget=9).num_trials == 9
    assert ASHA(SPACE, metric="loss", max_budget=3).num_trials == 3
    with pytest.raises(AlgorithmError, match="type must be"):
        ASHA(SPACE, metric="loss", max_budget=9, type="pause")


def test_stopping_rule_keeps_the_top_third_as_ray() -> None:
    from nbtune.algorithms.asha import asha_keeps

    assert asha_keeps([], 5.0, 3)  # the first at a rung goes on
    assert not asha_keeps([1.0, 2.0], 3.0, 3)
    assert asha_keeps([2.0, 3.0], 1.0, 3)
    assert not asha_keeps([1.0], float("nan"), 3)  # NaN ranks last
    assert asha_keeps([float("nan"), float("nan")], 7.0, 3)  # ... below any number
    # judged against the results recorded before its own, as Ray: with 1, 2, 3 recorded the
    # cutoff is 1 + 2/3, so 1.8 stops (counting its own result, 1.8 was the cutoff: kept)
    assert not asha_keeps([1.0, 2.0, 3.0], 1.8, 3)
    assert asha_keeps([1.0, 2.0, 3.0], 1.6, 3)


def test_stopping_mode_runs_every_trial_once_to_max_budget_or_a_stop() -> None:
    algo = ASHA(SPACE, metric="loss", max_budget=9, num_trials=12, eta=3, seed=0)
    res = Driver(algo, slots=3).run()
    assert algo.finished and len(res.trials) == 12
    assert all(len(t.segments) <= 1 for t in res.trials.values())  # never paused, relaunched
    assert all(s[2] == 9 for s in res.specs)  # every spec asks for max_budget
    assert any(t.used == 9 for t in res.trials.values())
    assert any(t.used < 9 for t in res.trials.values())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(-5, 5), st.just(float("nan")), st.just(float("inf")),
                          st.just(float("-inf"))), max_size=30),
       st.one_of(st.floats(-5, 5), st.just(float("nan")), st.just(float("inf")),
                 st.just(float("-inf"))),
       st.sampled_from([2, 3, 4, 2.5]), st.data())
def test_the_sorted_rung_rule_decides_as_the_percentile_rule(others, loss, eta, data):
    """The O(log n) rule on the sorted rung equals the percentile rule on the whole rung."""
    import bisect

    from nbtune.algorithms._common import rank_key
    from nbtune.algorithms.asha import asha_keeps, asha_keeps_ranked

    if others and data.draw(st.booleans()):
        loss = others[data.draw(st.integers(0, len(others) - 1))]  # a tie with the rung
    ranked: list[tuple[float, int]] = []
    for tid, x in enumerate(others):
        bisect.insort(ranked, (rank_key(x), tid))
    assert asha_keeps_ranked(ranked, loss, eta) == asha_keeps(others, loss, eta)
