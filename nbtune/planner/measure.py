"""Measure the planner's inputs on a real cluster (RubberBand §5's profiling step).

Before planning, RubberBand trains a few iterations and times how long a new
instance takes to become usable. :func:`measure_worker_start` times
``cluster.scale(n + 1)`` until the new worker is registered and its warm
processes have finished their imports (SCALE + INIT_INSTANCE), and
:func:`measure_ready` the workers already there until theirs have (a plan's
instances held from the start);
:func:`measure_profile` trains a few trials for a few iterations on the
runtime's workers, side by side as a stage would, and turns the measured
seconds per iteration, their spread and the launch overhead into a
:class:`~nbtune.planner.profiles.ScalingProfile` at one worker per trial.
Wider trials (distributed data parallel) add points with
:meth:`ScalingProfile.from_measurements` from runs at those widths.
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nbtune.planner.profiles import Latency, ScalingProfile

if TYPE_CHECKING:
    from nbtune.runtimes.dask.driver_side.runtime import DaskRuntime

__all__ = ["measure_profile", "measure_ready", "measure_worker_start", "profile_from_experiment"]


def measure_worker_start(runtime: DaskRuntime, cluster: Any, *, timeout: float = 120.0) -> Latency:
    """Seconds from ``cluster.scale(n + 1)`` until the new worker can run a trial.

    ``runtime`` must be connected (``runtime.connect()``) so its warm-pool plugin
    reaches the new worker; the cluster keeps the extra worker. Called once the workers
    there are ready (:func:`measure_ready`) it times a new worker alone; called right
    after ``connect()`` it times the workers there and the new one setting up at once,
    as a plan's run does when it starts one beside the held ones: on one host (a local
    cluster) they share the cores, and the ratio of the two is
    :attr:`~nbtune.planner.profiles.CloudProfile.shared_init`.
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


def measure_ready(runtime: DaskRuntime, *, timeout: float = 120.0) -> Latency:
    """Seconds from now until the workers the runtime's cluster already has can run a trial
    (their warm processes' imports done): call it right after ``runtime.connect()``, as a
    plan's run starts (:meth:`~nbtune.planner.plan_executor.PlanExecutor.prepare`). What
    :func:`~nbtune.planner.plan` takes as ``held_ready`` for the instances already held."""
    from nbtune.runtimes.dask.worker_side.pool import wait_pool_ready

    t0 = time.monotonic()
    if getattr(runtime, "warm_processes", 0):
        runtime.client.run(wait_pool_ready, timeout)
    return Latency(time.monotonic() - t0)


def measure_profile(train: Any, space: Mapping[str, Any], runtime: DaskRuntime, *, trials: int = 6,
                    iterations: int = 3, metric: str = "loss", mode: str = "min",
                    seed: int = 0, alone: int = 2, timeout: float = 600.0) -> ScalingProfile:
    """Seconds per iteration (mean, cv) and launch overhead of ``train`` on ``runtime``.

    Runs ``trials`` random configurations for ``iterations`` each and reads the
    engine's report times (:func:`profile_from_experiment`): the first ``alone``
    one at a time, the rest as many side by side as the runtime has workers, so
    that workers sharing one machine (a local cluster) are measured both ways:
    alone, and slowed down by each other (:attr:`ScalingProfile.shared`). The
    runtime is used up (a runtime runs one experiment).
    """
    from nbtune.algorithms import RandomSearch
    from nbtune.allocators import make_allocator
    from nbtune.core import events as ev
    from nbtune.engine.engine import Engine

    if trials < 1 or iterations < 2:
        raise ValueError("measure at least one trial for at least two iterations")
    if not 0 <= alone <= trials:
        raise ValueError(f"alone must be between 0 and trials ({trials}), got {alone}")
    algo = RandomSearch(dict(space), metric=metric, mode=mode, max_budget=iterations,
                        num_trials=trials, seed=seed)
    engine = Engine(algo, make_allocator("fifo"))
    if alone:
        engine.max_concurrent = 1
        lifted: list[bool] = []

        def lift_the_cap(events: Any, commands: Any) -> None:  # on the engine's thread
            ended = sum(t.state.is_terminal for t in engine.trials.values())
            if ended >= alone and not lifted:
                lifted.append(True)
                runtime.submit(ev.ConcurrencyChanged(runtime.clock.now(), None))

        engine.subscribe(lift_the_cap)
    runtime.start(engine, train)
    if not runtime.wait(timeout):
        raise TimeoutError(f"profiling did not finish in {timeout} s")
    return profile_from_experiment(engine)


def profile_from_experiment(run: Any) -> ScalingProfile:
    """The one-worker profile a finished run (an Experiment or its Engine) measured.

    Gaps between reports of one segment (one launch) are iterations; a launch's
    first report, less one iteration, is the launch overhead. Gaps across a
    pause (a trial waiting at a rung's barrier) are left out. Each iteration
    is counted with the number of workers training at its midpoint (the
    run's placements): ``points[1]`` is the mean of those that ran alone and
    :attr:`~ScalingProfile.shared` how much slower the others ran; a run that
    never had one alone gives the mean of all, and no ``shared``.

    Replaying a plan with the profile of the run that carried it out separates the
    model's error from a profile gone stale (a machine whose load changed).
    """
    engine = getattr(run, "engine", run)
    log = list(engine.ledger.log)
    launched: dict[int, dict[float, int]] = {}  # trial -> launch start -> first GPU
    for rec in log:  # one record per launch (and per resize) of a trial
        launched.setdefault(rec.trial_id, {}).setdefault(rec.start, rec.gpu_id)
    first_on_gpu: dict[int, float] = {}  # a worker's first launch is its cold start
    for starts in launched.values():
        for start, gpu in starts.items():
            first_on_gpu[gpu] = min(first_on_gpu.get(gpu, start), start)
    cold_launches = set(first_on_gpu.items())
    held_from = sorted(r.start for r in log)
    held_until = sorted(r.end for r in log if r.end is not None)

    def training(at: float) -> int:  # placements held at ``at``: workers training then
        return max(bisect.bisect_right(held_from, at) - bisect.bisect_right(held_until, at), 1)

    units: dict[int, list[float]] = {}  # workers training at once -> iteration seconds
    firsts: list[tuple[bool, float, int]] = []  # (a cold start, first report - launch, k)
    for t in engine.trials.values():
        starts = sorted(launched.get(t.trial_id, {}))
        times = [s for s, _, _ in t.results]
        for k, start in enumerate(starts):  # a gap across a pause is not an iteration
            end = starts[k + 1] if k + 1 < len(starts) else float("inf")
            seg = [x for x in times if start < x <= end]  # a report closes its segment
            if seg:
                gpu = launched[t.trial_id][start]
                first = seg[0] - start
                firsts.append(((gpu, start) in cold_launches, first, training(start + first / 2)))
                for a, b in zip(seg, seg[1:], strict=False):
                    units.setdefault(training((a + b) / 2), []).append(b - a)
    if not units:
        raise RuntimeError("no trial reported twice: nothing to measure (did they fail?)")
    means = {k: statistics.fmean(xs) for k, xs in units.items()}
    if 1 in means:
        alone, shared = means[1], {k: m / means[1] for k, m in sorted(means.items()) if k > 1}
    else:  # never one alone: what ran side by side stands for one alone
        alone, shared = statistics.fmean([x for xs in units.values() for x in xs]), {}

    def unit(k: int) -> float:  # an iteration while k workers trained
        return means.get(k, alone) if shared else alone

    warm = [first - unit(k) for cold, first, k in firsts if not cold]
    cold = [first - unit(k) for cold, first, k in firsts if cold]
    if warm:  # later launches on a worker vs its first: a per-launch and a per-worker cost
        startup = max(statistics.fmean(warm), 0.0)
        cold_start = max(statistics.fmean(cold) - startup, 0.0) if cold else 0.0
    else:  # every launch was a worker's first: they cannot be told apart
        startup, cold_start = max(statistics.fmean(cold), 0.0), 0.0
    rel = [x / means[k] for k, xs in units.items() for x in xs] if shared else [
        x / alone for xs in units.values() for x in xs]
    n_alone = len(units.get(1, ()))
    return ScalingProfile(
        {1: alone}, cv=statistics.pstdev(rel), startup_s=startup, cold_start_s=cold_start,
        shared=shared,
        source=f"measured: {sum(map(len, units.values()))} iterations of {len(firsts)} "
               f"launches ({sum(c for c, _, _ in firsts)} the first on their worker; "
               f"{n_alone} iterations alone)",
    )
