"""ASHA's ``stop_rule="ray"`` decides as Ray Tune's ``ASHAScheduler`` on any sequence of reports.

A rule that counts the trial's own result in the rung's percentile keeps one
rank more at every rung, and so trains more epochs than the peers for the
same search. Here a random
interleaving of reports from trials with random (tied, too) results is fed to
:class:`~nbtune.algorithms.ASHA` and to Ray's rule written out from its source
(``ray/tune/schedulers/async_hyperband.py``, ``_Bracket.on_result``), and every
decision must agree; where Ray itself is installed, to Ray's own ``_Bracket`` too.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.algorithms import ASHA
from nbtune.core.space import uniform
from nbtune.core.trial import Decision

SPACE = {"x": uniform(0, 1)}


def exact_cutoff(recorded: list[float], rf: float) -> Fraction:
    """Ray's ``nanpercentile(recorded, (1 - 1/rf) * 100)`` (numpy's linear interpolation) in
    exact arithmetic. Ray computes it in floats: where the cutoff is exactly a result (a tie),
    its answer turns on the last bit (-1.4999999999999987 for -1.5 once, so Ray stopped a trial
    that tied), and nbtune keeps a tie on purpose."""
    vals = sorted(Fraction(v) for v in recorded)
    pos = (1 - 1 / Fraction(rf)) * (len(vals) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


class RayRule:
    """Ray 2.x ``_Bracket`` (one bracket, ``stop_last_trials=True``), reward = higher is better,
    its cutoff computed exactly (:func:`exact_cutoff`); ``ties`` collects (trial, step) of each
    decision on an exact tie, where Ray's own float rule may go either way."""

    def __init__(self, grace: int, max_t: int, rf: float) -> None:
        n = int(np.log(max_t / grace) / np.log(rf) + 1)
        self.max_t, self.rf = max_t, rf
        self.rungs = [(grace * rf ** k, {}) for k in reversed(range(n))]
        self.ties: set[tuple[int, int]] = set()

    def on_result(self, trial: int, it: int, reward: float) -> bool:
        """True: stop (as ``AsyncHyperBandScheduler.on_trial_result``)."""
        if it >= self.max_t:
            return True
        for milestone, recorded in self.rungs:
            if it < milestone or trial in recorded:
                continue
            cutoff = exact_cutoff(list(recorded.values()), self.rf) if recorded else None
            recorded[trial] = reward
            if cutoff is not None and Fraction(reward) == cutoff:
                self.ties.add((trial, it))
            return cutoff is not None and Fraction(reward) < cutoff
        return False


# results on a grid of eighths: ties happen, and no interpolated cutoff lies within
# rounding of a result without being equal to it
RESULT = st.integers(0, 40).map(lambda i: i / 8)


@st.composite
def report_sequences(draw: st.DrawFn) -> tuple[int, int, list[list[float]], list[int]]:
    eta = draw(st.sampled_from([2, 3, 4]))
    max_t = eta ** draw(st.integers(1, 3))
    n = draw(st.integers(1, 14))
    curves = [draw(st.lists(RESULT, min_size=max_t, max_size=max_t)) for _ in range(n)]
    picks = draw(st.lists(st.integers(0, n - 1), min_size=n * max_t, max_size=n * max_t))
    return eta, max_t, curves, picks


def replay(eta: int, max_t: int, curves: list[list[float]], picks: list[int],
           judge: object, mode: str, **algo_kw: object) -> list[tuple[int, int, bool, bool]]:
    """Feed reports in the order ``picks`` gives (a stopped trial reports no more)."""
    algo = ASHA(SPACE, metric="m", mode=mode, max_budget=max_t, num_trials=len(curves), eta=eta,
                seed=0, **algo_kw)
    assert [s.trial_id for g in algo.ask(len(curves)) for s in g.specs] == list(
        range(len(curves)))
    step = [0] * len(curves)
    live = set(range(len(curves)))
    out = []
    for p in picks:
        if not live:
            break
        tid = sorted(live)[p % len(live)]
        step[tid] += 1
        value = curves[tid][step[tid] - 1]
        ours = algo.on_report(tid, float(step[tid]), {"m": value}) == Decision.STOP
        reward = value if mode == "max" else -value
        theirs = judge.on_result(tid, step[tid], reward)  # type: ignore[attr-defined]
        done = step[tid] >= max_t
        out.append((tid, step[tid], ours, theirs and not done))
        if ours or done:
            live.discard(tid)
    return out


@settings(max_examples=300, deadline=None)
@given(report_sequences(), st.sampled_from(["min", "max"]))
def test_every_stop_decision_is_rays(seq, mode) -> None:
    eta, max_t, curves, picks = seq
    for tid, step, ours, theirs in replay(eta, max_t, curves, picks, RayRule(1, max_t, eta),
                                          mode, stop_rule="ray"):
        assert ours == theirs, (tid, step, ours, theirs)


def test_a_trial_is_judged_against_the_rung_before_its_own_result() -> None:
    """Three trials at rung 1 scored 1, 2, 3 (loss): a fourth at 1.8 is above Ray's cutoff
    (1 + 2/3) and stops; counting its own result made 1.8 the cutoff, and it went on."""
    algo = ASHA(SPACE, metric="loss", max_budget=9, num_trials=4, eta=3, seed=0, stop_rule="ray")
    algo.ask(4)
    assert [algo.on_report(t, 1.0, {"loss": v}) for t, v in enumerate([1.0, 2.0, 3.0])] == [
        Decision.CONTINUE, Decision.STOP, Decision.STOP]
    assert algo.on_report(3, 1.0, {"loss": 1.8}) == Decision.STOP


def test_stop_budgets_are_the_rungs_below_max_budget_in_stopping_mode_only() -> None:
    assert ASHA(SPACE, metric="loss", max_budget=27, eta=3).stop_budgets == (1.0, 3.0, 9.0)
    assert ASHA(SPACE, metric="loss", max_budget=27, eta=3, type="promotion").stop_budgets == ()


@settings(max_examples=60, deadline=None)
@given(report_sequences(), st.sampled_from(["min", "max"]))
def test_every_stop_decision_is_ray_tunes_own(seq, mode) -> None:
    """The same against Ray's ``_Bracket`` itself, where Ray is installed (the bench extra)."""
    hb = pytest.importorskip("ray.tune.schedulers.async_hyperband")

    class Bracket:
        def __init__(self, max_t: int, rf: int) -> None:
            self.b, self.max_t = hb._Bracket(1, max_t, rf, 0), max_t
            self.trials: dict[int, object] = {}

        def on_result(self, tid: int, it: int, reward: float) -> bool:
            if it >= self.max_t:
                return True
            trial = self.trials.setdefault(tid, type("T", (), {"trial_id": tid})())
            return self.b.on_result(trial, it, reward) == "STOP"

    eta, max_t, curves, picks = seq
    exact = RayRule(1, max_t, eta)  # replayed alongside: which decisions were exact ties
    replay(eta, max_t, curves, picks, exact, mode, stop_rule="ray")
    for tid, step, ours, theirs in replay(eta, max_t, curves, picks, Bracket(max_t, eta), mode,
                                          stop_rule="ray"):
        assert ours == theirs or (tid, step) in exact.ties, (tid, step, ours, theirs)


def test_a_tie_with_the_cutoff_goes_on() -> None:
    """Found by Hypothesis: losses 0, 2.25, 0, 2.25, 2.25, 2.25 recorded at a rung
    (η = 3) put the cutoff at exactly 1.5; a trial at 1.5 ties and goes on, as Ray's rule
    (stop when below the cutoff) says in exact arithmetic. Ray's floats made the cutoff
    -1.4999999999999987 on negated losses and stopped it."""
    from nbtune.algorithms.asha import asha_keeps

    others = [0.0, 2.25, 0.0, 2.25, 2.25, 2.25]
    assert exact_cutoff([-v for v in others], 3) == Fraction(-3, 2)
    assert asha_keeps(others, 1.5, 3) and not asha_keeps(others, 1.5 + 1 / 8, 3)
