"""Every registered algorithm honours the engine contract (see driver.py).

Parametrized from ``ALGORITHMS`` so a newly registered algorithm is covered
without touching this file.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from nbtune.algorithms import ALGORITHMS, AlgorithmError, algorithm_options, make_algorithm

from .driver import MIXED_SPACE, Driver, fail_every

NAMES = sorted(ALGORITHMS)


def build(name: str, **kw: Any):
    if name == "optuna-cmaes" and importlib.util.find_spec("cmaes") is None:
        pytest.skip("optuna-cmaes needs the cmaes package")
    opts = {k: v for k, v in kw.items() if k in ("eta",)}
    base = {k: v for k, v in kw.items() if k not in opts}
    valid = algorithm_options(ALGORITHMS[name])
    opts = {k: v for k, v in opts.items() if k in valid}
    base.setdefault("metric", "loss")
    base.setdefault("mode", "min")
    return make_algorithm(name, base.pop("space", MIXED_SPACE), **base, **opts)


@pytest.mark.parametrize("failures", [False, True], ids=["ok", "failures"])
@pytest.mark.parametrize("slots", [1, 4, 64])
@pytest.mark.parametrize("name", NAMES)
def test_contract(name: str, slots: int, failures: bool) -> None:
    algo = build(name, max_budget=9, num_trials=24, seed=1)
    res = Driver(algo, slots=slots, fail=fail_every(5) if failures else None).run()
    assert algo.finished
    assert len(res.trials) <= 24
    assert all(s.state.is_terminal for s in res.trials.values())
    if failures:
        assert any(s.state.value == "error" for s in res.trials.values())


SCENARIOS = [
    pytest.param(dict(max_budget=10, num_trials=20), id="R10"),
    pytest.param(dict(max_budget=4.5, min_budget=0.5, num_trials=12), id="fractional"),
    pytest.param(dict(max_budget=16, num_trials=17, eta=2), id="eta2"),
    pytest.param(dict(max_budget=27, num_trials=30, mode="max"), id="max-mode"),
    pytest.param(dict(max_budget=1, num_trials=5), id="single-rung"),
]


@pytest.mark.parametrize("kw", SCENARIOS)
@pytest.mark.parametrize("name", NAMES)
def test_contract_scenarios(name: str, kw: dict[str, Any]) -> None:
    kw = dict(kw)
    mode = kw.get("mode", "min")

    def metric(space: Any, cfg: Any, budget: float) -> float:
        from .driver import quadratic_metric

        v = quadratic_metric(space, cfg, budget)
        return -v if mode == "max" else v

    algo = build(name, seed=3, **kw)
    Driver(algo, slots=4, metric_fn=metric, fail=fail_every(7)).run()
    assert algo.finished


@pytest.mark.parametrize("name", NAMES)
def test_natural_size_or_clear_error(name: str) -> None:
    """num_trials=None either has a natural size (grid, sha, hyperband) or asks for it."""
    try:
        algo = build(name, max_budget=9, num_trials=None, seed=0)
    except AlgorithmError as exc:
        assert "num_trials" in str(exc)
        return
    res = Driver(algo, slots=8).run()
    assert res.trials


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_under_seed(name: str) -> None:
    def run(seed: int) -> list[Any]:
        algo = build(name, max_budget=9, num_trials=20, seed=seed)
        return Driver(algo, slots=4, fail=fail_every(6)).run().specs

    first = run(7)
    assert first == run(7)
    assert first != run(8)


@pytest.mark.parametrize("name", NAMES)
def test_missing_metric_does_not_stall(name: str) -> None:
    """Trials that never report the metric rank last; nobody crashes or waits for them."""
    algo = build(name, max_budget=9, num_trials=10, seed=0, metric="accuracy")
    Driver(algo, slots=3, report_as="loss").run()
    assert algo.finished


#: two configurations a user asks to try first: one whole, one leaving three out
POINTS = [
    {"lr": 0.01, "batch_size": 32, "depth": 3, "momentum": 0.9, "dropout": 0.1, "width": 1.0,
     "epochs_const": 7},
    {"lr": 0.002, "batch_size": 64, "momentum": 0.8},
]


@pytest.mark.parametrize("name", NAMES)
def test_points_to_evaluate_come_first_in_order(name: str) -> None:
    """Ray Tune's ``points_to_evaluate`` / Optuna's ``enqueue_trial``: the given
    configurations are the first trials, in order, what a point leaves out drawn from
    the space; a grid search refuses them (it tries its grid)."""
    if name == "grid":
        with pytest.raises(AlgorithmError, match="grid search tries its grid"):
            build(name, max_budget=9, num_trials=20, seed=0, points_to_evaluate=POINTS)
        return
    algo = build(name, max_budget=9, num_trials=20, seed=0, points_to_evaluate=POINTS)
    run = Driver(algo, slots=4).run()
    first: dict[int, dict[str, Any]] = {}  # (trial id, config items, budget, restore_from)
    for tid, items, _, _ in run.specs:
        first.setdefault(tid, dict(items))  # a trial's first spec: later ones continue it
    configs = [first[0], first[1]]
    assert configs[0] == POINTS[0]
    assert {k: configs[1][k] for k in POINTS[1]} == POINTS[1]
    for k, dom in MIXED_SPACE.items():  # the rest drawn from the space
        assert dom.contains(configs[1][k]) if hasattr(dom, "contains") else configs[1][k] == dom
    assert set(configs[1]) == set(MIXED_SPACE)


@pytest.mark.parametrize("point, match", [
    ({"nope": 1}, "does not have"),
    ({"lr": 5.0}, "outside the search space"),
    ({"batch_size": 48}, "outside the search space"),
    ({"epochs_const": 8}, "outside the search space"),
])
def test_points_to_evaluate_outside_the_space_are_refused(point, match) -> None:
    with pytest.raises(AlgorithmError, match=match):
        build("asha", max_budget=9, num_trials=20, seed=0, points_to_evaluate=[point])
    with pytest.raises(AlgorithmError, match="list of configurations"):
        build("asha", max_budget=9, num_trials=20, seed=0, points_to_evaluate=point)
