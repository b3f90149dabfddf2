"""Hyperband: bracket arithmetic (Li et al. 2018) and how brackets are scheduled."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.algorithms import AlgorithmError, Hyperband, hyperband_brackets
from nbtune.core.space import uniform

from .driver import Driver, fail_every

SPACE = {"x": uniform(0, 1), "y": uniform(0, 1)}


def test_paper_table_r81_eta3() -> None:
    """Table 1 of Li et al. (2018): R = 81, eta = 3."""
    assert hyperband_brackets(81, 1, 3) == [
        [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
        [(34, 3), (11, 9), (3, 27), (1, 81)],
        [(15, 9), (5, 27), (1, 81)],
        [(8, 27), (2, 81)],
        [(5, 81)],
    ]


@settings(max_examples=200, deadline=None)
@given(
    ratio=st.integers(1, 2000),
    min_budget=st.sampled_from([1, 2, 0.5, 0.1]),
    eta=st.integers(2, 6),
)
def test_bracket_sizes_integer_eta(ratio: int, min_budget: float, eta: int) -> None:
    max_budget = ratio * min_budget
    brackets = hyperband_brackets(max_budget, min_budget, eta)
    s_max = 0
    while eta ** (s_max + 1) <= ratio:
        s_max += 1
    assert len(brackets) == s_max + 1
    for j, rungs in enumerate(brackets):
        s = s_max - j
        assert len(rungs) == s + 1
        n = math.ceil(Fraction(s_max + 1, s + 1) * eta**s)
        for i, (n_i, r_i) in enumerate(rungs):
            assert n_i == n // eta**i  # floor(n * eta^-i), exact
            assert math.isclose(r_i, max_budget * eta ** (i - s), rel_tol=1e-9)
        assert rungs[-1][1] == max_budget
        assert rungs[0][1] >= min_budget * (1 - 1e-9)
        assert rungs[-1][0] >= 1
        assert all(a[0] >= b[0] and a[1] < b[1] for a, b in zip(rungs, rungs[1:], strict=False))


@settings(max_examples=100, deadline=None)
@given(
    max_budget=st.floats(1, 5000, allow_nan=False),
    eta=st.floats(2, 5, allow_nan=False),
)
def test_bracket_invariants_real_eta(max_budget: float, eta: float) -> None:
    brackets = hyperband_brackets(max_budget, 1.0, eta)
    s_max = len(brackets) - 1
    assert eta**s_max <= max_budget * (1 + 1e-9)
    assert eta ** (s_max + 1) > max_budget * (1 - 1e-9)
    for j, rungs in enumerate(brackets):
        s = s_max - j
        n0 = rungs[0][0]
        assert n0 >= (s_max + 1) / (s + 1) * eta**s - 1e-6
        assert n0 < (s_max + 1) / (s + 1) * eta**s + 1
        assert rungs[-1] == (rungs[-1][0], max_budget)
        assert min(n for n, _ in rungs) >= 1


def test_invalid_arguments() -> None:
    with pytest.raises(AlgorithmError):
        hyperband_brackets(10, 20, 3)
    with pytest.raises(AlgorithmError):
        hyperband_brackets(10, 1, 1.5)


def rung_sizes(res) -> list[tuple[int, float]]:
    return [(len(g), g[0].budget) for g in res.groups]


def test_one_cycle_sequential() -> None:
    """With one slot brackets run one after another and each rung is one group."""
    algo = Hyperband(SPACE, metric="loss", max_budget=27, seed=0)
    res = Driver(algo, slots=1).run()
    assert rung_sizes(res) == [
        (27, 1), (9, 3), (3, 9), (1, 27),
        (12, 3), (4, 9), (1, 27),
        (6, 9), (2, 27),
        (4, 27),
    ]
    assert len(res.trials) == 27 + 12 + 6 + 4


def test_num_trials_truncates_last_bracket_and_cycles() -> None:
    algo = Hyperband(SPACE, metric="loss", max_budget=27, num_trials=30, seed=0)
    res = Driver(algo, slots=1).run()
    assert rung_sizes(res) == [(27, 1), (9, 3), (3, 9), (1, 27), (3, 3), (1, 9), (1, 27)]
    algo = Hyperband(SPACE, metric="loss", max_budget=9, num_trials=40, seed=0)
    res = Driver(algo, slots=1).run()
    cycle = [(9, 1), (3, 3), (1, 9), (5, 3), (1, 9), (3, 9)]
    assert rung_sizes(res) == cycle + cycle + [(6, 1), (2, 3), (1, 9)]
    assert len(res.trials) == 40


def test_parallel_brackets_fill_free_slots() -> None:
    algo = Hyperband(SPACE, metric="loss", max_budget=27, seed=0)
    groups = algo.ask(64)
    # 27 + 12 + 6 + 4 = 49 <= 64: the whole cycle starts at once
    assert [len(g) for g in groups] == [27, 12, 6, 4]
    assert algo.ask(64) == []  # everything is waiting at a barrier, no configs left

    algo = Hyperband(SPACE, metric="loss", max_budget=27, seed=0)
    assert [len(g) for g in algo.ask(0)] == [27]  # nothing active: start regardless
    assert algo.ask(0) == []  # busy: no new bracket without free slots
    assert [len(g) for g in algo.ask(1)] == [12]  # waiting at a barrier, a slot free


def test_rung_budgets_rounded_to_units() -> None:
    algo = Hyperband(SPACE, metric="loss", max_budget=10, seed=0)
    res = Driver(algo, slots=1).run()
    budgets = sorted({b for _, b in rung_sizes(res)})
    assert budgets == [1.0, 3.0, 10.0]


def test_fractional_budgets_kept_exact() -> None:
    algo = Hyperband(SPACE, metric="loss", max_budget=4.5, min_budget=0.5, seed=0)
    res = Driver(algo, slots=2).run()
    assert sorted({b for _, b in rung_sizes(res)}) == [0.5, 1.5, 4.5]


def _one_bracket_at_a_time(algo: Hyperband) -> Hyperband:
    """Wrap ``algo.ask`` to check that at most one bracket is ever active."""
    ask = algo.ask

    def checked(max_trials: int):
        groups = ask(max_trials)
        active = [b.index for b in algo.brackets if not b.done]
        assert len(active) <= 1, f"brackets {active} active at once"
        return groups

    algo.ask = checked  # type: ignore[method-assign]
    return algo


def test_sequential_brackets_leave_free_slots_idle() -> None:
    """pipeline_brackets=False (Fluid's SyncBOHB): no new bracket while one is unfinished."""
    algo = Hyperband(SPACE, metric="loss", max_budget=27, seed=0, pipeline_brackets=False)
    assert [len(g) for g in algo.ask(64)] == [27]
    assert algo.ask(64) == []  # bracket 0 waits at its barrier: 37 free slots stay idle
    res = Driver(_one_bracket_at_a_time(
        Hyperband(SPACE, metric="loss", max_budget=27, seed=0, pipeline_brackets=False)),
        slots=64).run()
    assert rung_sizes(res) == [
        (27, 1), (9, 3), (3, 9), (1, 27),
        (12, 3), (4, 9), (1, 27),
        (6, 9), (2, 27),
        (4, 27),
    ]


def test_pipelined_brackets_overlap() -> None:
    """The default overlaps brackets, so the one-at-a-time check above can fail."""
    algo = _one_bracket_at_a_time(Hyperband(SPACE, metric="loss", max_budget=27, seed=0))
    with pytest.raises(AssertionError, match="active at once"):
        Driver(algo, slots=64).run()


@settings(max_examples=60, deadline=None)
@given(
    slots=st.integers(1, 80),
    max_budget=st.sampled_from([3, 9, 27, 10]),
    eta=st.sampled_from([2, 3]),
    num_trials=st.one_of(st.none(), st.integers(1, 60)),
    failures=st.booleans(),
)
def test_sequential_brackets_property(slots: int, max_budget: int, eta: int,
                                      num_trials: int | None, failures: bool) -> None:
    """Any slots, caps and failures: one bracket at a time, the contract holds, it finishes."""
    from .driver import fail_every

    algo = _one_bracket_at_a_time(Hyperband(
        SPACE, metric="loss", max_budget=max_budget, eta=eta, num_trials=num_trials, seed=0,
        pipeline_brackets=False))
    res = Driver(algo, slots=slots, fail=fail_every(4) if failures else None).run()
    assert algo.finished
    expected = algo.cap
    assert len(res.trials) == expected


def test_pipeline_brackets_must_be_bool() -> None:
    with pytest.raises(AlgorithmError):
        Hyperband(SPACE, metric="loss", max_budget=27, pipeline_brackets="no")  # type: ignore[arg-type]


class _ScanningHyperband(Hyperband):
    """Hyperband handing out ready rungs by walking every open bracket, as emit_ready once did."""

    def emit_ready(self):  # type: ignore[no-untyped-def]
        groups = []
        for b in self.open_brackets():
            if b.ready and not b.done:
                g = self.emit(b)
                if g is not None:
                    groups.append(g)
        return groups


@pytest.mark.parametrize("slots", [1, 7, 40, 200])
def test_emit_ready_tracks_the_brackets_a_full_scan_finds(slots: int) -> None:
    """emit_ready looks only at brackets opened or advanced since its last call; the groups,
    in order, are those of a walk over every open bracket (failures included, which end
    rungs early)."""
    runs = []
    for cls in (Hyperband, _ScanningHyperband):
        algo = cls(SPACE, metric="loss", max_budget=27, num_trials=300, seed=3)
        res = Driver(algo, slots=slots, fail=fail_every(11)).run()
        runs.append([[(s.trial_id, s.budget) for s in g] for g in res.groups])
    assert runs[0] == runs[1]
    assert len(runs[0]) > 20


class _CheckedOpenHyperband(Hyperband):
    """Hyperband checking at every call that open_brackets is what a walk over every bracket finds."""

    calls = 0

    def open_brackets(self):  # type: ignore[no-untyped-def]
        got = super().open_brackets()
        assert got == [b for b in self.brackets if not b.done]
        self.calls += 1
        return got


@pytest.mark.parametrize("slots", [1, 7, 40, 200])
def test_open_brackets_are_the_brackets_not_done(slots: int) -> None:
    """open_brackets prunes only when a bracket may have finished (started empty, or settled
    by a rung result or a loss: failures included); it still lists every bracket not done."""
    algo = _CheckedOpenHyperband(SPACE, metric="loss", max_budget=27, num_trials=300, seed=3)
    Driver(algo, slots=slots, fail=fail_every(11)).run()
    assert algo.finished and algo.calls > 20
