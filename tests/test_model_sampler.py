"""HyperSack's Sampler: unique models found, the unknown ones profiled once, the history read."""

from __future__ import annotations

import pytest

import nbtune
from nbtune import SimRuntime
from nbtune.allocators.profiling import InMemoryProfileStore, model_signature
from nbtune.core.resources import ClusterSpec, Demand
from nbtune.core.space import choice, grid, loguniform
from nbtune.model_sampler import sample_models, unique_models
from nbtune.runtimes.model_key import model_key
from nbtune.runtimes.profiler import Profiler
from nbtune.workloads.interference import InterferenceWorkload

SPACE = {"model": grid(["a", "b", "c"]), "batch_size": choice([64, 128]),
         "lr": loguniform(1e-4, 1e-1), "wd": grid([0.1, 0.2])}
UTIL = {"a": 0.2, "b": 0.3, "c": 0.4}


def workload() -> InterferenceWorkload:
    return InterferenceWorkload(
        SPACE, launch_overhead=5.0,
        unit_time=lambda c: {"a": 4.0, "b": 6.0, "c": 8.0}[c["model"]] * 128 / c["batch_size"],
        demand=lambda c: Demand(compute=UTIL[c["model"]], memory_gb=2.0),
    )


def runtime(hist: InMemoryProfileStore) -> SimRuntime:
    return SimRuntime(cluster=ClusterSpec.homogeneous(2), profiler=Profiler(hist))


def test_unique_models_one_config_per_signature() -> None:
    models = unique_models(SPACE, seed=1)
    assert sorted((c["model"], c["batch_size"]) for c in models) == sorted(
        (m, b) for m in "abc" for b in (64, 128))
    assert all(1e-4 <= c["lr"] <= 1e-1 and c["wd"] in (0.1, 0.2) for c in models)
    only_model = unique_models(SPACE, signature_keys=["model"])
    assert [c["model"] for c in only_model] == ["a", "b", "c"]


def test_sampler_profiles_unknown_models_once_then_finds_them() -> None:
    hist = InMemoryProfileStore()
    wl = workload()
    exp = sample_models(wl, SPACE, runtime=runtime(hist), budget=0.5, metric="loss",
                        mode="min")
    assert exp is not None and len(exp.engine.trials) == 6
    assert exp.makespan > 0  # the sampler's cost: six launches on two GPUs
    assert len(hist) == 6
    for cfg in unique_models(SPACE):
        prof = hist.get(f"{model_key(wl)}|{model_signature(cfg)}")
        assert prof is not None and prof.unit_time > 0
        assert prof.demand.compute == pytest.approx(UTIL[cfg["model"]])
    # the next sampler finds every model in the job history and runs nothing
    assert sample_models(wl, SPACE, runtime=runtime(hist), budget=0.5, metric="loss",
                         mode="min") is None


def test_search_after_the_sampler_packs_from_the_start() -> None:
    """Knapsack places an unmeasured model on a whole GPU; after the sampler it packs."""
    def first_placements(hist: InMemoryProfileStore) -> int:
        exp = nbtune.tune(workload(), algorithm="grid", metric="loss", mode="min",
                          max_budget=2, allocator="knapsack-wfd", runtime=runtime(hist))
        a = exp.allocations()
        return int((a["start"] <= a["start"].min()).sum())

    hist = InMemoryProfileStore()
    cold = first_placements(InMemoryProfileStore())
    sample_models(workload(), SPACE, runtime=runtime(hist), budget=0.5, metric="loss",
                  mode="min")
    assert cold == 2  # one trial per GPU: nothing known
    assert first_placements(hist) > cold


def test_sampler_needs_a_job_history() -> None:
    with pytest.raises(ValueError, match="job history"):
        sample_models(workload(), SPACE, runtime=SimRuntime(cluster=2), metric="loss")
