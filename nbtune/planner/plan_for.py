"""Plan before pressing run: ``plan_for`` from the same arguments ``nbtune.tune`` takes.

A notebook user asks "what will this cost and how long will it take?" with
the algorithm they are about to run, not with a hand-written stage list.
:func:`plan_for` builds that algorithm exactly as :func:`nbtune.tune` does
(same registry, same options) and plans it, so the plan then fits
``tune(..., plan=p)`` by construction. After the run, ``exp.plan()`` shows
predicted vs measured (:meth:`PlanExecutor.predicted_vs_actual
<nbtune.planner.plan_executor.PlanExecutor.predicted_vs_actual>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbtune.planner.plan import Plan
from nbtune.planner.planner import plan
from nbtune.planner.profiles import CloudProfile, ScalingProfile
from nbtune.planner.spec import spec_from

__all__ = ["plan_for"]


def _profile(profile: ScalingProfile | Mapping[int, float] | None) -> ScalingProfile:
    if isinstance(profile, ScalingProfile):
        return profile
    if isinstance(profile, Mapping):
        return ScalingProfile(dict(profile))
    raise TypeError(
        "profile must be a ScalingProfile or a {workers: seconds per iteration} table, e.g. "
        "{1: 98.0, 2: 51.6, 4: 27.2}; measure one with nbtune.planner.measure.measure_profile"
    )


def plan_for(
    algorithm: Any = "sha",
    space: Mapping[str, Any] | None = None,
    *,
    deadline: float,
    cloud: CloudProfile | str,
    profile: ScalingProfile | Mapping[int, float],
    metric: str = "loss",
    mode: str = "min",
    max_budget: float | None = None,
    num_trials: int | None = None,
    min_budget: float = 1.0,
    seed: int | None = None,
    samples: int = 16,
    max_instances: int = 128,
    **options: Any,
) -> Plan:
    """Plan the run ``tune(train, space, algorithm=..., **options, plan=...)`` would make.

    ``algorithm`` is a registry name (``"sha"``, ``"hyperband"``, ...) with
    ``space``, ``max_budget`` and the options ``tune`` takes (``eta=3``), or
    an algorithm instance (its own settings win). Hyperband is planned one
    bracket after another, so it is built with ``pipeline_brackets=False``
    unless told otherwise — pass the same to ``tune``.
    """
    from nbtune.algorithms import ALGORITHMS, BaseAlgorithm, algorithm_options, make_algorithm

    prof = _profile(profile)
    if isinstance(algorithm, BaseAlgorithm):
        algo = make_algorithm(algorithm, metric=algorithm.metric, **options)
    else:
        if space is None or max_budget is None:
            raise ValueError("plan_for(name, space, max_budget=..., ...) needs the space and "
                             "max_budget tune() would get (or pass an algorithm instance)")
        cls = ALGORITHMS.get(algorithm.strip().lower()) if isinstance(algorithm, str) else algorithm
        if isinstance(cls, type) and "pipeline_brackets" in algorithm_options(cls):
            options.setdefault("pipeline_brackets", False)
        algo = make_algorithm(algorithm, space, metric=metric, mode=mode, max_budget=max_budget,
                              num_trials=num_trials, seed=seed, min_budget=min_budget,
                              **options)
    return plan(spec_from(algo), prof, cloud, deadline, samples=samples,
                max_instances=max_instances)
