"""ASHA with ``stop_rule="rank"`` decides as Optuna's ``SuccessiveHalvingPruner`` on any reports.

Li et al.'s promotion rule (the top ``floor(n/eta)`` of a rung, the trial's own
result counted; the best so far while ``n < eta``) is what Optuna applies when a
trial reports, and what a user porting an Optuna study expects to be pruned.
The same random interleavings of (tied, too) reports as the Ray test are fed to
:class:`~nbtune.algorithms.ASHA` and to Optuna's rule written out from its
source (``optuna/pruners/_successive_halving.py``, ``prune`` and
``_is_trial_promotable_to_next_rung``); where Optuna is installed (the bench
extra), to a real study with that pruner too.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.algorithms import ASHA
from nbtune.algorithms.algorithm_protocol import AlgorithmError
from nbtune.core.trial import Decision
from tests.algorithms.test_asha_vs_ray import SPACE, replay, report_sequences


class OptunaRule:
    """Optuna 5's SuccessiveHalvingPruner (``min_resource=1``, ``min_early_stopping_rate=0``,
    no bootstrap) for one study; ``reward``: higher is better (the replay negates losses)."""

    def __init__(self, max_t: int, rf: int) -> None:
        self.max_t, self.rf = max_t, rf
        self.attrs: dict[int, dict[int, float]] = {}  # trial -> rung -> value (system attrs)

    def on_result(self, trial: int, it: int, reward: float) -> bool:
        """True: prune."""
        mine = self.attrs.setdefault(trial, {})
        rung = len(mine)  # _get_current_rung: the rungs it completed
        while True:
            if it < self.rf ** rung:
                return False
            competing = [a[rung] for t, a in self.attrs.items() if t != trial and rung in a]
            competing.append(reward)
            mine[rung] = reward
            idx = len(competing) // self.rf - 1
            idx = max(idx, 0)  # the first eta - 1: promoted only when the best
            if not reward >= sorted(competing)[-(idx + 1)]:
                return True
            rung += 1


class OptunaStudy:
    """A real Optuna study with the pruner: each replayed trial reports into its own trial."""

    def __init__(self, max_t: int, rf: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(direction="maximize", pruner=(
            optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=rf)))
        self.trials: dict[int, object] = {}

    def on_result(self, tid: int, it: int, reward: float) -> bool:
        trial = self.trials.get(tid)
        if trial is None:
            trial = self.trials[tid] = self.study.ask()
        trial.report(reward, it)  # type: ignore[attr-defined]
        return bool(trial.should_prune())  # type: ignore[attr-defined]


@settings(max_examples=300, deadline=None)
@given(report_sequences(), st.sampled_from(["min", "max"]))
def test_every_stop_decision_is_optunas(seq, mode) -> None:
    eta, max_t, curves, picks = seq
    for tid, step, ours, theirs in replay(eta, max_t, curves, picks, OptunaRule(max_t, eta),
                                          mode, stop_rule="rank"):
        assert ours == theirs, (tid, step, ours, theirs)


@settings(max_examples=40, deadline=None)
@given(report_sequences(), st.sampled_from(["min", "max"]))
def test_every_stop_decision_is_optuna_studys_own(seq, mode) -> None:
    pytest.importorskip("optuna")
    eta, max_t, curves, picks = seq
    for tid, step, ours, theirs in replay(eta, max_t, curves, picks, OptunaStudy(max_t, eta),
                                          mode, stop_rule="rank"):
        assert ours == theirs, (tid, step, ours, theirs)


def test_rank_stops_what_ray_keeps_at_a_small_rung() -> None:
    """Losses 1, 2, 3 recorded at rung 1 (eta = 3): a fourth at 1.2 is second of four.
    Ray's cutoff among the three before it is 1 + 2/3, so it goes on; the top floor(4/3) = 1
    of the rung is the trial at 1, so the rank rule stops it."""
    for rule, fourth in (("ray", Decision.CONTINUE), ("rank", Decision.STOP)):
        algo = ASHA(SPACE, metric="loss", max_budget=9, num_trials=4, eta=3, seed=0,
                    stop_rule=rule)
        algo.ask(4)
        first = [algo.on_report(t, 1.0, {"loss": v}) for t, v in enumerate([1.0, 2.0, 3.0])]
        assert first == [Decision.CONTINUE, Decision.STOP, Decision.STOP]
        assert algo.on_report(3, 1.0, {"loss": 1.2}) == fourth, rule


def test_a_nan_result_never_goes_on_under_the_rank_rule() -> None:
    algo = ASHA(SPACE, metric="loss", max_budget=9, num_trials=2, eta=3, seed=0,
                stop_rule="rank")
    algo.ask(2)
    assert algo.on_report(0, 1.0, {"loss": float("nan")}) == Decision.STOP
    assert algo.on_report(1, 1.0, {"loss": 5.0}) == Decision.CONTINUE


def test_an_unknown_stop_rule_is_refused_early_with_the_choices() -> None:
    import nbtune

    with pytest.raises(AlgorithmError, match="stop_rule must be 'ray'.*or 'rank'"):
        ASHA(SPACE, metric="loss", max_budget=9, stop_rule="optuna")
    with pytest.raises(AlgorithmError, match="stop_rule"):
        nbtune.tune(lambda config, trial: None, SPACE, metric="loss", max_budget=9,
                    stop_rule="percentile")
