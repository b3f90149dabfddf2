"""``fluid+knapsack``: water-filling widths under knapsack constraints, wide trials co-located."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.allocators import FluidKnapsackAllocator, make_allocator
from nbtune.allocators.fluid_knapsack import colocate
from nbtune.allocators.knapsack import ClusterRoom
from nbtune.api import tune
from nbtune.core.resources import ClusterSpec, Demand
from nbtune.core.space import grid, uniform
from nbtune.engine.engine import Engine
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload
from tests.allocators.probed import probed_sim

SPACE = {"lr": uniform(1e-4, 1e-1), "bs": grid([64, 128, 256, 512])}


def room(free, memory, nodes, node_cpus):
    g = len(free)
    return ClusterRoom(list(range(g)), np.full(g, 1.0), np.array(free, float),
                       np.array(memory, float), np.array(nodes), np.array(node_cpus, float),
                       np.ones(g), [f"n{i}" for i in range(len(node_cpus))])


def test_colocate_prefers_one_node_and_the_tightest_that_fits():
    # node 0 has 3 free GPUs, node 1 has 2: a 2-worker trial takes node 1 (best fit)
    r = room([1, 1, 1, 1, 1], [16] * 5, [0, 0, 0, 1, 1], [32, 32])
    assert colocate(2, Demand(1.0), r) == [3, 4]
    assert colocate(3, Demand(1.0), r) == [0, 1, 2]
    # 4 workers fit no single node: the roomiest node first, then the next
    assert colocate(4, Demand(1.0), r) == [0, 1, 2, 3]
    assert colocate(6, Demand(1.0), r) is None


def test_colocate_counts_memory_compute_and_cores_per_worker():
    r = room([1, 0.5, 1, 1], [16, 16, 4, 16], [0, 0, 0, 1], [32, 2])
    # GPU 1 lacks compute, GPU 2 memory; node 1 has cores for no 4-core worker
    assert colocate(1, Demand(1.0, 8.0, 4.0), r) == [0]
    assert colocate(2, Demand(1.0, 8.0, 4.0), r) is None
    assert colocate(2, Demand(1.0, 8.0, 2.0), r) == [0, 3]


def light(c):
    bs = c["bs"]
    return Demand(compute=0.1 + bs / 1024, memory_gb=2 + bs / 32, cpus=1 + bs / 128)


def watch_constraints(engine, workload):
    """After every engine step, memory per GPU and cores per node hold (validate=True does shares)."""
    violations = []

    def check(events, cmds):
        if engine.ledger.cluster is None:
            return
        gpus = engine.cluster.by_id()
        mem, cpu = defaultdict(float), defaultdict(float)
        for tid, pl in engine.running.items():
            d = workload.demand(tid, engine.trials[tid].config)
            for g, _ in pl:
                mem[g] += d.memory_gb
                cpu[gpus[g].node] += d.cpus
        violations.extend(f"GPU {g}: {m} GB" for g, m in mem.items() if m > gpus[g].memory_gb + 1e-9)
        violations.extend(f"node {n}: {c} cores" for n, c in cpu.items()
                          if c > engine.cluster.node_cpus[n] + 1e-9)

    engine.subscribe(check)
    return violations


@pytest.mark.parametrize("allocator", ["fluid+knapsack", "knapsack-ffd", "knapsack-wfd"])
@given(n=st.integers(1, 40), r=st.sampled_from([1.0, 2.0, 3.0]), seed=st.integers(0, 3))
def test_memory_and_node_cores_are_never_oversubscribed(allocator, n, r, seed):
    from nbtune.algorithms import make_algorithm

    wl = SyntheticWorkload(SPACE, unit_time=lambda c: c["bs"] / 64, demand=light, alpha=1.5,
                           beta=1.2, seed=seed)
    cluster = ClusterSpec.homogeneous(6, gpus_per_node=3, memory_gb=40, cpus_per_node=12)
    algo = make_algorithm("grid", SPACE, metric="loss", max_budget=4, num_trials=n, seed=seed)
    alloc = make_allocator(allocator, oversubscription={"generic": r})
    engine = Engine(algo, alloc, validate=True, hints={"workload": wl})
    violations = watch_constraints(engine, wl)
    probed_sim(wl, cluster=cluster).start(engine, wl)
    assert engine.done and not violations
    assert all(t.state.value == "completed" for t in engine.trials.values())


def test_long_trials_get_whole_gpus_on_one_node_and_short_ones_share():
    wl = SyntheticWorkload({"bs": grid([64, 512])}, unit_time=lambda c: c["bs"] / 8,
                           demand=Demand(0.3, 4.0, 1.0), beta=1.05, seed=0)
    cluster = ClusterSpec.homogeneous(8, gpus_per_node=4)
    exp = tune(wl, algorithm="grid", metric="loss", max_budget=4, num_trials=4,
               allocator="fluid+knapsack", runtime=SimRuntime(cluster=cluster), validate=True,
               allocator_options={"oversubscription": {"generic": 2.0}})
    first = exp.allocations()
    first = first[first.start == 0]
    wide = first.groupby("trial_id").gpu_id.agg(list)
    nodes = {tid: {g // 4 for g in gs} for tid, gs in wide.items() if len(gs) > 1}
    assert nodes, "the long trials should have been given several GPUs"
    assert all(len(ns) == 1 for ns in nodes.values())  # each on a single node
    frac = first[first.share < 1]
    assert (frac.share <= 0.3 + 1e-9).all()  # a fraction never exceeds the trial's demand
    assert (exp.results()["state"] == "completed").all()


def test_fluid_options_are_validated_by_fluid():
    with pytest.raises(ValueError, match="c \\(trials per GPU\\)"):
        FluidKnapsackAllocator(c=0)
    assert make_allocator("fluid+knapsack").name == "fluid+knapsack"


def test_colocate_keeps_a_running_trial_on_its_own_gpus_and_node():
    r = room([1, 1, 1, 1, 1], [16] * 5, [0, 0, 0, 1, 1], [32, 32])
    # best fit alone would pick node 1 for 2 workers; a trial already on GPU 1 stays on node 0
    assert colocate(2, Demand(1.0), r, prefer=[1]) == [1, 0]
    assert colocate(2, Demand(1.0), r, prefer=[4]) == [4, 3]


def test_a_long_trial_grows_onto_whole_gpus_when_the_short_ones_finish():
    # 24 short trials and one 8x longer: Fluid gives the long one 2 GPUs (on one node) and
    # the short ones 1/4 each; once they finish, DynamicFluid's plan widens it up to d = 4
    wl = SyntheticWorkload({"bs": grid(list(range(512, 536)) + [4096])},
                           unit_time=lambda c: c["bs"] / 64, demand=Demand(0.5, 2.0, 1.0),
                           beta=1.02, seed=0)
    cluster = ClusterSpec.homogeneous(8, gpus_per_node=4)
    exp = tune(wl, algorithm="grid", metric="loss", max_budget=8, allocator="fluid+knapsack",
               runtime=probed_sim(wl, cluster=cluster), validate=True,
               allocator_options={"resize_overhead": 1.0})
    a = exp.allocations()
    long_id = int(exp.results().sort_values("gpu_seconds").trial_id.iloc[-1])
    spans = [sorted(grp.gpu_id) for _, grp in a[a.trial_id == long_id].groupby("start")]
    assert len(spans[0]) == 2 and len({g // 4 for g in spans[0]}) == 1  # launched co-located
    assert len(spans[-1]) == 4  # widened to d
    assert set(spans[0]) <= set(spans[-1])  # kept its own GPUs while growing
    assert (exp.results()["state"] == "completed").all()
    static = tune(wl, algorithm="grid", metric="loss", max_budget=8, allocator="knapsack-wfd",
                  runtime=SimRuntime(cluster=cluster), validate=True)
    assert exp.makespan < static.makespan / 2


def test_growing_prefers_the_trials_own_node():
    from tests.allocators.test_knapsack_allocator import Model, View

    cluster = ClusterSpec.homogeneous(8, gpus_per_node=4)
    view = View(cluster, placed={0: ((5, 0.5),)}, hints={"workload": Model({0: Demand(0.5)})})
    view.trials[0].target_budget = 10.0
    out = make_allocator("fluid+knapsack").allocate(view)
    assert not out.launch
    assert sorted(g for g, _ in out.resize[0]) == [4, 5, 6, 7]  # node 1, where it runs
