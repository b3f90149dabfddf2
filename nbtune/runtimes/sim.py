"""The discrete-event simulator runtime: the engine's policies on a virtual clock.

An event heap keyed (time, priority, seq) drives the very same
:class:`~nbtune.engine.Engine` the Dask runtime drives. Trials progress at a
*rate* (budget units per second) that the workload model derives from the
placement (Fluid's overhead model, co-location interference); whenever a
placement changes, progress is brought up to date and the next report is
rescheduled, so resizes and packing take effect mid-trial as they would for
real. Stale heap entries are skipped by a per-trial generation number.
"""

from __future__ import annotations

import gc
import heapq
import math
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd

from nbtune.core import events as ev
from nbtune.core.clock import ManualClock
from nbtune.core.commands import Command, Finish, Launch, Pause, Resize, Stop
from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.tolerance import EPS
from nbtune.engine.engine import Engine
from nbtune.runtimes.profiler import Profiler, attach_profiler
from nbtune.workloads.workload_protocol import Neighbor, WorkloadModel

__all__ = ["SimRuntime", "SimulationError"]

_START, _REPORT, _EXTERNAL, _SAMPLE = 0, 1, 2, 3


class SimulationError(RuntimeError):
    pass


#: the cyclic collector's oldest-generation threshold while a simulation runs: never reached
_NO_FULL_PASS = 1 << 30
_gc_lock = threading.Lock()
_gc_users = 0  # simulations running now (in threads)
_gc_saved: tuple[int, ...] = ()  # the thresholds the first of them found


@contextmanager
def _young_collections_only() -> Iterator[None]:
    """Hold off the cyclic collector's full passes while the event loop runs.

    The loop allocates an event, a result and a heap entry per report, and every result
    lives on in the engine: the collector's rule (a full pass once the objects that
    survived grew by a quarter) then walks every object of the process again and again
    while it finds nothing, for the simulation's objects are freed by their reference
    counts (it makes no cycles). The young generations are still collected as usual, so a
    cycle some workload makes and drops soon is freed soon; one that lives long is freed by
    the first full pass after the run, when the thresholds are back.
    """
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            if _gc_saved[0]:  # 0: automatic collection is off; leave it so
                gc.set_threshold(_gc_saved[0], _gc_saved[1], _NO_FULL_PASS)
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0 and _gc_saved[0]:
                gc.set_threshold(*_gc_saved)


@dataclass
class _Live:
    trial_id: int
    config: dict[str, Any]
    placement: Placement
    progress: float
    target: float
    last_t: float
    rate: float = 0.0
    gen: int = 0
    started: bool = False
    fails_at: float | None = None
    waiting: bool = False  # a report fired; the next one is scheduled after commands run
    samples: int = 0  # TrialSampled events of this launch so far


@dataclass
class SimRuntime:
    """Run an experiment on a virtual clock.

    ``cluster`` is a :class:`ClusterSpec` or a GPU count; ``launch_overhead``
    (seconds from launch to the first iteration) defaults to the workload's;
    ``resize_overhead`` is Fluid's ε, paid when a running trial is resized;
    ``report_every`` is the budget between two reports. ``profiler`` measures
    c, d, α, β, ε and demands from the simulated clock and the simulated GPUs'
    samples of a trial alone on its GPU (``TrialSampled``: as its launch
    starts, then every ``sample_every`` seconds, as Dask's workers sample NVML,
    up to ``samples_per_launch``, and none once the profiler holds all the samples of the
    trial's model it keeps: :meth:`Profiler.wants_sample`); give one with a job history
    to keep what it learns.
    """

    cluster: ClusterSpec | int = 4
    launch_overhead: float | None = None
    resize_overhead: float = 0.0
    report_every: float = 1.0
    sample_every: float = 1.0
    samples_per_launch: int = 4
    max_events: int = 50_000_000
    name: str = "sim"
    virtual_clock: ClassVar[bool] = True
    keeps_checkpoints: ClassVar[bool] = False
    live_workers: ClassVar[bool] = False
    profiler: Profiler | None = None
    _clock: ManualClock = field(default_factory=ManualClock, init=False)
    _done: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if isinstance(self.cluster, int):
            self.cluster = ClusterSpec.homogeneous(self.cluster)
        if self.report_every <= 0:
            raise ValueError(f"report_every must be > 0, got {self.report_every}")
        self._heap: list[tuple[float, int, int, int, int, Any]] = []
        self._seq = 0
        self._live: dict[int, _Live] = {}
        self._waiting: list[_Live] = []
        self._on_gpu: dict[int, set[int]] = {}
        self._engine: Engine | None = None
        self._driving: Engine | None = None  # the engine start() is running, on its caller
        self._workload: WorkloadModel | None = None
        self.events_processed = 0

    # ----------------------------------------------------------- Runtime API
    @property
    def clock(self) -> ManualClock:
        return self._clock

    @property
    def done(self) -> bool:
        return self._done

    def submit(self, *events: ev.Event) -> None:
        """Schedule outside events (stop requests, cluster changes) at their own times."""
        for e in events:
            self._push(e.time, _EXTERNAL, -1, 0, e)

    def drives(self, engine: Engine) -> bool:
        """``start`` is running ``engine`` (on the thread that called it)."""
        return self._driving is engine

    def at(self, time: float, event_type: type[ev.Event], **fields: Any) -> None:
        """Convenience: ``sim.at(300, ResourcesChanged, cluster=...)``."""
        self.submit(event_type(time=time, **fields))

    def start(self, engine: Engine, trainable: Any) -> None:
        if not isinstance(trainable, WorkloadModel):
            raise TypeError(
                "the simulator runs workload models (e.g. nbtune.workloads.SyntheticWorkload "
                f"or TraceWorkload), got {type(trainable).__name__}; use DaskRuntime for "
                "training functions"
            )
        assert isinstance(self.cluster, ClusterSpec)
        self._engine, self._workload = engine, trainable
        self._metrics = trainable.metrics
        if self.launch_overhead is None:
            self.launch_overhead = trainable.launch_overhead
        self._gpus = self.cluster.by_id()
        attach_profiler(self, engine, trainable)
        self._driving = engine
        try:
            self._execute(engine.handle(ev.ExperimentStarted(self._clock.now(), self.cluster)))
            with _young_collections_only():
                self._loop()
        finally:
            self._driving = None

    def wait(self, timeout: float | None = None) -> bool:
        return self._done

    # ------------------------------------------------------------ the loop
    def _push(self, t: float, prio: int, tid: int, gen: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, prio, self._seq, tid, gen, payload))

    def _loop(self) -> None:
        engine = self._engine
        assert engine is not None
        heap, pop, set_time = self._heap, heapq.heappop, self._clock.set_ordered
        materialize, handle, execute = self._materialize, engine.handle, self._execute
        waiting, schedule_waiting = self._waiting, self._schedule_waiting
        live_of, metrics, schedule_next = self._live, self._metrics, self._schedule_next
        reported = ev.TrialReported
        while heap and not engine.done:
            item = pop(heap)
            t = item[0]
            set_time(t)  # the heap yields times in order; advance_to's check is for outsiders
            if item[1] == _REPORT and not (heap and heap[0][0] <= t + EPS):
                # the hot path, one per budget unit of every trial: a report alone at its
                # instant, short of the trial's target, of a trial that does not fail here
                # (_materialize's report branch, without its batching and failure cases)
                _, _, _, tid, gen, budget = item
                live = live_of.get(tid)
                if live is None or live.gen != gen:
                    continue  # stale: the trial was stopped, paused or re-rated since
                target = live.target
                if live.fails_at is None and budget < target - EPS:
                    live.progress = budget
                    live.last_t = t
                    self.events_processed += 1
                    cmds = handle(reported(t, tid, budget, metrics(tid, live.config, budget)))
                    if cmds:  # it may have been moved, re-rated or stopped
                        live.waiting = True
                        waiting.append(live)
                        execute(cmds)
                        schedule_waiting(t)
                    else:  # it runs on as it was: its next report
                        schedule_next(live, t)
                    if self.events_processed > self.max_events and not engine.done:
                        raise SimulationError(
                            f"more than {self.max_events} events: runaway simulation")
                    continue
            e = materialize(item, t)
            # simultaneous events (closer than EPS: the times of a replayed run are sums
            # that rounding splits) go to the engine together, as a real runtime hands it
            # what it learnt at once in one handle call
            if heap and heap[0][0] <= t + EPS:
                batch = [] if e is None else [e]
                while heap and heap[0][0] <= t + EPS and len(batch) < 512:
                    e2 = materialize(pop(heap), t)
                    if e2 is not None:
                        batch.append(e2)
                if not batch:
                    continue
                self.events_processed += len(batch)
                execute(handle(*batch))
            elif e is None:
                continue
            else:
                self.events_processed += 1
                cmds = handle(e)
                if cmds:
                    execute(cmds)
            if waiting:
                schedule_waiting(t)
            if self.events_processed > self.max_events and not engine.done:
                raise SimulationError(f"more than {self.max_events} events: runaway simulation")
        if not engine.done:
            raise SimulationError(
                "simulation ran out of events before the experiment finished "
                f"({len(self._live)} trials live)"
            )
        self._done = True

    def _materialize(self, item: tuple[float, int, int, int, int, Any], t: float) -> ev.Event | None:
        """The event a heap entry (time, priority, sequence, trial, generation, payload)
        stands for at ``t``; None when it went stale."""
        _, prio, _, tid, gen, payload = item
        if prio == _REPORT:  # the hot path: one per budget unit of every trial
            live = self._live.get(tid)
            if live is None or live.gen != gen:
                return None  # stale: the trial was stopped, paused or re-rated since
            live.progress = budget = payload
            live.last_t = t
            fails = live.fails_at
            if fails is not None and budget >= fails - EPS:
                self._remove(tid)
                return ev.TrialFailed(t, tid, error=f"simulated failure at budget {budget:g}")
            metrics = self._metrics(tid, live.config, budget)
            if budget >= live.target - EPS:
                self._remove(tid)  # the runtime checkpoints and releases at the target
            else:
                live.waiting = True
                self._waiting.append(live)
            return ev.TrialReported(t, tid, budget, metrics)
        if prio == _SAMPLE:
            return self._sample(tid, payload, t)
        if prio == _EXTERNAL:
            if isinstance(payload, ev.ResourcesChanged):
                self._adopt_cluster(payload.cluster)
            return payload
        live = self._live.get(tid)
        if live is None or live.gen != gen:
            return None
        live.started = True
        self._schedule_next(live, t)
        return ev.TrialStarted(t, tid)

    def _schedule_waiting(self, now: float) -> None:
        """Schedule the next report of each trial that reported at ``now`` and runs on as it
        was (a command that moved or re-rated it scheduled it already)."""
        live_of = self._live
        for live in self._waiting:
            if live.waiting and live_of.get(live.trial_id) is live:
                live.waiting = False
                self._schedule_next(live, now)
        self._waiting.clear()

    def _schedule_next(self, live: _Live, now: float) -> None:
        live.gen += 1
        rate = live.rate
        if rate <= 0.0:
            raise SimulationError(f"trial {live.trial_id} has rate {rate}")
        nb = self._next_budget(live)
        last = live.last_t
        t = (last if last > now else now) + (nb - live.progress) / rate
        self._seq += 1
        heapq.heappush(self._heap, (t, _REPORT, self._seq, live.trial_id, live.gen, nb))

    def _next_budget(self, live: _Live) -> float:
        step = self.report_every
        return min((math.floor(live.progress / step + EPS) + 1) * step, live.target)

    # ------------------------------------------------------------ commands
    def _execute(self, cmds: Iterable[Command]) -> None:
        touched: set[int] = set()
        # which GPUs changed matters only to a model whose speed depends on its neighbours
        sensitive = self._workload is not None and self._workload.neighbor_sensitive
        now = self._clock.now()
        for c in cmds:
            kind = type(c)
            if kind is Launch:
                self._launch(c, now)
                if sensitive:
                    touched.update(g for g, _ in c.placement)
            elif kind is Resize:
                live = self._live.get(c.trial_id)
                if live is None:
                    continue
                touched.update(g for g, _ in live.placement)
                self._advance(live, now)
                self._unplace(live)
                live.placement = c.placement
                self._place(live)
                live.last_t = max(live.last_t, now) + self.resize_overhead
                touched.update(g for g, _ in c.placement)
                live.waiting = False
                self._rerate(live, now)
            elif kind is Pause or kind is Stop:
                live = self._live.get(c.trial_id)
                if live is not None:
                    if sensitive:
                        touched.update(g for g, _ in live.placement)
                    self._remove(c.trial_id)
            elif kind is Finish:
                self._done = True
        if touched and sensitive:
            for tid in {t for g in touched for t in self._on_gpu.get(g, ())}:
                live = self._live[tid]
                self._advance(live, now)
                live.waiting = False
                self._rerate(live, now)

    def _launch(self, c: Launch, now: float) -> None:
        assert self._workload is not None and self.launch_overhead is not None
        fails = self._workload.fails_at(c.trial_id, c.config)
        delay = self._workload.launch_time(c.trial_id, c.config, c.start_budget)
        delay = self.launch_overhead if delay is None else delay  # a trace's measured launch
        live = _Live(c.trial_id, dict(c.config), c.placement, c.start_budget, c.budget,
                     now + delay, fails_at=fails)
        self._live[c.trial_id] = live
        self._place(live)
        live.rate = self._rate(live)
        live.gen += 1
        self._push(live.last_t, _START, c.trial_id, live.gen, None)
        if self._sampling(c.trial_id, c.config):
            self._push(live.last_t + 1e-9, _SAMPLE, c.trial_id, 0, live)  # just after it starts

    def _sampling(self, tid: int, config: dict[str, Any]) -> bool:
        """Whether the profiler could still use a sample of this trial (none: it has enough)."""
        assert self._workload is not None
        prof = self.profiler
        return prof is None or prof.wants_sample(tid, self._workload.demand(tid, config).memory_gb)

    def _sample(self, tid: int, launched: _Live, t: float) -> ev.Event | None:
        """What NVML would read on the trial's GPU now, if it holds the GPU alone."""
        live = self._live.get(tid)
        if live is not launched or self._workload is None:
            return None  # stopped or relaunched since
        if any(self._on_gpu.get(g, set()) != {tid} for g, _ in live.placement):
            return None  # shared: no clean sample of this trial
        d = self._workload.demand(tid, live.config)
        live.samples += 1
        if live.samples < self.samples_per_launch and self._sampling(tid, live.config):
            # the profiler's GPU room wants a few
            self._push(t + self.sample_every, _SAMPLE, tid, 0, live)
        return ev.TrialSampled(t, tid, min(live.placement[0][1], d.compute), d.memory_gb)

    def _advance(self, live: _Live, now: float) -> None:
        if live.started and now > live.last_t:
            nb = self._next_budget(live)
            live.progress = min(live.progress + (now - live.last_t) * live.rate, nb - EPS)
            live.last_t = now

    def _rerate(self, live: _Live, now: float) -> None:
        live.rate = self._rate(live)
        if live.started:
            self._schedule_next(live, now)
        else:
            live.gen += 1
            self._push(live.last_t, _START, live.trial_id, live.gen, None)

    def _rate(self, live: _Live) -> float:
        assert self._workload is not None
        neighbors = ()
        if self._workload.neighbor_sensitive:
            mine = {g for g, _ in live.placement}
            neighbors = tuple(
                Neighbor(o.trial_id, s, self._workload.demand(o.trial_id, o.config))
                for g in mine for tid in self._on_gpu.get(g, ()) if tid != live.trial_id
                for o in (self._live[tid],) for gg, s in o.placement if gg == g
            )
        return self._workload.rate(live.trial_id, live.config, live.placement, self._gpus,
                                   neighbors)

    def _place(self, live: _Live) -> None:
        for g, _ in live.placement:
            self._on_gpu.setdefault(g, set()).add(live.trial_id)

    def _unplace(self, live: _Live) -> None:
        for g, _ in live.placement:
            self._on_gpu.get(g, set()).discard(live.trial_id)

    def _remove(self, tid: int) -> None:
        live = self._live.pop(tid, None)
        if live is not None:
            self._unplace(live)

    def _adopt_cluster(self, cluster: ClusterSpec) -> None:
        self._gpus = cluster.by_id()
        for tid in [t for t, lv in self._live.items()
                    if any(g not in self._gpus for g, _ in lv.placement)]:
            self._remove(tid)  # a GPU vanished under the trial; the engine requeues it

    # --------------------------------------------------------- observations
    def utilization(self, engine: Engine) -> pd.DataFrame:
        """Per-GPU utilization as step changes, from the allocation log and trial demands.

        A trial holding share s of a GPU uses min(s, its compute demand) of it.
        """
        assert self._workload is not None
        end = engine.time
        deltas: dict[int, list[tuple[float, float]]] = {}
        for r in engine.ledger.log:
            cfg = engine.trials[r.trial_id].config
            u = min(r.share, self._workload.demand(r.trial_id, cfg).compute)
            deltas.setdefault(r.gpu_id, []).extend(
                [(r.start, u), (end if r.end is None else r.end, -u)]
            )
        rows = []
        for g in sorted(deltas):
            level = 0.0
            changes = sorted(deltas[g])
            for i, (t, d) in enumerate(changes):
                level += d
                if i + 1 < len(changes) and changes[i + 1][0] == t:
                    continue
                rows.append((t, g, min(max(level, 0.0), 1.0)))
        return pd.DataFrame(rows, columns=["time", "gpu_id", "util"])
