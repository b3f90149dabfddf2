"""Measure the planner's inputs on a real cluster (RubberBand §5's profiling step).

Before planning, RubberBand trains a few iterations and times how long a new
instance takes to become usable. :func:`measure_worker_start` times
``cluster.scale(n + 1)`` until the new worker is registered and its warm
processes have finished their imports (SCALE + INIT_INSTANCE);
:func:`measure_profile` trains a few trials for a few iterations on the
runtime's workers, side by side as a stage would, and turns the measured
seconds per iteration, their spread and the launch overhead into a
:class:`~nbtune.planner.profiles.ScalingProfile` at one worker per trial.
Wider trials (distributed data parallel) add points with
:meth:`ScalingProfile.from_measurements` from runs at those widths.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nbtune.planner.profiles import Latency, ScalingProfile

if TYPE_CHECKING:
    from nbtune.runtimes.dask.driver_side.runtime import DaskRuntime

__all__ = ["measure_profile", "measure_worker_start", "profile_from_experiment"]


def measure_worker_start(runtime: DaskRuntime, cluster: Any, *, timeout: float = 120.0) -> Latency:
    """Seconds from ``cluster.scale(n + 1)`` until the new worker can run a trial.

    ``runtime`` must be connected (``runtime.connect()``) so its warm-pool plugin
    reaches the new worker; the cluster keeps the extra worker.
    """
    from nbtune.runtimes.dask.worker_side.pool import wait_pool_ready

    client = runtime.client
    n = len(client.scheduler_info(n_workers=-1)["workers"])
    t0 = time.monotonic()
    cluster.scale(n + 1)
    client.wait_for_workers(n + 1, timeout=timeout)
    if getattr(runtime, "warm_processes", 0):
        client.run(wait_pool_ready, timeout)
    return Latency(time.monotonic() - t0)


def measure_profile(train: Any, space: Mapping[str, Any], runtime: DaskRuntime, *, trials: int = 6,
                    iterations: int = 3, metric: str = "loss", mode: str = "min",
                    seed: int = 0, timeout: float = 600.0) -> ScalingProfile:
    """Seconds per iteration (mean, cv) and launch overhead of ``train`` on ``runtime``.

    Runs ``trials`` random configurations for ``iterations`` each (the runtime
    runs as many side by side as it has workers) and reads the engine's report
    times: the gaps between reports are iterations; the first report after a
    launch, less one iteration, is the launch overhead. The runtime is used up
    (a runtime runs one experiment).
    """
    from nbtune.algorithms import RandomSearch
    from nbtune.allocators import make_allocator
    from nbtune.engine.engine import Engine

    if trials < 1 or iterations < 2:
        raise ValueError("measure at least one trial for at least two iterations")
    algo = RandomSearch(dict(space), metric=metric, mode=mode, max_budget=iterations,
                        num_trials=trials, seed=seed)
    engine = Engine(algo, make_allocator("fifo"))
    runtime.start(engine, train)
    if not runtime.wait(timeout):
        raise TimeoutError(f"profiling did not finish in {timeout} s")
    return profile_from_experiment(engine)


def profile_from_experiment(run: Any) -> ScalingProfile:
    """The one-worker profile a finished run (an Experiment or its Engine) measured.

    Gaps between reports of one segment (one launch) are iterations; a launch's
    first report, less one iteration, is the launch overhead. Gaps across a
    pause (a trial waiting at a rung's barrier) are left out.

    Replaying a plan with the profile of the run that carried it out separates the
    model's error from a profile gone stale (a machine whose load changed).
    """
    engine = getattr(run, "engine", run)
    launched: dict[int, dict[float, int]] = {}  # trial -> launch start -> first GPU
    for rec in engine.ledger.log:  # one record per launch (and per resize) of a trial
        launched.setdefault(rec.trial_id, {}).setdefault(rec.start, rec.gpu_id)
    first_on_gpu: dict[int, float] = {}  # a worker's first launch is its cold start
    for starts in launched.values():
        for start, gpu in starts.items():
            first_on_gpu[gpu] = min(first_on_gpu.get(gpu, start), start)
    cold_launches = set(first_on_gpu.items())
    units: list[float] = []
    warm: list[float] = []
    cold: list[float] = []
    for t in engine.trials.values():
        starts = sorted(launched.get(t.trial_id, {}))
        times = [s for s, _, _ in t.results]
        for k, start in enumerate(starts):  # a gap across a pause is not an iteration
            end = starts[k + 1] if k + 1 < len(starts) else float("inf")
            seg = [x for x in times if start < x <= end]  # a report closes its segment
            if seg:
                gpu = launched[t.trial_id][start]
                (cold if (gpu, start) in cold_launches else warm).append(seg[0] - start)
                units += [b - a for a, b in zip(seg, seg[1:], strict=False)]
    if not units:
        raise RuntimeError("no trial reported twice: nothing to measure (did they fail?)")
    mean = statistics.fmean(units)
    if warm:  # later launches on a worker vs its first: a per-launch and a per-worker cost
        startup = max(statistics.fmean(warm) - mean, 0.0)
        cold_start = max(statistics.fmean(cold) - mean - startup, 0.0) if cold else 0.0
    else:  # every launch was a worker's first: they cannot be told apart
        startup, cold_start = max(statistics.fmean(cold) - mean, 0.0), 0.0
    return ScalingProfile(
        {1: mean}, cv=statistics.pstdev(units) / mean, startup_s=startup,
        cold_start_s=cold_start,
        source=f"measured: {len(units)} iterations of {len(warm) + len(cold)} launches "
               f"({len(cold)} the first on their worker)",
    )
