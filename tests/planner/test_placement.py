"""The placement controller (RubberBand §4.4.1): co-location and the displacement step."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.algorithms import SuccessiveHalving
from nbtune.core.resources import ClusterSpec
from nbtune.core.space import uniform
from nbtune.planner import CloudProfile, ScalingProfile, plan, spec_from
from nbtune.planner.allocator import PlannedAllocator
from nbtune.planner.dag import StageAllocation
from nbtune.planner.placement import co_located, hosts_of, min_hosts, try_make_space
from nbtune.planner.spec import ExperimentSpec, Stage


def test_min_hosts_counts_the_largest_hosts_first():
    assert min_hosts([4, 4, 4], 3) == 1
    assert min_hosts([4, 4, 4], 5) == 2
    assert min_hosts([2, 8], 6) == 1
    assert min_hosts([2, 2], 5) == 3  # cannot fit at all


def test_fragmented_hosts_displace_a_narrower_trial():
    hosts = {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}
    placed = {10: [1], 11: [5]}  # one narrow trial on each host: no host has 4 free
    assert co_located({"a": [0, 2, 3], "b": [4, 6, 7]}, 4) is not None  # would span 2 hosts
    out = try_make_space(hosts, placed, {99: 4})
    assert out is not None
    node_of = {g: n for n, gs in hosts.items() for g in gs}
    assert hosts_of(out[99], node_of) == 1
    moved = [t for t in placed if sorted(out[t]) != placed[t]]
    assert len(moved) == 1  # one trial moves, the other stays
    assert len({g for gs in out.values() for g in gs}) == 6  # nothing shared


def test_no_repack_when_the_total_does_not_fit():
    hosts = {"a": [0, 1], "b": [2, 3]}
    assert try_make_space(hosts, {1: [0, 2]}, {2: 3}) is None


def test_wider_trials_are_never_displaced_by_narrower_ones():
    hosts = {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}
    placed = {1: [0, 1, 2], 2: [4, 5, 6]}
    out = try_make_space(hosts, placed, {3: 2})
    assert out is None  # only 1 free GPU per host: the 2-wide trial would need to move a 3-wide one


@st.composite
def cluster_and_trials(draw):
    per_host = draw(st.sampled_from([1, 2, 4, 8]))
    n_hosts = draw(st.integers(1, 4))
    widths = [w for w in (1, 2, 4, 8, 16) if w <= per_host or w % per_host == 0]
    arrivals = draw(st.lists(st.sampled_from(widths), min_size=1, max_size=12))
    leaves = draw(st.lists(st.integers(0, 11), max_size=6))
    return per_host, n_hosts, arrivals, leaves


@settings(max_examples=150, deadline=None)
@given(cluster_and_trials())
def test_every_trial_on_its_minimum_hosts_whenever_the_free_slots_allow(case):
    """Trials (fair-division widths) arrive and leave; each is placed by co-location,
    then by displacement. Whenever the free GPUs add up to its width, every trial ends on
    the fewest hosts its width needs, and no GPU is held twice."""
    per_host, n_hosts, arrivals, leaves = case
    hosts = {f"n{h}": list(range(h * per_host, (h + 1) * per_host)) for h in range(n_hosts)}
    node_of = {g: n for n, gs in hosts.items() for g in gs}
    sizes = [per_host] * n_hosts
    placed: dict[int, list[int]] = {}
    for tid, width in enumerate(arrivals):
        if tid in leaves and placed:
            placed.pop(min(placed))
        held = {g for gs in placed.values() for g in gs}
        idle = {n: [g for g in gs if g not in held] for n, gs in hosts.items()}
        fits = len(node_of) - len(held) >= width
        gpus = co_located(idle, width)
        if gpus is not None and hosts_of(gpus, node_of) == min_hosts(sizes, width):
            placed[tid] = gpus
        else:
            out = try_make_space(hosts, placed, {tid: width})
            assert (out is not None) == fits, (placed, tid, width)
            if out is None:
                continue
            for t, gs in placed.items():  # only narrower trials were moved
                if sorted(out[t]) != sorted(gs):
                    assert len(gs) < width
            placed = out
        all_gpus = [g for gs in placed.values() for g in gs]
        assert len(all_gpus) == len(set(all_gpus))  # no GPU over-committed
        for t, gs in placed.items():
            assert hosts_of(gs, node_of) == min_hosts(sizes, len(gs)), (t, gs)


# ----------------------------------------------------------- inside the allocator
def _two_stage_plan():
    cloud = CloudProfile("box4", 4.0, 4, min_billed_s=1.0)
    algo = SuccessiveHalving({"lr": uniform(0.1, 1.0)}, metric="loss", num_trials=8,
                             max_budget=4, eta=4)
    base = plan(spec_from(algo), ScalingProfile({1: 1.0}), cloud, 1000.0, max_instances=2)
    spec = ExperimentSpec((Stage(8, 1), Stage(2, 3)))
    return dataclasses.replace(base, spec=spec, allocation=StageAllocation.elastic((8, 8), cloud))


def test_planned_allocator_moves_a_straggler_to_co_locate_the_next_stage():
    alloc = PlannedAllocator(_two_stage_plan())
    alloc.stage_of(0)  # stage 0's group was seen first, as in a run
    cluster = ClusterSpec.homogeneous(8, gpus_per_node=4)
    groups = {10: 0, 11: 0, 20: 1, 21: 1}
    view = SimpleNamespace(
        cluster=cluster,
        running={10: ((1, 1.0),), 11: ((5, 1.0),)},  # two stage-0 stragglers
        idle_gpus={0, 2, 3, 4, 6, 7},
        pending=[SimpleNamespace(trial_id=20, group_id=1), SimpleNamespace(trial_id=21, group_id=1)],
        trial=lambda tid: SimpleNamespace(group_id=groups[tid]),
    )
    out = alloc.allocate(view)
    assert list(out.launch) == [20]
    new = [g for g, _ in out.launch[20]]
    node_of = {g.gpu_id: g.node for g in cluster.gpus}
    assert len(new) == 4 and hosts_of(new, node_of) == 1
    assert len(out.resize) == 1  # one straggler moved through its checkpoint
    (moved, where), = out.resize.items()
    assert moved in (10, 11) and not {g for g, _ in where} & set(new)
    held = new + [g for g, _ in where] + [g for t, p in view.running.items() if t != moved for g, _ in p]
    assert len(held) == len(set(held))
