"""Synchronous successive halving keeps exactly the top floor(n/eta) of every rung."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.algorithms import SuccessiveHalving
from nbtune.core.space import uniform
from nbtune.core.trial import TrialState

from .driver import Driver

SPACE = {"x": uniform(0, 1)}


def finish_rung(algo, group, losses, *, fail=()) -> None:
    """Report each trial's loss at the rung budget and end its segment (or fail it)."""
    for spec in group.specs:
        if spec.trial_id in fail:
            algo.on_trial_end(spec.trial_id, TrialState.ERROR)
            continue
        algo.on_report(spec.trial_id, spec.budget, {"loss": losses[spec.trial_id]})
        if spec.budget >= algo.max_budget:
            algo.on_trial_end(spec.trial_id, TrialState.COMPLETED)
        else:
            algo.on_segment_end(spec.trial_id, spec.budget)


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(1, 60),
    eta=st.sampled_from([2, 3, 4]),
    mode=st.sampled_from(["min", "max"]),
    data=st.data(),
)
def test_keeps_exactly_top_fraction(n: int, eta: int, mode: str, data) -> None:
    algo = SuccessiveHalving(
        SPACE, metric="loss", mode=mode, max_budget=eta**3, num_trials=n, eta=eta, seed=0
    )
    (group,) = algo.ask(n)
    assert len(group) == n and all(s.budget == 1 for s in group.specs)
    alive = [s.trial_id for s in group.specs]
    for rung in range(3):
        losses = dict(
            zip(alive, data.draw(st.permutations(range(len(alive)))), strict=True)
        )
        finish_rung(algo, group, losses)
        retired = set(algo.pop_retired())
        groups = algo.ask(0)
        assert len(groups) == 1
        group = groups[0]
        keep = max(1, len(alive) // eta)
        ranked = sorted(alive, key=lambda t: losses[t], reverse=(mode == "max"))
        assert {s.trial_id for s in group.specs} == set(ranked[:keep])
        assert retired == set(ranked[keep:])
        assert all(s.budget == eta ** (rung + 1) for s in group.specs)
        alive = ranked[:keep]
    finish_rung(algo, group, dict.fromkeys(alive, 0.0))
    assert algo.finished and algo.ask(4) == [] and algo.pop_retired() == []


def test_failed_trials_lose_their_rung() -> None:
    algo = SuccessiveHalving(SPACE, metric="loss", max_budget=9, num_trials=9, seed=0)
    (group,) = algo.ask(9)
    ids = [s.trial_id for s in group.specs]
    losses = {t: float(i) for i, t in enumerate(ids)}
    # the three best all fail: the next three go on, nobody waits for the failed
    finish_rung(algo, group, losses, fail=set(ids[:3]))
    (nxt,) = algo.ask(0)
    assert [s.trial_id for s in nxt.specs] == ids[3:6]
    assert set(algo.pop_retired()) == set(ids[6:])


def test_all_failed_ends_the_bracket() -> None:
    algo = SuccessiveHalving(SPACE, metric="loss", max_budget=9, num_trials=4, seed=0)
    (group,) = algo.ask(4)
    finish_rung(algo, group, {}, fail={s.trial_id for s in group.specs})
    assert algo.finished and algo.ask(4) == []


@pytest.mark.parametrize(("max_budget", "budgets"), [(9, [1, 3, 9]), (10, [1, 3, 9, 10])])
def test_rungs_and_natural_size(max_budget: int, budgets: list[int]) -> None:
    algo = SuccessiveHalving(SPACE, metric="loss", max_budget=max_budget, seed=0)
    assert algo.budgets == budgets
    res = Driver(algo, slots=4).run()
    assert len(res.trials) == 3 ** (len(budgets) - 1)
    assert [len(g) for g in res.groups][-1] == 1
    assert [g[0].budget for g in res.groups] == budgets
