"""Issue #27: the nbtune page on the Dask dashboard names lanes by what they are: a worker's
GPUs ``GPU k``, a CPU worker's slots (stand-ins for GPUs) ``slot k``, never GPUs."""

from __future__ import annotations

from types import SimpleNamespace

import nbtune
from nbtune.runtimes.dask.dask_page import snapshot
from nbtune.runtimes.dask.driver_side.cluster import Slot
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload


def lanes(kind: str, gone: bool = False) -> set[str]:
    exp = nbtune.tune(SyntheticWorkload({"lr": nbtune.loguniform(1e-4, 1e-1)}),
                      algorithm="random", metric="loss", max_budget=3, num_trials=4, seed=0,
                      runtime=SimRuntime(cluster=2))
    slots = {} if gone else {g: Slot(g, "tcp://a:1", g, "a", None, 1.0, kind) for g in (0, 1)}
    inventory = SimpleNamespace(slots=slots, workers={"tcp://a:1": {"name": "w0"}})
    return set(snapshot(exp.engine, inventory, "t", exp.makespan)["lanes"]["lane"])


def test_a_cpu_workers_slots_are_slots_not_gpus():
    assert lanes("cpu") == {"worker w0", "worker w0 slot 1"}


def test_a_workers_gpus_are_gpus():
    assert lanes("NVIDIA A100") == {"worker w0 GPU 0", "worker w0 GPU 1"}


def test_a_lane_of_a_worker_gone_says_no_gpu():
    assert lanes("cpu", gone=True) == {"lane 0", "lane 1"}
