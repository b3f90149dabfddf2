"""Real stores for the server-extension and browser tests, written by real simulated runs.

``finished_run`` lets the simulator run an experiment to the end with a store;
``interrupted_run`` stops the simulator after ``events`` events (its runaway
guard), which leaves the store exactly as a kernel killed mid-run leaves it:
experiment ``running``, trials ``running`` and their GPU allocations open.
"""

from __future__ import annotations

from pathlib import Path

import nbtune
from nbtune.core.resources import ClusterSpec
from nbtune.experiment import Experiment
from nbtune.runtimes.sim import SimRuntime, SimulationError
from nbtune.workloads import SyntheticWorkload

SPACE = {"lr": nbtune.loguniform(1e-4, 1e-1)}


def cpu_workers(n: int) -> ClusterSpec:
    """``n`` CPU workers standing in for GPUs, as the Dask runtime has them without a GPU."""
    return ClusterSpec.homogeneous(n, kind="cpu")


def finished_run(store: Path, name: str, *, mode: str = "min", seed: int = 1,
                 num_trials: int = 8, gpus: int | ClusterSpec = 2) -> Experiment:
    return nbtune.tune(SyntheticWorkload(SPACE), algorithm="asha", metric="loss", mode=mode,
                       max_budget=9, num_trials=num_trials, store=store, name=name, seed=seed,
                       runtime=SimRuntime(cluster=gpus))


def interrupted_run(store: Path, name: str, *, gpus: int | ClusterSpec = 3, events: int = 40,
                    seed: int = 1) -> None:
    """An ASHA run on ``gpus`` whole GPUs cut off while every GPU holds a trial."""
    try:
        nbtune.tune(SyntheticWorkload(SPACE), algorithm="asha", metric="loss",
                    max_budget=27, num_trials=30, store=store, name=name, seed=seed,
                    runtime=SimRuntime(cluster=gpus, max_events=events))
    except SimulationError:
        return
    raise AssertionError(f"{name}: the simulation finished within {events} events; "
                         "raise num_trials so it is still running when cut off")
