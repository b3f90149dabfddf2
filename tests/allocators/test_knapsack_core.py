"""The multiple-knapsack core (HyperSack Algorithms 1–2): every decision replayed against the paper.

The replay walks the items in policy order with a naive O(P·G) copy of the
capacities and checks each decision the tree made: a placed item fits its
GPU (constraints 2–4), first fit chose the first feasible GPU in scan order
(fastest first), worst fit a feasible GPU with the most free compute × speed,
and an unplaced item fitted nowhere at its turn.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.allocators.mkp import POLICIES, decreasing_order, pack
from nbtune.allocators.swaps import improve_by_swaps

TOL = 1e-9


@st.composite
def instances(draw):
    n_nodes = draw(st.integers(1, 4))
    per_node = draw(st.integers(1, 4))
    g = n_nodes * per_node
    p = draw(st.integers(0, 30))
    grain = st.sampled_from([0.1, 0.2, 0.25, 0.3, 0.5, 0.75, 1.0])  # repeats make ties
    compute = draw(st.lists(st.one_of(grain, st.floats(0.01, 1.5)), min_size=p, max_size=p))
    memory = draw(st.lists(st.sampled_from([0.0, 1.0, 2.5, 4.0, 8.0]), min_size=p, max_size=p))
    cpus = draw(st.lists(st.sampled_from([0.0, 1.0, 2.0, 4.0]), min_size=p, max_size=p))
    runtime = draw(st.lists(st.sampled_from([1.0, 2.0, 5.0, 10.0]), min_size=p, max_size=p))
    cap_c = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0]), min_size=g, max_size=g))
    cap_m = draw(st.lists(st.sampled_from([4.0, 10.0, 16.0]), min_size=g, max_size=g))
    speed = draw(st.lists(st.sampled_from([1.0, 1.0, 2.0, 0.5]), min_size=g, max_size=g))
    node_cpus = draw(st.lists(st.sampled_from([2.0, 6.0, 32.0]), min_size=n_nodes,
                              max_size=n_nodes))
    gpu_node = [i // per_node for i in range(g)]
    return dict(compute=compute, memory=memory, cpus=cpus, runtime=runtime, cap_c=cap_c,
                cap_m=cap_m, speed=speed, node_cpus=node_cpus, gpu_node=gpu_node)


def run(inst, policy):
    return pack(inst["compute"], inst["memory"], inst["cpus"], inst["cap_c"], inst["cap_m"],
                np.array(inst["gpu_node"], dtype=np.int64), inst["node_cpus"], policy=policy,
                runtime=inst["runtime"], speed=inst["speed"])


def replay(inst, policy, where):
    """Re-decide every item naively and check the tree's decision was a valid one."""
    c, d, q = inst["compute"], inst["memory"], inst["cpus"]
    rc, rm, ncpu = list(inst["cap_c"]), list(inst["cap_m"]), list(inst["node_cpus"])
    sp, node = inst["speed"], inst["gpu_node"]
    g = len(rc)
    scan = sorted(range(g), key=lambda i: -sp[i])  # stable: fastest first, then by index
    order = (decreasing_order(inst["runtime"]).tolist() if policy.endswith("d")
             else list(range(len(c))))

    def fits(j, i):
        return (rc[i] >= c[j] - TOL and rm[i] >= d[j] - TOL and ncpu[node[i]] >= q[j] - TOL)

    for j in order:
        feasible = [i for i in scan if fits(j, i)]
        chosen = int(where[j])
        if chosen < 0:
            assert not feasible, f"item {j} fitted GPUs {feasible} but was left out"
            continue
        assert chosen in feasible, f"item {j} placed on GPU {chosen} where it does not fit"
        if policy.startswith("f"):
            assert chosen == feasible[0], f"first fit chose {chosen}, first feasible {feasible[0]}"
        else:
            best = max(rc[i] * sp[i] for i in feasible)
            assert rc[chosen] * sp[chosen] >= best - 1e-12, "worst fit missed the emptiest GPU"
        rc[chosen] -= c[j]
        rm[chosen] -= d[j]
        ncpu[node[chosen]] -= q[j]
    # constraints 2-4 hold at the end (nothing over capacity, with the float tolerance)
    assert all(x >= -1e-6 for x in rc)
    assert all(x >= -1e-6 for x in rm)
    assert all(x >= -1e-6 for x in ncpu)


@pytest.mark.parametrize("policy", POLICIES)
@given(inst=instances())
def test_every_decision_matches_the_papers_policy(policy, inst):
    where = run(inst, policy)
    assert where.shape == (len(inst["compute"]),)
    assert ((where >= -1) & (where < len(inst["cap_c"]))).all()
    replay(inst, policy, where)


@settings(max_examples=25)
@given(inst=instances())
def test_no_gpu_or_node_over_capacity(inst):
    for policy in POLICIES:
        where = run(inst, policy)
        g = len(inst["cap_c"])
        used_c, used_m = np.zeros(g), np.zeros(g)
        used_q = np.zeros(len(inst["node_cpus"]))
        for j, i in enumerate(where.tolist()):
            if i >= 0:
                used_c[i] += inst["compute"][j]
                used_m[i] += inst["memory"][j]
                used_q[inst["gpu_node"][i]] += inst["cpus"][j]
        assert (used_c <= np.array(inst["cap_c"]) + 1e-6).all()
        assert (used_m <= np.array(inst["cap_m"]) + 1e-6).all()
        assert (used_q <= np.array(inst["node_cpus"]) + 1e-6).all()


@given(st.lists(st.floats(0, 100), max_size=30))
def test_decreasing_order_is_longest_first_and_stable(runtime):
    order = decreasing_order(runtime).tolist()
    assert sorted(order) == list(range(len(runtime)))
    for a, b in zip(order, order[1:], strict=False):
        assert runtime[a] > runtime[b] or (runtime[a] == runtime[b] and a < b)


def test_ffd_places_the_long_job_the_queue_order_would_starve():
    # one GPU with room 1.0; FF takes the two short jobs first, FFD the long one
    args = ([0.5, 0.5, 1.0], [0, 0, 0], [0, 0, 0], [1.0], [16.0], np.array([0]), [32.0])
    rt = [1.0, 1.0, 9.0]
    assert pack(*args, policy="ff", runtime=rt).tolist() == [0, 0, -1]
    assert pack(*args, policy="ffd", runtime=rt).tolist() == [-1, -1, 0]


def test_worst_fit_balances_where_first_fit_stacks():
    args = ([0.3] * 4, [0] * 4, [0] * 4, [3.0, 3.0], [80.0, 80.0], np.array([0, 0]), [88.0])
    assert pack(*args, policy="ff").tolist() == [0, 0, 0, 0]
    assert sorted(pack(*args, policy="wf").tolist()) == [0, 0, 1, 1]


def test_fast_gpus_are_filled_first_and_weigh_more_in_worst_fit():
    one = ([0.5], [0], [0], [1.0, 1.0], [16.0, 16.0], np.array([0, 0]), [32.0])
    assert pack(*one, policy="ff", speed=[1.0, 2.0]).tolist() == [1]
    # worst fit: 0.6 free on a 2x GPU (1.2 of throughput) beats 1.0 free on a 1x GPU
    two = ([0.4], [0], [0], [1.0, 0.6], [16.0, 16.0], np.array([0, 0]), [32.0])
    assert pack(*two, policy="wf", speed=[1.0, 2.0]).tolist() == [1]
    assert pack(*two, policy="wf").tolist() == [0]


def test_node_cpus_are_shared_by_the_gpus_of_a_node():
    # two GPUs on one node with 4 cores: only two 2-core jobs fit, whatever the GPUs hold
    where = pack([0.1] * 3, [0] * 3, [2.0] * 3, [3.0, 3.0], [80.0, 80.0], np.array([0, 0]),
                 [4.0], policy="wf")
    assert sorted(where.tolist()) == [-1, 0, 1]


def test_memory_limits_a_gpu_before_compute():
    where = pack([0.1] * 3, [30.0] * 3, [0] * 3, [3.0], [80.0], np.array([0]), [32.0],
                 policy="ff")
    assert where.tolist() == [0, 0, -1]


def test_bad_input_is_refused_with_a_clear_message():
    ok = ([0.5], [0], [0], [1.0], [16.0], np.array([0]), [32.0])
    with pytest.raises(ValueError, match="unknown knapsack policy"):
        pack(*ok, policy="best")
    with pytest.raises(ValueError, match="pass runtime="):
        pack(*ok, policy="wfd")
    with pytest.raises(ValueError, match="memory has 2 entries"):
        pack([0.5], [0, 0], [0], [1.0], [16.0], np.array([0]), [32.0], policy="ff")
    with pytest.raises(ValueError, match="gpu_node indices"):
        pack([0.5], [0], [0], [1.0], [16.0], np.array([1]), [32.0], policy="ff")
    with pytest.raises(ValueError, match="speeds must be > 0"):
        pack(*ok, policy="ff", speed=[0.0])


@pytest.mark.parametrize("policy", ["ffd", "wfd"])
@given(inst=instances())
def test_swap_pass_keeps_every_constraint_and_never_loses_compute(policy, inst):
    where = run(inst, policy)
    better = improve_by_swaps(where, inst["compute"], inst["memory"], inst["cpus"],
                              inst["cap_c"], inst["cap_m"], np.array(inst["gpu_node"]),
                              inst["node_cpus"])
    g = len(inst["cap_c"])
    c, m, q = (np.array(inst[k], dtype=float) for k in ("compute", "memory", "cpus"))
    ok = better >= 0
    assert (np.bincount(better[ok], c[ok], g) <= np.array(inst["cap_c"]) + 1e-6).all()
    assert (np.bincount(better[ok], m[ok], g) <= np.array(inst["cap_m"]) + 1e-6).all()
    node = np.array(inst["gpu_node"])
    assert (np.bincount(node[better[ok]], q[ok], len(inst["node_cpus"]))
            <= np.array(inst["node_cpus"]) + 1e-6).all()
    assert c[ok].sum() >= c[where >= 0].sum() - 1e-9


def test_swap_pass_fills_the_sliver_greedy_leaves():
    # FF puts 0.6 + 0.3 on the GPU (0.1 left); swapping 0.3 for the waiting 0.4 fills it
    args = ([0.6, 0.3, 0.4], [0, 0, 0], [0, 0, 0], [1.0], [16.0], np.array([0]), [32.0])
    where = pack(*args, policy="ff")
    assert where.tolist() == [0, 0, -1]
    assert improve_by_swaps(where, *args).tolist() == [0, -1, 0]
