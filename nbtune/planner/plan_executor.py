"""Carry a RubberBand plan out on a Dask cluster: resize at stage boundaries, meter the bill.

:class:`PlanExecutor` runs beside the Dask runtime's driver. Every ``poll_s``
it reads which stage the :class:`~nbtune.planner.allocator.PlannedAllocator`
has reached and sizes the cluster for it: ``cluster.scale(n)`` to grow (the
runtime sees the new workers join and the engine places the waiting trials on
them), and to shrink, ``client.retire_workers`` on idle workers the allocator
no longer uses, then ``cluster.scale(n)`` so the cluster does not start them
again. A worker that still hosts a trial is never retired, so nothing a trial
has reported is lost; if a worker goes away anyway (retired by someone else,
killed), the runtime requeues its trial from its checkpoint and the executor
scales back up to the plan.

It works with any Dask cluster object with ``scale(n)`` (``LocalCluster``,
dask-jobqueue, dask-kubernetes, dask-cloudprovider). Workers stand for GPUs
(one slot each), so an instance of ``g`` GPUs is ``g`` workers.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbtune.planner.allocator import PlannedAllocator
from nbtune.planner.plan import Plan
from nbtune.planner.profiles import CloudProfile

if TYPE_CHECKING:
    from nbtune.runtimes.dask.driver_side.runtime import DaskRuntime

__all__ = ["CostMeter", "PlanExecutionError", "PlanExecutor", "check_plan_fits", "predicted_vs_actual"]

log = logging.getLogger("nbtune.planner")


class PlanExecutionError(RuntimeError):
    """The plan cannot be carried out on this runtime or cluster."""


@dataclass
class CostMeter:
    """Worker-seconds billed as the cloud bills them, from observed worker lifetimes.

    Per-instance billing: each worker (one GPU's share of an instance) is
    charged from when it joined until it left, at least ``min_billed_s``, at
    ``price_per_hour / gpus_per_instance``. Per-function billing charges the
    GPU-seconds trials used instead (see :meth:`function_cost`).
    """

    cloud: CloudProfile
    #: every worker life seen, ``[joined, left or None]`` (a worker may come back)
    lives: list[list[float | None]] = field(default_factory=list)
    _open: dict[str, list[float | None]] = field(default_factory=dict)

    def observe(self, now: float, workers: set[str]) -> None:
        for w in workers:
            if w not in self._open:
                self._open[w] = [now, None]
                self.lives.append(self._open[w])
        for w in [w for w in self._open if w not in workers]:
            self._open.pop(w)[1] = now

    def close(self, now: float) -> None:
        for life in self._open.values():
            life[1] = now
        self._open.clear()

    def _held(self, now: float) -> list[float]:
        return [(end if end is not None else now) - start  # type: ignore[operator]
                for start, end in self.lives]

    def worker_seconds(self, now: float) -> float:
        return sum(self._held(now))

    def cost(self, now: float) -> float:
        """The bill so far (open lives counted up to ``now``, minimum charge applied)."""
        rate = self.cloud.price_per_gpu_second
        return sum(max(h, self.cloud.min_billed_s) for h in self._held(now)) * rate

    def function_cost(self, gpu_seconds: float) -> float:
        return gpu_seconds * self.cloud.price_per_gpu_second


class PlanExecutor:
    """Follow ``plan`` on ``runtime``'s cluster; :attr:`timeline` records what happened."""

    def __init__(self, plan: Plan, runtime: DaskRuntime, *, cluster: Any = None,
                 poll_s: float = 0.1, scale_timeout_s: float = 120.0,
                 recover_after_s: float = 5.0) -> None:
        if not isinstance(plan, Plan):
            raise TypeError(f"plan must be an nbtune.planner.Plan, got {type(plan).__name__}")
        if not hasattr(runtime, "connect") or not hasattr(runtime, "clock"):
            raise PlanExecutionError(
                "a plan runs on the Dask runtime: pass runtime='dask' or a DaskRuntime")
        self.plan = plan
        self.runtime = runtime
        self.allocator = PlannedAllocator(plan)
        self.meter = CostMeter(plan.cloud)
        self.poll_s = float(poll_s)
        self.scale_timeout_s = float(scale_timeout_s)
        self.recover_after_s = float(recover_after_s)
        self._asked_at = 0.0
        self._last_workers: dict[str, Any] = {}
        self._cluster_arg = cluster
        self.cluster: Any = None
        #: ``(seconds, workers, target workers, stage)`` whenever one of them changed
        self.timeline: list[tuple[float, int, int, int]] = []
        #: ``(seconds, stage)`` when the executor first saw each stage
        self.stage_starts: list[tuple[float, int]] = []
        self.retired: list[str] = []
        #: when the executor asked for workers again after losing some
        self.recoveries: list[float] = []
        self.end_s: float | None = None
        #: seconds :meth:`prepare` took to size the cluster for stage 0 (the plan's first
        #: SCALE + INIT_INSTANCE), before the experiment's clock started
        self.prepare_s = 0.0
        self._scaled_to: int | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------ targets
    def target_workers(self, stage: int) -> int:
        return self.plan.allocation.instances[stage] * self.plan.cloud.gpus_per_instance

    def _now(self) -> float:
        """The run's end once it ended (even before this thread noticed), else the clock."""
        if self.end_s is not None:
            return self.end_s
        eng = self.runtime.engine
        return eng.time if eng is not None and eng.done else self.runtime.clock.now()

    @property
    def jct(self) -> float | None:
        """Measured JCT comparable with the plan's: preparing stage 0 plus the run."""
        eng = self.runtime.engine
        if self.end_s is None and (eng is None or not eng.done):
            return None
        return self.prepare_s + self._now()

    @property
    def cost(self) -> float:
        """Metered cost so far (final once the experiment ended)."""
        now = self._now()
        if self.plan.cloud.billing == "function":
            eng = self.runtime.engine
            return self.meter.function_cost(
                sum(t.gpu_seconds for t in eng.trials.values()) if eng else 0.0)
        return self.meter.cost(now)

    # -------------------------------------------------------- lifecycle
    def predicted_vs_actual(self) -> Any:
        """The plan's prediction beside this run's measurements (``Experiment.plan()``)."""
        return predicted_vs_actual(self)

    def prepare(self) -> None:
        """Connect and size the cluster for stage 0 before the experiment's clock starts."""
        rt = self.runtime
        rt.connect()
        cluster = self._cluster_arg
        if cluster is None:
            arg = getattr(rt, "cluster_arg", None)
            cluster = arg if hasattr(arg, "scale") else getattr(rt, "dask_cluster", None)
        if cluster is None or not hasattr(cluster, "scale"):
            raise PlanExecutionError(
                "carrying out a plan needs a Dask cluster object that scales (LocalCluster, "
                "dask-jobqueue, dask-kubernetes ...): pass it as DaskRuntime(cluster) or as "
                "plan_cluster, not a Client or a scheduler address")
        self.cluster = cluster
        n0 = self.target_workers(0)
        t0 = time.monotonic()
        cluster.scale(n0)
        self._scaled_to = n0
        rt.client.wait_for_workers(n0, timeout=self.scale_timeout_s)
        self._shrink_to(n0, set())
        if getattr(rt, "warm_processes", 0):  # INIT_INSTANCE: the new workers' imports
            from nbtune.runtimes.dask.worker_side.pool import wait_pool_ready

            rt.client.run(wait_pool_ready, self.scale_timeout_s)
        self.prepare_s = time.monotonic() - t0

    def start(self) -> None:
        """Follow the plan from now on; stage 0's workers are billed from :meth:`prepare`."""
        self.meter.observe(-self.prepare_s, set(self._workers()))
        self._thread = threading.Thread(target=self._loop, name="nbtune-plan", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        self._stop.set()
        self.join(10)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set() and not self.runtime.done:
                try:
                    self._tick()
                except Exception:  # a failed resize must not take the experiment down
                    log.exception("plan executor: resize failed (retried)")
                self._stop.wait(self.poll_s)
        finally:
            eng = self.runtime.engine
            self.end_s = eng.time if eng is not None and eng.done else self.runtime.clock.now()
            self.meter.close(self.end_s)

    # ------------------------------------------------------------ a tick
    def _workers(self) -> dict[str, Any]:
        """Workers the scheduler lists now (an empty answer while the runtime still knows
        workers is a torn read, not every worker leaving: the last answer stands)."""
        workers = dict(self.runtime.client.scheduler_info(n_workers=-1)["workers"])
        inv = self.runtime.inventory
        if not workers and inv is not None and inv.workers and self._last_workers:
            return self._last_workers
        self._last_workers = workers
        return workers

    def _busy_workers(self) -> set[str]:
        """Workers hosting a running trial or a live trial process (never retired)."""
        rt = self.runtime
        for _ in range(5):  # the driver thread mutates these dicts: retry a torn read
            try:
                slots = dict(rt.inventory.slots) if rt.inventory is not None else {}
                busy = {slots[g].worker for p in rt.placements().values()
                        for g, _ in p if g in slots}
                for run in list(rt.runs.values()):
                    busy |= {r.worker for r in run.ranks if not r.exited}
                return busy
            except RuntimeError:
                time.sleep(0.01)
        return set(self._workers())  # unsure: treat every worker as busy

    def _tick(self) -> None:
        now = self.runtime.clock.now()
        workers = self._workers()
        self.meter.observe(now, set(workers))
        stage = self.allocator.stage
        if not self.stage_starts or self.stage_starts[-1][1] != stage:
            self.stage_starts.append((now, stage))
        target = self.target_workers(stage)
        row = (len(workers), target, stage)
        if not self.timeline or self.timeline[-1][1:] != row:
            self.timeline.append((now, *row))
        if len(workers) < target and self._scaled_to != target:
            self.cluster.scale(target)  # the runtime sees them join; the engine places on them
            self._scaled_to = target
            self._asked_at = now
        elif len(workers) < target and now - self._asked_at > self.recover_after_s:
            # a worker was lost and the cluster still counts it: drop it, then regrow
            self.cluster.scale(len(workers))
            self.cluster.scale(target)
            self._asked_at = now
            self.recoveries.append(now)
        elif len(workers) > target:
            self._shrink_to(target, self._busy_workers())

    def _shrink_to(self, target: int, busy: set[str]) -> None:
        """Retire idle workers outside the GPUs the allocator may use, then rescale."""
        rt = self.runtime
        workers = self._workers()
        excess = len(workers) - target
        if excess <= 0:
            return
        slots = sorted(rt.inventory.slots.values(), key=lambda s: s.gpu_id) \
            if rt.inventory is not None else []
        keep = {s.worker for s in slots[:target]}
        victims = [w for w in workers if w not in keep and w not in busy][:excess]
        if not victims:
            return
        names = {workers[w].get("name") for w in victims}
        rt.client.retire_workers(workers=victims, close_workers=True, remove=True)
        self.retired.extend(victims)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # let the cluster see them gone before rescaling
            info = getattr(self.cluster, "scheduler_info", {}) or {}
            live = {w.get("name") for w in info.get("workers", {}).values()}
            if not names & live:
                break
            time.sleep(0.05)
        left = len(workers) - len(victims)
        with contextlib.suppress(Exception):
            # rescaled to ``target``, a SpecCluster closes the newest workers by *name*: with a
            # busy excess worker spared above, that can be the busy one (a held SHA trial's
            # worker would go). Its spec forgets exactly the retired workers; the busy one is
            # retired at a later tick, once idle
            spec = getattr(self.cluster, "worker_spec", None)
            if isinstance(spec, dict):
                for name in names:
                    spec.pop(name, None)
                left = len(spec)
            self.cluster.scale(left)
        self._scaled_to = left


def check_plan_fits(plan: Plan, algorithm: Any) -> None:
    """The plan must be for this algorithm's stages, in the order they will run."""
    from nbtune.planner.spec import spec_from

    if getattr(algorithm, "pipeline_brackets", False):
        raise PlanExecutionError(
            "a plan runs brackets one after another: pass pipeline_brackets=False")
    spec = spec_from(algorithm)
    want = [(s.trials, s.iterations) for s in spec.stages]
    have = [(s.trials, s.iterations) for s in plan.spec.stages]
    if want != have:
        raise PlanExecutionError(
            f"the plan was made for stages {have} but the algorithm runs {want}: plan with "
            f"nbtune.planner.spec_from(<the same algorithm and options>)")


def predicted_vs_actual(executor: PlanExecutor) -> Any:
    """The plan's predicted JCT and cost beside what the run measured (a DataFrame)."""
    import pandas as pd

    p = executor.plan.planned
    rows = {
        "JCT (s)": (p.jct, executor.jct),
        "cost ($)": (p.cost, executor.cost),
        "max workers": (max(p.instances) * executor.plan.cloud.gpus_per_instance,
                        max((r[1] for r in executor.timeline), default=None)),
    }
    df = pd.DataFrame(rows, index=["predicted", "measured"]).T
    df["error"] = [(m / pr - 1) if (m is not None and pr) else None for pr, m in rows.values()]
    return df
