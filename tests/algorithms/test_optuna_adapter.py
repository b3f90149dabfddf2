"""The Optuna adapter: distributions from nbtune domains, results told back to the study."""

from __future__ import annotations

import importlib.util

import optuna
import pytest

from nbtune.algorithms import AlgorithmError, OptunaCmaEs, OptunaSearch, make_algorithm
from nbtune.core.space import choice, grid, loguniform, qloguniform, quniform, randint, uniform

from .driver import Driver, fail_every

SPACE = {
    "u": uniform(-1.0, 1.0),
    "lu": loguniform(1e-5, 1e-1),
    "ri": randint(2, 9),
    "qu": quniform(0.0, 1.0, 0.25),
    "qu_odd": quniform(0.0, 1.0, 0.3),  # step does not divide the range
    "qlu": qloguniform(1, 1000, 5),
    "c": choice(["a", "b", "c"]),
    "tup": choice([(1, 2), (3, 4)]),  # not storable by Optuna: passed as indices
    "g": grid([1, 2]),
    "k": "const",
}


def test_configs_respect_the_space() -> None:
    algo = OptunaSearch(SPACE, metric="loss", max_budget=3, num_trials=25, seed=0)
    res = Driver(algo, slots=4).run()  # the driver checks Domain.contains for every spec
    for t in res.trials.values():
        cfg = t.config
        assert isinstance(cfg["ri"], int) and 2 <= cfg["ri"] <= 8
        assert cfg["tup"] in [(1, 2), (3, 4)]
        assert cfg["k"] == "const"
        assert round(cfg["qu"] / 0.25, 9) == int(round(cfg["qu"] / 0.25))
        assert abs(cfg["qu_odd"] / 0.3 - round(cfg["qu_odd"] / 0.3)) < 1e-6
    assert len({t.config["u"] for t in res.trials.values()}) == 25


def test_results_are_told() -> None:
    algo = OptunaSearch(SPACE, metric="acc", mode="max", max_budget=3, num_trials=12, seed=0)
    res = Driver(algo, slots=3, fail=fail_every(4)).run()
    errors = sum(t.state.value == "error" for t in res.trials.values())
    states = [t.state for t in algo.study.trials]
    TS = optuna.trial.TrialState
    assert len(states) == 12 and errors > 0
    assert states.count(TS.FAIL) == errors and states.count(TS.COMPLETE) == 12 - errors
    assert algo.study.direction == optuna.study.StudyDirection.MAXIMIZE
    # the told value is the last reported one (driver: loss + 1/budget at budget 3)
    best = algo.study.best_trial
    assert best.value == pytest.approx(max(t.value for t in algo.study.trials if t.value))


def test_pruner_stops_trials() -> None:
    algo = OptunaSearch(
        {"x": uniform(0, 1)}, metric="loss", max_budget=9, num_trials=20, seed=0,
        pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1),
    )
    res = Driver(algo, slots=1).run()
    stopped = [t for t in res.trials.values() if t.state.value == "stopped"]
    assert stopped and all(t.used < 9 for t in stopped)
    assert any(t.state == optuna.trial.TrialState.PRUNED for t in algo.study.trials)


def test_sampler_instance_and_names() -> None:
    sampler = optuna.samplers.RandomSampler(seed=1)
    algo = make_algorithm(
        "optuna", {"x": uniform(0, 1)}, metric="loss", max_budget=1, num_trials=2,
        sampler=sampler,
    )
    assert algo.sampler is sampler
    with pytest.raises(AlgorithmError, match="sampler"):
        OptunaSearch({"x": uniform(0, 1)}, metric="loss", max_budget=1, num_trials=2,
                     sampler="nope")


@pytest.mark.skipif(importlib.util.find_spec("cmaes") is None, reason="needs cmaes")
def test_cmaes_alias() -> None:
    algo = OptunaCmaEs(SPACE, metric="loss", max_budget=2, num_trials=8, seed=0)
    assert type(algo.sampler).__name__ == "CmaEsSampler"
    Driver(algo, slots=2).run()
