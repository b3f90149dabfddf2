"""DAG simulator (Alg. 1) and planner (Alg. 2): invariants the paper states."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.planner import (
    CloudProfile,
    Dag,
    ExperimentSpec,
    InfeasibleDeadline,
    Latency,
    NodeKind,
    ScalingProfile,
    Stage,
    StageAllocation,
    plan,
    simulate,
    static_allocation,
    step_down,
)
from nbtune.planner.planner import fair_values

PROFILE = ScalingProfile({1: 100.0, 2: 55.0, 4: 30.0, 8: 20.0})
CLOUD = CloudProfile("test", 3.6, 4, provision=Latency(10.0), init=Latency(5.0))


def test_jct_is_the_hand_computed_critical_path():
    spec = ExperimentSpec((Stage(4, 1), Stage(2, 2), Stage(1, 3)))
    # stage 0: 2 GPUs for 4 trials -> 2 waves of 100 s; stage 1: 2 trials x 1 GPU, 200 s;
    # stage 2: 4 GPUs -> 3 iterations x 30 s; scale 0->1 instance at start (10+5 s)
    alloc = StageAllocation((2, 2, 4), (1, 1, 1))
    p = simulate(spec, alloc, PROFILE, CLOUD)
    assert p.jct == pytest.approx(15 + 200 + 200 + 90)
    # a scale-up before stage 2 adds a blocking SCALE + INIT (15 s) there
    p2 = simulate(spec, StageAllocation((2, 2, 8), (1, 1, 2)), PROFILE, CLOUD)
    assert p2.jct == pytest.approx(15 + 200 + 200 + 15 + 3 * 20)
    assert p2.stage_start[2] == pytest.approx(415)


def test_cost_bills_instances_idle_at_barriers_and_the_minimum():
    spec = ExperimentSpec((Stage(2, 1), Stage(1, 1)))
    cloud = CLOUD.with_(provision=Latency(0.0), init=Latency(0.0), price_per_hour=3600.0)
    # 2 instances (8 GPUs) held through stage 0 (4 GPUs/trial: 30 s), one released after
    p = simulate(spec, StageAllocation((8, 4), (2, 1)), PROFILE, cloud)
    # instance A: 0..60 s (30 + 30 s); instance B: 0..30 s billed 60 s minimum
    assert p.cost == pytest.approx(60 + 60)
    fn = simulate(spec, StageAllocation((8, 4), (2, 1)), PROFILE, cloud.with_(billing="function"))
    assert fn.cost == pytest.approx((2 * 30 * 4 + 30 * 4) * 3600 / 4 / 3600)


@st.composite
def dags(draw):
    n = draw(st.integers(1, 9))
    dag = Dag()
    for i in range(n):
        preds = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        dag.add(NodeKind.TRAIN, Latency(draw(st.floats(0, 50))), tuple(preds))
    return dag


def _brute_force_longest(dag: Dag, lat: np.ndarray) -> float:
    succ = {i: [j for j, v in enumerate(dag.nodes) if i in v.preds] for i in range(len(dag.nodes))}

    def paths(i):
        if not succ[i]:
            yield [i]
        for j in succ[i]:
            for rest in paths(j):
                yield [i, *rest]

    roots = [i for i, v in enumerate(dag.nodes) if not v.preds]
    return max(sum(lat[k] for k in p) for r in roots for p in paths(r))


@given(dags())
@settings(max_examples=40, deadline=None)
def test_longest_path_equals_brute_force_enumeration(dag):
    lat = dag.sample_latencies(np.random.default_rng(0), 1)
    assert dag.longest_path(lat)[0] == pytest.approx(_brute_force_longest(dag, lat[:, 0]))


def test_step_down_keeps_fair_division():
    assert step_down(32, 32) == 16 and step_down(16, 32) == 8
    assert step_down(64, 32) == 32 and step_down(30, 10) == 20
    assert step_down(1, 5) is None
    for n, top in itertools.product(range(1, 13), range(1, 40)):
        v = step_down(top, n)
        if v is not None:
            assert v < top and (n % v == 0 or v % n == 0)
    assert fair_values(6, 13) == [1, 2, 3, 6, 12]


specs = st.lists(st.tuples(st.integers(1, 12), st.integers(1, 6)), min_size=1, max_size=4).map(
    lambda xs: ExperimentSpec(tuple(Stage(n, float(it)) for n, it in xs)))


@given(spec=specs, slack=st.floats(1.0, 3.0), cv=st.sampled_from([0.0, 0.1]),
       billing=st.sampled_from(["instance", "function"]))
@settings(max_examples=30, deadline=None)
def test_planner_never_worse_than_static_and_meets_the_deadline(spec, slack, cv, billing):
    profile = ScalingProfile({1: 60.0, 2: 33.0, 4: 19.0, 8: 12.0}, cv=cv)
    cloud = CLOUD.with_(billing=billing)
    fastest = min(simulate(spec, static_allocation(spec, k, cloud), profile, cloud).jct
                  for k in range(1, 9))
    p = plan(spec, profile, cloud, fastest * slack, max_instances=8)
    assert p.planned.cost <= p.static.cost + 1e-9
    assert p.planned.jct <= p.deadline
    assert p.static.jct <= p.deadline
    if p.naive is not None:
        assert p.naive.jct <= p.deadline


@given(spec=specs, k=st.integers(1, 6), factor=st.floats(1.01, 4.0))
@settings(max_examples=25, deadline=None)
def test_cost_is_monotone_in_price(spec, k, factor):
    alloc = static_allocation(spec, k, CLOUD)
    lo = simulate(spec, alloc, PROFILE, CLOUD).cost
    hi = simulate(spec, alloc, PROFILE, CLOUD.with_(price_per_hour=3.6 * factor)).cost
    assert hi > lo


def test_infeasible_deadline_is_a_clear_error():
    spec = ExperimentSpec((Stage(4, 10),))
    with pytest.raises(InfeasibleDeadline, match="fastest is predicted"):
        plan(spec, PROFILE, CLOUD, 60.0, max_instances=4)
    with pytest.raises(ValueError, match="deadline"):
        plan(spec, PROFILE, CLOUD, -1)


def test_plan_renders_table_text_html_and_bokeh():
    spec = ExperimentSpec((Stage(8, 1), Stage(2, 3), Stage(1, 9)))
    p = plan(spec, PROFILE, CLOUD, 1500)
    t = p.table()
    assert list(t["trials"]) == [8, 2, 1]
    assert {"epochs", "gpus_per_trial", "instances"} <= set(t.columns)
    assert "planned" in str(p) and "static" in p._repr_html_()
    from bokeh.models import LayoutDOM

    assert isinstance(p.plot(), LayoutDOM)


def test_cold_start_is_paid_once_per_new_worker():
    spec = ExperimentSpec((Stage(4, 1), Stage(2, 1), Stage(4, 1)))
    prof = ScalingProfile({1: 100.0}, startup_s=1.0, cold_start_s=7.0)
    cloud = CLOUD.with_(gpus_per_instance=1, provision=Latency(0.0), init=Latency(0.0))
    # stage 0: two new workers, 2 waves: only each worker's first trial pays the cold start;
    # stage 1 keeps one warm worker; stage 2 adds one new worker: one slot pays again
    p = simulate(spec, StageAllocation((2, 1, 2), (2, 1, 2)), prof, cloud)
    assert p.stage_end[0] == pytest.approx(7 + 2 * 101)
    assert p.stage_end[1] - p.stage_end[0] == pytest.approx(2 * 101)
    assert p.stage_end[2] - p.stage_end[1] == pytest.approx(7 + 2 * 101)
    warm = simulate(spec, StageAllocation((2, 1, 2), (2, 1, 2)),
                    ScalingProfile({1: 100.0}, startup_s=1.0), cloud)
    assert p.jct - warm.jct == pytest.approx(14.0)


def test_instances_held_at_the_start_skip_the_scale_up_and_are_billed_from_it():
    """A cluster already running (a local one with a worker up) does not provision its first
    instances: they are ready after their own set-up (``held_ready``), billed from the start;
    instances beyond them are provisioned as the cloud profile says."""
    spec = ExperimentSpec((Stage(2, 1), Stage(1, 1)))
    prof = ScalingProfile({1: 100.0})
    cloud = CLOUD.with_(gpus_per_instance=1, provision=Latency(10.0), init=Latency(5.0),
                        price_per_hour=3600.0, min_billed_s=60.0)
    one = StageAllocation((1, 1), (1, 1))
    two = StageAllocation((2, 1), (2, 1))
    # from nothing: SCALE + INIT (15 s) before anything trains, as before
    assert simulate(spec, one, prof, cloud).jct == pytest.approx(15 + 300)
    # one held, ready after 2 s: no scale-up; billed from 0 to its end
    held = simulate(spec, one, prof, cloud, held=1, held_ready=Latency(2.0))
    assert held.jct == pytest.approx(2 + 300) and held.cost == pytest.approx(302)
    # two wanted, one held: the second is provisioned (10 s) and set up (5 s) meanwhile
    grow = simulate(spec, two, prof, cloud, held=1, held_ready=Latency(2.0))
    assert grow.jct == pytest.approx(15 + 100 + 100)
    assert grow.cost == pytest.approx(215 + (115 - 10))  # held from 0; the new from 10 to 115
    # more held than stage 0 uses: the extra one goes at once, at the minimum charge
    extra = simulate(spec, one, prof, cloud, held=3, held_ready=Latency(2.0))
    assert extra.jct == pytest.approx(302) and extra.cost == pytest.approx(302 + 2 * 60)
    with pytest.raises(ValueError, match="held"):
        simulate(spec, one, prof, cloud, held=-1)


def test_instances_setting_up_at_once_on_one_host_slow_each_other():
    """``CloudProfile.shared_init``: at stage 0 the held instances and the new ones set up
    together and each takes the factor longer; a later scale-up counts only the new ones."""
    spec = ExperimentSpec((Stage(2, 1), Stage(1, 1), Stage(1, 1)))
    prof = ScalingProfile({1: 100.0})
    apart = CLOUD.with_(gpus_per_instance=1, provision=Latency(0.0), init=Latency(5.0),
                        price_per_hour=3600.0, min_billed_s=0.0)
    local = apart.with_(shared_init={2: 2.0})
    two = StageAllocation((2, 1, 1), (2, 1, 1))
    # one held (ready after 4 s alone) and a new one (5 s alone): at once, 8 s and 10 s
    assert simulate(spec, two, prof, apart, held=1, held_ready=Latency(4.0)).jct == \
        pytest.approx(5 + 300)
    shared = simulate(spec, two, prof, local, held=1, held_ready=Latency(4.0))
    assert shared.jct == pytest.approx(10 + 300)
    assert shared.cost == pytest.approx(310 + 110)  # held from 0 to 310; the new, 0 to 110
    # one set-up alone is not slowed, held or new (stage 0's two trials queue: 200 s)
    one = StageAllocation((1, 1, 1), (1, 1, 1))
    assert simulate(spec, one, prof, local, held=1, held_ready=Latency(4.0)).jct == \
        pytest.approx(4 + 400)
    assert simulate(spec, one, prof, local).jct == pytest.approx(5 + 400)
    # a later scale-up of one instance beside the one held sets up alone
    grow = StageAllocation((1, 1, 2), (1, 1, 2))
    spec3 = ExperimentSpec((Stage(1, 1), Stage(1, 1), Stage(2, 1)))
    assert simulate(spec3, grow, prof, local, held=1, held_ready=Latency(4.0)).jct == \
        pytest.approx(4 + 200 + 5 + 100)
    # from nothing, two new ones at once are slowed as well
    assert simulate(spec, two, prof, local).jct == pytest.approx(10 + 300)
    assert local.init_sharing(1) == 1.0 and local.init_sharing(3) == 2.0


@pytest.mark.parametrize("shared", [{1: 2.0}, {2: 0.0}, {2: float("inf")}, {2.5: 1.5}])
def test_a_shared_init_factor_must_be_a_count_of_two_or_more_and_positive(shared):
    from nbtune.planner.profiles import ProfileError

    with pytest.raises(ProfileError, match="shared_init"):
        CLOUD.with_(shared_init=shared)


def test_a_plan_from_a_held_instance_keeps_it_when_a_new_one_would_not_pay():
    spec = ExperimentSpec((Stage(2, 1), Stage(1, 1)))
    prof = ScalingProfile({1: 10.0})
    slow_start = CLOUD.with_(gpus_per_instance=1, provision=Latency(0.0), init=Latency(60.0))
    p = plan(spec, prof, slow_start, deadline=200, max_instances=2, held=1,
             held_ready=Latency(1.0))
    assert p.allocation.instances == (1, 1)
    assert p.planned.jct == pytest.approx(1 + 30)
    assert p.held == 1 and "from the 1 instances held" in str(p)
    # from nothing, the same plan pays the 60 s start
    assert plan(spec, prof, slow_start, deadline=200, max_instances=2).planned.jct == \
        pytest.approx(60 + 30)
