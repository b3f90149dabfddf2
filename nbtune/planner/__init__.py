"""RubberBand (EuroSys '21): plan the cheapest elastic cluster that meets a deadline.

``spec_from(algorithm)`` reads the stages of a synchronous rung algorithm;
a :class:`ScalingProfile` and a :class:`CloudProfile` describe the model's
scaling and the cloud's prices and overheads; :func:`simulate` predicts a
plan's JCT and cost on the DAG execution model; :func:`plan` searches for the
cheapest feasible allocation (Alg. 2) and returns a :class:`Plan`.

This package sits above ``algorithms`` (it reads their brackets) and is never
imported by lower layers.
"""

from __future__ import annotations

from nbtune.planner.dag import (
    Allocation,
    Dag,
    NodeKind,
    Prediction,
    StageAllocation,
    simulate,
    to_dag,
)
from nbtune.planner.plan import Plan
from nbtune.planner.plan_for import plan_for
from nbtune.planner.planner import (
    InfeasibleDeadline,
    cheapest_static,
    naive_elastic,
    optimize_plan,
    plan,
    static_allocation,
    step_down,
)
from nbtune.planner.profiles import CLOUDS, CloudProfile, Latency, ProfileError, ScalingProfile
from nbtune.planner.spec import ExperimentSpec, SpecError, Stage, spec_from

__all__ = [
    "Allocation",
    "CLOUDS",
    "CloudProfile",
    "Dag",
    "ExperimentSpec",
    "InfeasibleDeadline",
    "Latency",
    "NodeKind",
    "Plan",
    "Prediction",
    "ProfileError",
    "ScalingProfile",
    "SpecError",
    "Stage",
    "StageAllocation",
    "cheapest_static",
    "naive_elastic",
    "optimize_plan",
    "plan",
    "plan_for",
    "simulate",
    "spec_from",
    "static_allocation",
    "step_down",
    "to_dag",
]
