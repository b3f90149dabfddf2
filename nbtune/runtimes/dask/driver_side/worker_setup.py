"""Readying a freshly joined cluster's workers for trials.

Once :func:`.cluster.connect` has a client, the workers are probed for GPUs and
take the worker plugins (the MPS daemon, the warm process pool). The warm
processes are not waited for: ``tune()`` returns once workers are up,
and a first trial that finds no ready process takes the one being started
(:meth:`.pool.WarmPool.take`), so start-up costs a user the imports once, while
the experiment already runs, not the imports plus a wait in front of it.

A worker may die at any point of this (a nanny restarts it, a spot node goes
away): a broadcast that meets a dead worker is not an error of the experiment.
Plugins stay registered with the scheduler for the workers that come later,
and a worker lost once the experiment runs is the driver's to handle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from nbtune.runtimes.dask.driver_side.cluster import Inventory

__all__ = ["LAST_PHASES", "local_cpu_start", "preload_trainable", "prepare_workers",
           "tolerate_lost_workers", "trainable_imports", "worker_plugins"]

log = logging.getLogger("nbtune.dask")

#: seconds per step of this process's latest :func:`prepare_workers` (diagnostics)
LAST_PHASES: dict[str, float] = {}


def worker_plugins(gpus: bool | None, mps: bool | None, warm_processes: int,
                   preload: tuple[str, ...], fork_server: str | None = None) -> list[Any]:
    """The worker plugins, in the order they must run on every worker.

    The MPS daemon first: it exports ``CUDA_MPS_PIPE_DIRECTORY`` into the
    worker's environment, which the warm pool's processes inherit when they
    are spawned; filled before it, the first warm processes would never
    join MPS.
    """
    from nbtune.runtimes.dask import gpu
    from nbtune.runtimes.dask.worker_side.plugin import WarmPoolPlugin

    plugins: list[Any] = []
    if gpus and mps:
        plugins.append(gpu.MPSDaemonPlugin())
    plugins.append(WarmPoolPlugin(warm_processes, preload, None if gpus else fork_server))
    return plugins


def local_cpu_start(cluster: Any, gpus: bool | None, warm_processes: int,
                    preload: tuple[str, ...]) -> tuple[Any, list[Any] | None]:
    """For a local CPU cluster about to start: ``(fork server, the workers' first plugins)``.

    The fork server (:mod:`.forkserver`) starts importing ``preload`` now, while
    the cluster comes up, once for all workers; the warm pool plugin, given to
    the workers at their start, has them ask it for processes as soon as they
    run. Any other cluster: ``(None, None)``, and plugins come in
    :func:`prepare_workers` (a GPU one's after the MPS daemon's).
    """
    from nbtune.runtimes.dask.forkserver_side.forkserver import ForkServer, supported, take_early
    from nbtune.runtimes.dask.trial_env import worker_env

    if cluster is not None or gpus or warm_processes <= 0:
        return None, None
    if not supported():  # the workers start their processes, from their own start
        return None, worker_plugins(False, False, warm_processes, preload)

    forks = take_early(preload) or ForkServer(preload, worker_env())  # tune() may have started it
    return forks, worker_plugins(False, False, warm_processes, preload, forks.address)


def prepare_workers(client: Any, gpus: bool | None, mps: bool | None, warm_processes: int,
                    preload: tuple[str, ...], speeds: Any = None,
                    phases: dict[str, float] | None = None, fork_server: str | None = None,
                    ) -> tuple[bool, bool | None, Inventory]:
    """Wait for a worker, settle GPU and MPS mode, install the plugins: ``(gpus, mps, inventory)``.

    ``gpus`` None (an existing cluster): GPU mode if its workers see GPUs;
    ``mps`` None: on where GPUs are used and MPS is available. The seconds
    each step took (``workers``, ``plugins``) go to ``phases``
    (default :data:`LAST_PHASES`): start-up is what a user waits for before the
    first trial, and ``benchmarks/startup.py`` reports where it goes.
    """
    from nbtune.runtimes.dask import gpu

    if phases is None:
        phases = LAST_PHASES
        phases.clear()
    t0 = time.perf_counter()
    client.wait_for_workers(1, timeout=120)
    if gpus is None:  # an existing cluster: GPU mode if its workers see GPUs
        probe = Inventory(gpus=True)
        probe.refresh(client)
        gpus = bool(probe.slots)
    gpus = bool(gpus)
    if mps is None:
        mps = gpus and gpu.mps_available()
    inventory = Inventory(gpus, speeds)  # speeds: DaskRuntime(gpu_speeds=...)
    inventory.refresh(client)
    if not inventory.slots:
        raise RuntimeError(
            f"the Dask cluster at {client.scheduler.address} offers no "
            f"{'GPUs' if gpus else 'workers'} to run trials on"
        )
    t1 = time.perf_counter()
    phases["workers"] = t1 - t0
    for plugin in worker_plugins(gpus, mps, warm_processes, preload, fork_server):
        tolerate_lost_workers(lambda p=plugin: client.register_plugin(p, name=p.name),
                              f"installing {plugin.name}")
    t2 = time.perf_counter()
    phases["plugins"] = t2 - t1
    return gpus, mps, inventory


def preload_trainable(client: Any, trainable: Any) -> None:
    """Have every worker's warm processes import the modules ``trainable`` uses, now.

    Its first trial in a fresh process then does not import them inside its
    first epoch (scikit-learn and the data set's module can be a large part of a
    short first epoch). Fire and forget: a failure here only means they are
    imported by the trial itself.
    """
    from nbtune.runtimes.dask.worker_side.pool import pool_imports

    try:
        modules = trainable_imports(trainable)
        if modules:
            client.run(pool_imports, modules, wait=False)
    except Exception as exc:  # noqa: BLE001 - an optimisation must never fail an experiment
        log.debug("preloading the trainable's modules failed: %r", exc)


def trainable_imports(trainable: Any) -> list[str]:
    """The modules a trial process imports ahead of ``trainable``'s jobs
    (:func:`~nbtune.core.code_names.modules_used`), less those cloudpickle sends by value.

    A module registered with ``cloudpickle.register_pickle_by_value`` (a notebook's
    helpers, a test module) reaches the trial inside the pickled function: the
    trial never imports it, so importing it ahead would only cost every new trial
    process that module's own imports. Trials that wait at a rung keep their
    process, so each next trial starts a new one and would pay them again.
    """
    import cloudpickle

    from nbtune.core.code_names import modules_used

    by_value = cloudpickle.list_registry_pickle_by_value()
    return [m for m in modules_used(trainable)
            if not any(m == v or m.startswith(v + ".") for v in by_value)]


def tolerate_lost_workers(call: Callable[[], Any], what: str, attempts: int = 3) -> Any:
    """Run a cluster-wide ``call``, again if a worker's connection closed during it.

    The scheduler's broadcasts (``register_plugin``) raise when one worker dies
    mid-broadcast, though the plugin is already recorded for every worker that
    joins later; the retry reaches the live ones. A comm error that persists
    (the scheduler itself is gone) is raised on the last attempt.
    """
    for attempt in range(attempts):
        try:
            return call()
        except OSError as exc:  # CommClosedError is an OSError
            if attempt == attempts - 1:
                raise
            log.warning("a worker was lost while %s (%r); trying again", what, exc)
    return None
