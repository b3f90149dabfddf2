"""Grid and random search: one group holding every trial, each to max_budget."""

from __future__ import annotations

import pytest

from nbtune.algorithms import AlgorithmError, GridSearch, RandomSearch
from nbtune.core.space import choice, grid, uniform

from .driver import Driver

SPACE = {"a": grid([1, 2, 3]), "b": grid(["x", "y"]), "c": uniform(0, 1), "d": choice([5, 6])}


def test_grid_is_one_group_over_the_product() -> None:
    algo = GridSearch(SPACE, metric="loss", max_budget=5, seed=0)
    (g,) = algo.ask(1)  # everything at once, whatever the free slots
    assert len(g) == 6 and algo.finished and algo.ask(10) == []
    assert {(s.config["a"], s.config["b"]) for s in g.specs} == {
        (a, b) for a in (1, 2, 3) for b in ("x", "y")
    }
    assert all(s.budget == 5 and 0 <= s.config["c"] <= 1 for s in g.specs)


def test_grid_num_trials_limits_and_repeats() -> None:
    (g,) = GridSearch(SPACE, metric="loss", max_budget=5, num_trials=4, seed=0).ask(1)
    assert [(s.config["a"], s.config["b"]) for s in g.specs] == [
        (1, "x"), (1, "y"), (2, "x"), (2, "y")
    ]
    (g,) = GridSearch(SPACE, metric="loss", max_budget=5, num_trials=14, seed=0).ask(1)
    pts = [(s.config["a"], s.config["b"]) for s in g.specs]
    assert pts[:6] == pts[6:12] and pts[12:] == pts[:2]
    # repeats resample the non-grid domains
    assert [s.config["c"] for s in g.specs[:6]] != [s.config["c"] for s in g.specs[6:12]]


def test_grid_needs_a_grid_domain() -> None:
    with pytest.raises(AlgorithmError, match="grid"):
        GridSearch({"c": uniform(0, 1)}, metric="loss", max_budget=5)


def test_random_one_group() -> None:
    algo = RandomSearch(SPACE, metric="loss", max_budget=3, num_trials=7, seed=0)
    res = Driver(algo, slots=2).run()
    assert len(res.groups) == 1 and len(res.groups[0]) == 7
    assert all(t.used == 3 for t in res.trials.values())
