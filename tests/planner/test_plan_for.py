"""Planning before running (``plan_for``) and ``Experiment.plan()`` without a plan."""

from __future__ import annotations

import pytest

import nbtune
from nbtune.algorithms import Hyperband, SuccessiveHalving
from nbtune.core.space import uniform
from nbtune.planner import CloudProfile, ScalingProfile, plan, plan_for, spec_from
from nbtune.planner.plan_executor import check_plan_fits

SPACE = {"lr": uniform(0.1, 1.0)}
CLOUD = CloudProfile("box", 3.6, 1, min_billed_s=10.0)
PROFILE = {1: 4.0, 2: 2.2, 4: 1.3}


def test_plan_for_builds_the_algorithm_tune_would_run():
    p = plan_for("sha", SPACE, deadline=400.0, cloud=CLOUD, profile=PROFILE, max_budget=8,
                 num_trials=8, eta=2, max_instances=8)
    algo = SuccessiveHalving(SPACE, metric="loss", num_trials=8, max_budget=8, eta=2)
    same = plan(spec_from(algo), ScalingProfile(PROFILE), CLOUD, 400.0, max_instances=8)
    assert p.allocation == same.allocation
    assert p.planned.cost == pytest.approx(same.planned.cost)
    check_plan_fits(p, algo)  # fits tune(..., plan=p) with the same arguments


def test_plan_for_takes_an_instance_and_plans_hyperband_bracket_by_bracket():
    hb = Hyperband(SPACE, metric="loss", max_budget=9, eta=3, pipeline_brackets=False)
    p = plan_for(hb, deadline=3000.0, cloud=CLOUD, profile=ScalingProfile(PROFILE))
    assert p.spec == spec_from(hb)
    by_name = plan_for("hyperband", SPACE, deadline=3000.0, cloud=CLOUD, profile=PROFILE,
                       max_budget=9, eta=3)
    assert by_name.spec == p.spec  # pipeline_brackets=False by default, as a plan needs


def test_plan_for_says_what_is_missing():
    with pytest.raises(ValueError, match="needs the space and max_budget"):
        plan_for("sha", deadline=10.0, cloud=CLOUD, profile=PROFILE)
    with pytest.raises(TypeError, match="ScalingProfile or a"):
        plan_for("sha", SPACE, deadline=10.0, cloud=CLOUD, profile=[1, 2], max_budget=4)


def test_experiment_plan_needs_a_planned_run():
    wl = nbtune.SyntheticWorkload(SPACE, seed=0)
    exp = nbtune.tune(wl, SPACE, algorithm="sha", metric="loss", max_budget=4, num_trials=4,
                      eta=2, runtime=nbtune.SimRuntime(cluster=2), seed=0)
    with pytest.raises(ValueError, match="did not follow a plan"):
        exp.plan()
    with pytest.raises(TypeError, match="plan_for"):
        exp.plan(deadline=60)
