"""Executor pieces that need no cluster: plan/algorithm matching, the meter, bad runtimes."""

from __future__ import annotations

import pytest

import nbtune
from nbtune.algorithms import Hyperband, SuccessiveHalving
from nbtune.core.space import uniform
from nbtune.planner import CloudProfile, ScalingProfile, plan, spec_from
from nbtune.planner.plan_executor import CostMeter, PlanExecutionError, check_plan_fits

SPACE = {"lr": uniform(0.1, 1.0)}
CLOUD = CloudProfile("w", 3.6, 1, min_billed_s=10.0)


def small_plan(n=4):
    algo = SuccessiveHalving(SPACE, metric="loss", num_trials=n, max_budget=4, eta=2)
    return plan(spec_from(algo), ScalingProfile({1: 1.0}), CLOUD, 100.0, max_instances=4)


def test_plan_must_match_the_algorithm():
    p = small_plan(4)
    check_plan_fits(p, SuccessiveHalving(SPACE, metric="loss", num_trials=4, max_budget=4,
                                         eta=2))
    with pytest.raises(PlanExecutionError, match="plan was made for stages"):
        check_plan_fits(p, SuccessiveHalving(SPACE, metric="loss", num_trials=8,
                                             max_budget=4, eta=2))
    with pytest.raises(PlanExecutionError, match="pipeline_brackets=False"):
        check_plan_fits(p, Hyperband(SPACE, metric="loss", max_budget=4, eta=2))


def test_a_plan_needs_the_dask_runtime():
    with pytest.raises(PlanExecutionError, match="Dask runtime"):
        nbtune.tune(nbtune.SyntheticWorkload(SPACE), SPACE, algorithm="sha", metric="loss", max_budget=4,
                    num_trials=4, eta=2, plan=small_plan(4))


def test_meter_bills_lifetimes_with_the_minimum_charge():
    m = CostMeter(CLOUD)  # $0.001 per worker-second, 10 s minimum
    m.observe(0.0, {"a", "b"})
    m.observe(5.0, {"a"})  # b left after 5 s: billed 10
    m.observe(30.0, {"a", "c"})
    m.close(50.0)  # a: 50 s, c: 20 s
    assert m.cost(50.0) == pytest.approx((50 + 10 + 20) * 0.001)
    assert m.worker_seconds(50.0) == pytest.approx(75.0)
    m2 = CostMeter(CLOUD)
    m2.observe(0.0, {"a"})
    m2.observe(1.0, set())
    m2.observe(2.0, {"a"})  # a came back: a second life, a second minimum charge
    m2.close(3.0)
    assert m2.cost(3.0) == pytest.approx(20 * 0.001)


def test_profile_from_a_run_skips_pauses_at_barriers():
    from nbtune.planner.measure import profile_from_experiment

    wl = nbtune.SyntheticWorkload(SPACE, unit_time=2.0, launch_overhead=1.0, seed=0)
    exp = nbtune.tune(wl, SPACE, algorithm="sha", metric="loss", max_budget=8, num_trials=8,
                      eta=2, runtime=nbtune.SimRuntime(cluster=2), seed=0)
    prof = profile_from_experiment(exp)
    # trials wait at every rung's barrier; none of that waiting is an iteration
    assert prof.points[1] == pytest.approx(2.0)
    assert prof.startup_s == pytest.approx(1.0)
    assert prof.cv == pytest.approx(0.0, abs=1e-9)


def test_profile_from_a_run_tells_a_workers_first_launch_from_the_later_ones():
    from types import SimpleNamespace as NS

    from nbtune.engine.state import AllocationRecord
    from nbtune.planner.measure import profile_from_experiment

    # two workers; each one's first trial reaches its first report 5 s after launch, every
    # later launch 1.5 s; an iteration is 1 s
    log, trials = [], []
    for tid, (gpu, start, first) in enumerate([(0, 0.0, 5.0), (1, 0.0, 5.0), (0, 10.0, 1.5),
                                               (1, 10.0, 1.5), (0, 20.0, 1.5)]):
        log.append(AllocationRecord(tid, gpu, 1.0, start, start + first + 1))
        t0 = start + first
        trials.append(NS(trial_id=tid, results=[(t0, 1, {}), (t0 + 1.0, 2, {})]))
    eng = NS(ledger=NS(log=log), trials={t.trial_id: t for t in trials})
    prof = profile_from_experiment(eng)
    assert prof.points[1] == pytest.approx(1.0)
    assert prof.startup_s == pytest.approx(0.5)
    assert prof.cold_start_s == pytest.approx(3.5)
    assert "2 the first on their worker" in prof.source


def test_profile_from_a_run_tells_iterations_alone_from_those_side_by_side():
    """Workers sharing one machine slow each other down: the profile keeps the iterations of a
    trial training alone as ``points[1]`` and how much slower two at once ran as ``shared``,
    and the plan's model charges a stage by how many of its workers train at once."""
    from types import SimpleNamespace as NS

    from nbtune.engine.state import AllocationRecord
    from nbtune.planner import Latency, simulate, static_allocation
    from nbtune.planner.measure import profile_from_experiment
    from nbtune.planner.spec import ExperimentSpec, Stage

    # trials 0 and 1 side by side, 2 s an iteration; then trial 2 alone, 1 s an iteration;
    # every first report comes 0.5 s after an iteration's time (the launch)
    log, trials = [], []
    for tid, (gpu, start, unit) in enumerate([(0, 0.0, 2.0), (1, 0.0, 2.0), (0, 10.0, 1.0)]):
        t0 = start + unit + 0.5
        log.append(AllocationRecord(tid, gpu, 1.0, start, t0 + 2 * unit))
        trials.append(NS(trial_id=tid, results=[(t0 + i * unit, i + 1, {}) for i in range(3)]))
    prof = profile_from_experiment(NS(ledger=NS(log=log), trials={t.trial_id: t for t in trials}))
    assert prof.points[1] == pytest.approx(1.0)
    assert prof.shared == {2: pytest.approx(2.0)}
    assert prof.startup_s == pytest.approx(0.5) and prof.cold_start_s == pytest.approx(0.0)
    assert prof.cv == pytest.approx(0.0, abs=1e-9)
    assert "2 iterations alone" in prof.source
    assert (prof.sharing(1), prof.sharing(2), prof.sharing(5)) == (1.0, 2.0, 2.0)

    # one stage of two trials, 4 iterations each: on one worker they queue (alone, 1 s), on
    # two they run side by side at 2 s an iteration; instances that share nothing: 1 s
    spec = ExperimentSpec((Stage(trials=2, iterations=4),))
    cloud = CLOUD.with_(init=Latency(0.0))
    local = ScalingProfile({1: 1.0}, shared={2: 2.0})
    assert simulate(spec, static_allocation(spec, 1, cloud), local, cloud).jct == pytest.approx(8)
    assert simulate(spec, static_allocation(spec, 2, cloud), local, cloud).jct == pytest.approx(8)
    apart = ScalingProfile({1: 1.0})
    assert simulate(spec, static_allocation(spec, 2, cloud), apart, cloud).jct == pytest.approx(4)


@pytest.mark.parametrize("shared", [{1: 2.0}, {2: 0.0}, {2: float("nan")}, {2.5: 1.5}])
def test_a_shared_factor_must_be_a_count_of_two_or_more_and_positive(shared):
    from nbtune.planner.profiles import ProfileError

    with pytest.raises(ProfileError, match="shared"):
        ScalingProfile({1: 1.0}, shared=shared)
