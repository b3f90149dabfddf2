"""The registry and make_algorithm: names, options and clear errors."""

from __future__ import annotations

import pytest

from nbtune.algorithms import (
    ALGORITHMS,
    ASHA,
    AlgorithmError,
    BaseAlgorithm,
    algorithm_options,
    make_algorithm,
)
from nbtune.core.space import uniform

SPACE = {"x": uniform(0, 1)}
COMMON = dict(metric="loss", mode="min", max_budget=9, num_trials=9, seed=0)


def test_registry_names() -> None:
    expected = {"grid", "random", "sha", "hyperband", "asha", "bohb", "sync-bohb", "pbt",
                "optuna", "optuna-tpe", "optuna-cmaes"}
    assert expected <= set(ALGORITHMS)
    for name, cls in ALGORITHMS.items():
        assert issubclass(cls, BaseAlgorithm) and cls.name == name


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(AlgorithmError) as exc:
        make_algorithm("hyperbandd", SPACE, **COMMON)
    for name in ALGORITHMS:
        assert name in str(exc.value)


def test_unknown_option_lists_valid_options() -> None:
    with pytest.raises(AlgorithmError) as exc:
        make_algorithm("asha", SPACE, **COMMON, etta=3)
    assert "etta" in str(exc.value) and "eta" in str(exc.value)
    with pytest.raises(AlgorithmError, match="eta"):
        make_algorithm("random", SPACE, **COMMON, eta=3)


def test_options_reach_the_algorithm() -> None:
    algo = make_algorithm("ASHA", SPACE, **COMMON, eta=2, min_budget=1)
    assert isinstance(algo, ASHA) and algo.eta == 2
    assert "perturbation_interval" in algorithm_options(ALGORITHMS["pbt"])
    assert "random_fraction" in algorithm_options(ALGORITHMS["bohb"])


def test_instances_and_classes() -> None:
    algo = ASHA(SPACE, metric="loss", max_budget=9, num_trials=3)
    assert make_algorithm(algo, SPACE, metric="loss", max_budget=9) is algo
    with pytest.raises(AlgorithmError, match="instance"):
        make_algorithm(algo, SPACE, metric="loss", max_budget=9, eta=2)
    with pytest.raises(AlgorithmError, match="metric"):
        make_algorithm(algo, SPACE, metric="acc", max_budget=9)
    # what tune() passes for every algorithm, instance or not
    assert make_algorithm(algo, SPACE, **COMMON, min_budget=1.0) is algo
    assert isinstance(make_algorithm(ASHA, SPACE, **COMMON), ASHA)
    with pytest.raises(AlgorithmError):
        make_algorithm(42, SPACE, **COMMON)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["random", "pbt", "optuna"])
def test_num_trials_required(name: str) -> None:
    with pytest.raises(AlgorithmError, match="num_trials"):
        make_algorithm(name, SPACE, metric="loss", max_budget=9)


@pytest.mark.parametrize("eta", [1, 1.5, 0, "3", True])
@pytest.mark.parametrize("name", ["sha", "hyperband", "asha", "bohb", "sync-bohb"])
def test_bad_eta(name: str, eta: object) -> None:
    with pytest.raises(AlgorithmError, match="eta"):
        make_algorithm(name, SPACE, **COMMON, eta=eta)


def test_base_validation() -> None:
    with pytest.raises(AlgorithmError):
        make_algorithm("random", SPACE, **{**COMMON, "mode": "best"})
    with pytest.raises(AlgorithmError):
        make_algorithm("random", SPACE, **{**COMMON, "max_budget": 0})
