"""BOHB: random until the model has enough points, then samples concentrate on good regions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.algorithms import BOHB, AlgorithmError, SyncBOHB
from nbtune.algorithms.bohb import KDEModel
from nbtune.core.space import choice, uniform

from .driver import Driver

OPT = np.array([0.2, 0.7])


def quad(x: np.ndarray) -> float:
    return float(((x - OPT) ** 2).sum())


def fill(model: KDEModel, n: int, budget: float, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for i in range(n):
        x = rng.random(model.dim)
        model.add(budget, i, list(x), quad(x))


def test_random_until_enough_points() -> None:
    model = KDEModel(2, random_fraction=0.0)
    assert model.min_points == 3  # d + 1
    rng = np.random.default_rng(0)
    fill(model, 2 * model.min_points - 1, budget=9)  # the bad set would have d points
    assert model.model_budget() is None
    assert all(model.propose(rng) is None for _ in range(20))
    fill(model, 2 * model.min_points, budget=9)  # d+1 good, d+1 bad
    assert model.model_budget() == 9
    assert all(model.propose(rng) is not None for _ in range(20))


def test_model_uses_largest_budget_with_enough_points() -> None:
    model = KDEModel(2, random_fraction=0.0)
    fill(model, 20, budget=1)
    fill(model, 5, budget=9)
    assert model.model_budget() == 1
    fill(model, 6, budget=9)
    assert model.model_budget() == 9


def test_samples_concentrate_near_the_optimum() -> None:
    model = KDEModel(2, random_fraction=0.0)
    fill(model, 60, budget=3)
    rng = np.random.default_rng(1)
    proposed = np.array([model.propose(rng) for _ in range(100)])
    random = rng.random((100, 2))
    d_model = np.linalg.norm(proposed - OPT, axis=1).mean()
    d_random = np.linalg.norm(random - OPT, axis=1).mean()
    assert d_model < 0.5 * d_random
    assert ((proposed >= 0) & (proposed <= 1)).all()


def test_random_fraction_respected() -> None:
    model = KDEModel(2, random_fraction=1 / 3)
    fill(model, 30, budget=1)
    rng = np.random.default_rng(0)
    n_random = sum(model.propose(rng) is None for _ in range(600))
    assert 150 < n_random < 250


def test_degenerate_observations_do_not_crash() -> None:
    """Identical configs (e.g. one categorical value) make a singular covariance."""
    model = KDEModel(3, random_fraction=0.0)
    for i in range(12):
        model.add(1, i, [0.5, 0.25, 0.1 * (i % 2)], float(i))
    rng = np.random.default_rng(0)
    for _ in range(5):
        u = model.propose(rng)
        assert u is None or (np.isfinite(u).all() and u.shape == (3,))


def test_bad_options() -> None:
    with pytest.raises(AlgorithmError):
        KDEModel(3, min_points_in_model=2)
    with pytest.raises(AlgorithmError):
        KDEModel(3, random_fraction=1.5)
    with pytest.raises(AlgorithmError):
        KDEModel(3, num_samples=0)


@pytest.mark.parametrize("cls", [BOHB, SyncBOHB])
def test_algorithm_switches_from_random_to_model(cls) -> None:
    space = {"x": uniform(0, 1), "y": uniform(0, 1), "c": choice(["a", "b"]), "k": 3}

    def metric(sp, cfg, budget):
        return quad(np.array([cfg["x"], cfg["y"]])) + (cfg["c"] == "b") + 1 / budget

    algo = cls(space, metric="loss", max_budget=9, num_trials=60, seed=0, random_fraction=0.0)
    Driver(algo, slots=4, metric_fn=metric).run()
    src = algo.sample_sources
    assert len(src) == 60
    n_min = algo.model.min_points
    assert src[: n_min + 2] == ["random"] * (n_min + 2)  # no rung has enough points yet
    assert "model" in src
    late = [algo.configs[t] for t in range(40, 60) if src[t] == "model"]
    assert late
    assert np.mean([c["c"] == "a" for c in late]) > 0.7


@pytest.mark.parametrize("pipeline", [True, False])
def test_sync_bohb_sequential_brackets_sample_from_the_model(pipeline: bool) -> None:
    """One bracket at a time (Fluid's SyncBOHB): later brackets see the earlier results.

    With 64 free slots the pipelined default draws the whole cycle at once, all at
    random; run one bracket after another, every later bracket is drawn from the
    model fitted on the brackets before it.
    """
    space = {"x": uniform(0, 1), "y": uniform(0, 1)}
    algo = SyncBOHB(space, metric="loss", max_budget=27, seed=0, random_fraction=0.0,
                    pipeline_brackets=pipeline)
    Driver(algo, slots=64, metric_fn=lambda sp, cfg, b: quad(np.array([cfg["x"], cfg["y"]])))\
        .run()
    src = algo.sample_sources
    assert len(src) == 27 + 12 + 6 + 4
    if pipeline:
        assert src == ["random"] * len(src)
    else:
        assert src[:27] == ["random"] * 27 and src[27:] == ["model"] * (len(src) - 27)


@given(dim=st.integers(1, 6), n_extra=st.integers(2, 300),
       q=st.floats(0.01, 0.5), extra_min=st.integers(0, 5))
def test_good_and_bad_sets_are_disjoint_and_cover_the_rest(dim, n_extra, q, extra_min) -> None:
    """BOHB's l(x) and g(x) are fitted on disjoint points: the good ones first, then the rest."""
    model = KDEModel(dim, top_fraction=q, min_points_in_model=dim + 1 + extra_min)
    n = model.min_points + n_extra  # what model_budget() asks before a model is fitted
    good, bad = model.split(n)
    good_ids, bad_ids = set(range(n)[good]), set(range(n)[bad])
    assert not good_ids & bad_ids
    assert good_ids | bad_ids == set(range(n))
    assert max(good_ids) < min(bad_ids)  # every good point ranks before every bad one
    assert len(good_ids) == max(model.min_points, int(q * n))


def test_proposals_use_disjoint_sets() -> None:
    """A fitted model still proposes near the optimum with the disjoint split."""
    model = KDEModel(2, random_fraction=0.0)
    fill(model, 60, 1.0)
    rng = np.random.default_rng(1)
    props = [model.propose(rng) for _ in range(20)]
    assert all(p is not None for p in props)
    assert np.mean([quad(p) for p in props]) < np.mean([quad(np.random.default_rng(i).random(2))
                                                        for i in range(200)])
