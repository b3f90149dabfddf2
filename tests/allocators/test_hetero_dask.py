"""GPU speeds on the Dask runtime: ``DaskRuntime(gpu_speeds=...)`` declares them, so Hydro's
§5.2 rule (a target trial that cannot fill a fast GPU runs on a slower one) acts on a real
cluster. On CPU the declared path is checked by worker name; GPU names by probe data."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from nbtune.core.space import grid
from nbtune.runtimes.dask.driver_side.cluster import Inventory
from nbtune.surrogate import TARGET_ID_BASE

distributed = pytest.importorskip("distributed")

from nbtune.runtimes.dask import DaskRuntime  # noqa: E402
from tests.dask_cluster import local_client  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _gpu_probe(name: str, host: str, devices: list[str]) -> dict:
    return {"name": name, "host": host, "nthreads": 4, "memory_limit": 0, "resources": {},
            "cores": [], "devices": [{"uuid": f"GPU-{name}-{i}", "name": d, "memory_gb": 80.0}
                                     for i, d in enumerate(devices)]}


def test_speeds_match_gpu_names_and_worker_names():
    inv = Inventory(True, {"A100": 2.0, "a100-sxm4": 2.5, "V100": 1.0, "w3": 0.5})
    inv.adopt({"tcp://a:1": _gpu_probe("w1", "a", ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE"]),
               "tcp://b:1": _gpu_probe("w2", "b", ["Tesla V100-SXM2-32GB", "NVIDIA T4"]),
               "tcp://c:1": _gpu_probe("w3", "c", ["NVIDIA A100-PCIE"])})
    speeds = {(g.node, g.kind): g.speed for g in inv.spec().gpus}
    assert speeds == {("a", "NVIDIA A100-SXM4-80GB"): 2.5,  # the longest matching key wins
                      ("a", "NVIDIA A100-PCIE"): 2.0, ("b", "Tesla V100-SXM2-32GB"): 1.0,
                      ("b", "NVIDIA T4"): 1.0,  # undeclared
                      ("c", "NVIDIA A100-PCIE"): 0.5}  # a worker's name beats its GPUs' name
    assert {g.speed for g in Inventory(True).spec().gpus} <= {1.0}


@pytest.mark.parametrize("bad", [{"A100": 0}, {"A100": -1.0}, {"": 1.0}, {"V100": True},
                                 {"V100": "fast"}])
def test_bad_speeds_fail_when_the_runtime_is_made(bad):
    with pytest.raises(ValueError, match="gpu_speeds"):
        DaskRuntime(gpu_speeds=bad)


def train(config, trial):
    """Surrogates train briefly; the target mostly waits (an input-bound full model)."""
    import time

    for step in trial.steps():
        if config["scaling"] == 1:
            time.sleep(0.4)  # a target that leaves its "GPU" (here a CPU core) idle
        else:
            sum(i * i for i in range(20_000))
        trial.report(step=step, loss=config["x"] + 1.0 / step)


@pytest.mark.integration
@pytest.mark.slow
def test_a_target_that_idles_moves_to_the_slower_worker_in_the_next_run(tmp_path):
    import nbtune
    from nbtune.allocators import FifoAllocator, HeterogeneityAware

    allocs, placed, demands = [], [], []
    with local_client() as client:
        rt = DaskRuntime(client, checkpoint_dir=tmp_path / "ckpt", preload=(),
                         sample_interval=0.2, warm_processes=1, gpu_speeds={"0": 2.0})
        try:
            for seed in range(2):  # one store: the second run reads the first's measurement
                alloc = HeterogeneityAware(FifoAllocator())
                exp = nbtune.tune(train, {"x": grid([1.0, 2.0])}, algorithm="grid",
                                  metric="loss", max_budget=8, runtime=rt, seed=seed,
                                  scaling=4, eager_fraction=1.0, allocator=alloc,
                                  store=tmp_path / "s.db")
                assert exp.wait(120)
                # run 1's target must leave utilization samples (3.2 s at 0.2 s; those
                # before its first report are start-up, not demand), or run 2 has nothing
                demands.append({s: p.demand for s, p in exp.engine.hints["profiles"].measured().items()})
                speeds = {g.gpu_id: g.speed for g in exp.engine.cluster.gpus}
                a = exp.allocations()
                allocs.append(alloc)
                placed.append(set(a[a.trial_id >= TARGET_ID_BASE].gpu_id))
        finally:
            rt.close()
    assert sorted(speeds.values()) == [1.0, 2.0]  # worker "0" declared twice as fast
    fast = next(g for g, s in speeds.items() if s == 2.0)
    slow = next(g for g, s in speeds.items() if s == 1.0)
    assert allocs[0].moved == [] and placed[0] == {fast}  # nothing measured: FIFO's GPU
    assert allocs[1].moved and placed[1] == {slow}, demands  # measured idle: the slower worker
