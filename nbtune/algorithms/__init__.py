"""Tuning algorithms: pure objects that produce TrialGroups and judge results.

:data:`ALGORITHMS` maps registry names to classes; :func:`make_algorithm`
builds one from a name (validating its options) or passes an instance through.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from nbtune.algorithms.algorithm_protocol import AlgorithmError, BaseAlgorithm
from nbtune.algorithms.asha import ASHA
from nbtune.algorithms.bohb import BOHB, SyncBOHB
from nbtune.algorithms.grid import GridSearch
from nbtune.algorithms.hyperband import Hyperband, hyperband_brackets
from nbtune.algorithms.optuna_adapter import OptunaCmaEs, OptunaSearch, OptunaTPE
from nbtune.algorithms.pbt import PBT
from nbtune.algorithms.random_search import RandomSearch
from nbtune.algorithms.successive_halving import SuccessiveHalving

__all__ = [
    "ALGORITHMS",
    "effective_algorithm_options",
    "ASHA",
    "AlgorithmError",
    "BOHB",
    "BaseAlgorithm",
    "GridSearch",
    "Hyperband",
    "OptunaCmaEs",
    "OptunaSearch",
    "OptunaTPE",
    "PBT",
    "RandomSearch",
    "SuccessiveHalving",
    "SyncBOHB",
    "algorithm_options",
    "hyperband_brackets",
    "make_algorithm",
]

#: registry name -> class; every class here is covered by the contract tests
ALGORITHMS: dict[str, type[BaseAlgorithm]] = {
    cls.name: cls
    for cls in (
        GridSearch,
        RandomSearch,
        SuccessiveHalving,
        Hyperband,
        ASHA,
        BOHB,
        SyncBOHB,
        PBT,
        OptunaSearch,
        OptunaTPE,
        OptunaCmaEs,
    )
}

_COMMON = ("space", "metric", "mode", "max_budget", "num_trials", "seed")


def algorithm_options(cls: type[BaseAlgorithm]) -> list[str]:
    """Keyword options a class accepts beyond the common ones (walks ``**kwargs`` up the MRO)."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        more = False
        for p in list(inspect.signature(init).parameters.values())[1:]:
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                more = True
            elif p.kind is not inspect.Parameter.VAR_POSITIONAL and p.name not in names:
                names.append(p.name)
        if not more:
            break
    return sorted(n for n in names if n not in _COMMON)


def effective_algorithm_options(algorithm: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` plus what ``algorithm`` took by default where a later default may differ
    (ASHA's ``stop_rule``), so that a run rebuilt from them decides as this one did."""
    out = dict(options)
    rule = getattr(getattr(algorithm, "inner", algorithm), "stop_rule", None)
    if rule is not None:
        out.setdefault("stop_rule", rule)
    return out


def make_algorithm(
    name_or_instance: str | BaseAlgorithm | type[BaseAlgorithm],
    space: Mapping[str, Any] | None = None,
    *,
    metric: str | None = None,
    mode: str = "min",
    max_budget: float | None = None,
    num_trials: int | None = None,
    seed: int | None = None,
    **options: Any,
) -> BaseAlgorithm:
    """Build the algorithm the user named, or check and return the one they built.

    For an instance, its own mode, budgets, num_trials and seed win; only a
    different ``metric`` (a likely bug) or algorithm options are errors.

    Raises :class:`AlgorithmError` naming the valid choices for an unknown name
    or option, so a typo in a notebook fails before any GPU time is spent.
    """
    if isinstance(name_or_instance, BaseAlgorithm):
        # an instance carries its own settings: the common arguments (and min_budget,
        # which tune() always passes) are ignored, but algorithm options would be lost
        algo = name_or_instance
        extra = sorted(set(options) - {"min_budget"})
        if extra:
            raise AlgorithmError(
                f"options {extra} only apply when the algorithm is given by name; "
                f"set them on the {type(algo).__name__} instance instead"
            )
        if metric is not None and metric != algo.metric:
            raise AlgorithmError(
                f"the algorithm instance ranks by metric={algo.metric!r}, not {metric!r}"
            )
        return algo
    if isinstance(name_or_instance, type) and issubclass(name_or_instance, BaseAlgorithm):
        cls = name_or_instance
    elif isinstance(name_or_instance, str):
        key = name_or_instance.strip().lower()
        if key not in ALGORITHMS:
            raise AlgorithmError(
                f"unknown algorithm {name_or_instance!r}; valid names: {', '.join(ALGORITHMS)}"
            )
        cls = ALGORITHMS[key]
    else:
        raise AlgorithmError(
            f"algorithm must be a name ({', '.join(ALGORITHMS)}) or a BaseAlgorithm, "
            f"got {type(name_or_instance).__name__}"
        )
    valid = algorithm_options(cls)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise AlgorithmError(
            f"{cls.name}: unknown option(s) {unknown}; valid options: {', '.join(valid) or 'none'}"
        )
    if space is None or metric is None or max_budget is None:
        raise AlgorithmError("make_algorithm needs space, metric and max_budget")
    return cls(
        space, metric=metric, mode=mode, max_budget=max_budget, num_trials=num_trials,
        seed=seed, **options,
    )
