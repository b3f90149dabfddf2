"""Hydro §5.2: a target trial measured below 50 % utilization goes to an older (slower) GPU."""

from __future__ import annotations

import pytest

import nbtune
from nbtune import SimRuntime, SyntheticWorkload, uniform
from nbtune.allocators import ALLOCATORS, FifoAllocator, HeterogeneityAware
from nbtune.core.resources import GPU, ClusterSpec, Demand
from nbtune.core.roles import TARGET_KEY

#: two fast GPUs (ids 0, 1) and two of an older generation at half their speed
MIXED = ClusterSpec((GPU(0, "n0", "A100", 2.0), GPU(1, "n0", "A100", 2.0),
                     GPU(2, "n1", "V100", 1.0), GPU(3, "n1", "V100", 1.0)))
TARGETS = 1_000_000  # TARGET_ID_BASE: eager transfer's target trials


def runs(target_util: float, store, cluster=MIXED, n_runs: int = 2):
    """Runs of one surrogate job on one store: the second reads the first's measurements."""
    wl = SyntheticWorkload({"lr": uniform(0, 1)}, unit_time=1.0, demand=lambda c: Demand(
        compute=target_util if c.get(TARGET_KEY) else 0.9))
    out = []
    for seed in range(n_runs):
        alloc = HeterogeneityAware(FifoAllocator())
        exp = nbtune.tune(wl, algorithm="random", metric="loss", max_budget=4, num_trials=12,
                          scaling=2, seed=seed, allocator=alloc, store=store, validate=True,
                          runtime=SimRuntime(cluster=cluster))
        a = exp.allocations()
        out.append((alloc, a[a.trial_id >= TARGETS], a[a.trial_id < TARGETS]))
    return out


def test_a_target_measured_below_half_a_gpu_runs_on_the_older_gpu(tmp_path):
    (first, t1, _), (second, t2, _) = runs(0.3, tmp_path)
    assert first.moved == [] and set(t1.gpu_id) <= {0, 1}  # nothing measured yet: FIFO's GPU
    assert second.moved and set(t2.gpu_id) <= {2, 3}  # measured at 0.3: an old GPU


def test_a_target_that_fills_its_gpu_stays_where_the_base_put_it(tmp_path):
    for alloc, targets, _ in runs(0.9, tmp_path):
        assert alloc.moved == [] and set(targets.gpu_id) <= {0, 1}


def test_one_kind_of_gpu_leaves_the_base_allocation_unchanged(tmp_path):
    same = ClusterSpec.homogeneous(4)
    wrapped = runs(0.3, tmp_path / "a", cluster=same)[1]
    wl = SyntheticWorkload({"lr": uniform(0, 1)}, unit_time=1.0)
    assert wrapped[0].moved == []
    plain = nbtune.tune(wl, algorithm="random", metric="loss", max_budget=4, num_trials=12,
                        scaling=2, seed=1, allocator="fifo", runtime=SimRuntime(cluster=same))
    assert plain.allocations()[["trial_id", "gpu_id"]].values.tolist() == \
        nbtune.tune(wl, algorithm="random", metric="loss", max_budget=4, num_trials=12,
                    scaling=2, seed=1, allocator=HeterogeneityAware(FifoAllocator()),
                    runtime=SimRuntime(cluster=same)).allocations()[
                        ["trial_id", "gpu_id"]].values.tolist()


def test_registry_and_tune_with_scaling_use_it():
    assert ALLOCATORS["hetero"] is HeterogeneityAware
    wl = SyntheticWorkload({"lr": uniform(0, 1)}, unit_time=1.0)
    exp = nbtune.tune(wl, algorithm="random", metric="loss", max_budget=2, num_trials=4,
                      scaling=2, seed=0, runtime=SimRuntime(cluster=2))
    assert isinstance(exp.engine.allocator, HeterogeneityAware)


@pytest.mark.parametrize("threshold", [0, -0.5, 1.5])
def test_threshold_is_a_utilization(threshold):
    with pytest.raises(ValueError, match=r"utilization in \(0, 1\]"):
        HeterogeneityAware(threshold=threshold)
