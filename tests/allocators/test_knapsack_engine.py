"""Knapsack allocators driven by the real engine and simulator (``validate=True`` throughout)."""

from __future__ import annotations

from collections import defaultdict

import pytest

import nbtune
from nbtune.core.resources import GPU, ClusterSpec, Demand
from nbtune.core.space import grid, uniform
from nbtune.engine.engine import EngineError
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload
from tests.allocators.probed import probed_sim

SPACE = {"lr": uniform(1e-4, 1e-1), "bs": grid([64, 128, 256, 512])}


def light(bs):
    """HyperSack-like lightweight jobs: bigger batches keep the GPU busier and take more memory."""
    return Demand(compute=0.1 + bs / 1024, memory_gb=2 + bs / 64, cpus=2)


def workload(**kw):
    return SyntheticWorkload(SPACE, unit_time=lambda c: c["bs"] / 64, demand=lambda c: light(c["bs"]),
                             seed=1, **kw)


def peak_load(exp):
    """The most share each GPU ever held at once, from the allocation log."""
    steps = defaultdict(list)
    for r in exp.engine.ledger.log:
        steps[r.gpu_id] += [(r.start, r.share), (exp.engine.time if r.end is None else r.end,
                                                  -r.share)]
    peak = {}
    for g, ev in steps.items():
        level = best = 0.0
        for _, d in sorted(ev, key=lambda x: (x[0], x[1])):  # releases before launches
            level += d
            best = max(best, level)
        peak[g] = best
    return peak


def run(allocator, cluster, ratios=None, n=32, **kw):
    opts = {} if ratios is None else {"oversubscription": ratios}
    return nbtune.tune(workload(**kw), SPACE, algorithm="grid", metric="loss", max_budget=6,
                       num_trials=n, allocator=allocator, runtime=SimRuntime(cluster=cluster),
                       validate=True, allocator_options=opts, seed=0)


@pytest.mark.parametrize("policy", ["knapsack-ff", "knapsack-ffd", "knapsack-wf", "knapsack-wfd"])
def test_policies_finish_every_trial_with_oversubscribed_gpus(policy):
    cluster = ClusterSpec.homogeneous(4, gpus_per_node=2, kind="A100", memory_gb=40,
                                      cpus_per_node=32)
    exp = run(policy, cluster, {"A100": 3.0})
    res = exp.results()
    assert len(res) == 32 and (res["state"] == "completed").all()
    peaks = peak_load(exp)
    assert max(peaks.values()) > 1.0 + 1e-9  # oversubscription was used ...
    assert max(peaks.values()) <= 3.0 + 1e-6  # ... within r
    fifo = run("fifo", cluster)
    assert exp.makespan < fifo.makespan / 2


def test_heterogeneous_cluster_uses_each_kinds_ratio():
    cluster = ClusterSpec.of(
        [GPU(0, "a", "A100", 1.0, 40), GPU(1, "a", "A100", 1.0, 40),
         GPU(2, "h", "H100", 2.0, 80), GPU(3, "h", "H100", 2.0, 80)],
        {"a": 32, "h": 32},
    )
    exp = run("knapsack-wfd", cluster, {"A100": 3.0, "H100": 2.5}, n=48)
    assert (exp.results()["state"] == "completed").all()
    peaks = peak_load(exp)
    assert all(peaks[g] <= 3.0 + 1e-6 for g in (0, 1))
    assert all(peaks[g] <= 2.5 + 1e-6 for g in (2, 3))
    # worst fit weighs free compute by speed: the faster H100s hosted more of the trials
    done = defaultdict(float)
    for r in exp.engine.ledger.log:
        done[r.gpu_id] += 1
    assert done[2] + done[3] >= done[0] + done[1]


def test_packing_without_profiling_is_one_trial_per_gpu():
    cluster = ClusterSpec.homogeneous(2)
    exp = run("knapsack-ff", cluster, n=8)  # r = 1 and compute demands < 1: a few per GPU
    assert max(peak_load(exp).values()) <= 1.0 + 1e-6
    wl = SyntheticWorkload(SPACE, unit_time=1.0, seed=0)  # default demand: a whole GPU
    exp = nbtune.tune(wl, SPACE, algorithm="grid", metric="loss", max_budget=3, num_trials=4,
                      allocator="knapsack-wfd", runtime=SimRuntime(cluster=cluster),
                      validate=True, seed=0)
    assert exp.makespan == pytest.approx(fifo_makespan(wl, cluster))


def fifo_makespan(wl, cluster):
    return nbtune.tune(wl, SPACE, algorithm="grid", metric="loss", max_budget=3, num_trials=4,
                       allocator="fifo", runtime=SimRuntime(cluster=cluster), seed=0).makespan


def test_a_trial_bigger_than_every_gpu_is_refused_clearly():
    wl = SyntheticWorkload(SPACE, unit_time=1.0, demand=Demand(0.5, 500.0), seed=0)
    with pytest.raises(ValueError, match="more than any GPU"):
        nbtune.tune(wl, SPACE, algorithm="grid", metric="loss", max_budget=3, num_trials=4,
                    allocator="knapsack-ff", runtime=probed_sim(wl, cluster=2), validate=True)


def test_share_covering_the_demand_runs_at_full_speed_in_the_simulator():
    wl = SyntheticWorkload(SPACE, unit_time=2.0, alpha=2.0, demand=Demand(0.25))
    gpus = ClusterSpec.homogeneous(1).by_id()
    full = 1 / 2.0
    assert wl.rate(0, {}, ((0, 0.25),), gpus) == pytest.approx(full)
    assert wl.rate(0, {}, ((0, 0.5),), gpus) == pytest.approx(full)
    # below its demand it pays Fluid's packing overhead at width share / demand
    assert wl.rate(0, {}, ((0, 0.125),), gpus) == pytest.approx(full / 2.0 ** (1 / 0.5 - 1))
    # a trial of the default demand (a whole GPU) keeps Fluid's h(i, w) unchanged
    whole = SyntheticWorkload(SPACE, unit_time=2.0, alpha=2.0)
    assert whole.rate(0, {}, ((0, 0.5),), gpus) == pytest.approx(full / 2.0)


def test_engine_rejects_a_knapsack_share_beyond_the_ratio():
    # an allocator whose max_share is r lets the engine hold it to r: over r is an invariant error
    from nbtune.allocators.knapsack import KnapsackAllocator

    class Greedy(KnapsackAllocator):
        def allocate(self, view):
            out = super().allocate(view)
            out.launch = {t: ((0, 0.9),) for t in [s.trial_id for s in view.pending][:4]}
            return out

    wl = SyntheticWorkload(SPACE, unit_time=1.0, demand=Demand(0.2), seed=0)
    with pytest.raises((AssertionError, EngineError), match="capacity 2.0"):
        nbtune.tune(wl, SPACE, algorithm="grid", metric="loss", max_budget=3, num_trials=4,
                    allocator=Greedy("ff", oversubscription={"generic": 2.0}),
                    runtime=SimRuntime(cluster=1), validate=True)


def test_ratio_profiled_on_the_interference_model_beats_no_oversubscription():
    """HyperSack §V-D end to end: sweep r in the simulator, keep the best, and it pays."""
    from nbtune.allocators.oversubscription import choose_ratio
    from nbtune.workloads.interference import InterferenceWorkload

    wl = InterferenceWorkload(SPACE, unit_time=lambda c: c["bs"] / 64,
                              demand=lambda c: light(c["bs"]), seed=0)
    cluster = ClusterSpec.homogeneous(2, kind="A100", memory_gb=80, cpus_per_node=64)
    makespan = {}
    for r in (1.0, 1.5, 2.0, 3.0, 4.0):
        exp = nbtune.tune(wl, SPACE, algorithm="grid", metric="loss", max_budget=4,
                          num_trials=32, allocator="knapsack-wfd",
                          runtime=SimRuntime(cluster=cluster), validate=True, seed=0,
                          allocator_options={"oversubscription": {"A100": r}})
        assert (exp.results()["state"] == "completed").all()
        makespan[r] = exp.makespan
    best = choose_ratio([(r, 32 * 4 / m) for r, m in makespan.items()])
    assert best > 1.0
    assert makespan[best] < makespan[1.0]
