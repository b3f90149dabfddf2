"""GPU lanes for the dashboard: allocation rectangles and utilization segments over time.

Part of :class:`~nbtune.ui.dashboard_model.DashboardModel`, kept apart because it is
its own small state machine: it replays the engine's allocation ledger into
rectangles stacked inside one lane per GPU (packed trials sit on top of each
other, a multi-GPU trial has one rectangle per lane) and steps each GPU's
utilization, either estimated from the allocation (min(share, compute
demand), as the simulator computes it) or measured by the runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from nbtune.core.tolerance import EPS

if TYPE_CHECKING:
    from nbtune.engine.engine import Engine

__all__ = ["Lanes", "Rect", "Segment"]


class Rect(NamedTuple):
    """Trial ``trial_id`` held ``share`` of GPU ``gpu_id`` (lane ``lane``) over [start, end).

    ``bottom``/``top`` place it inside the lane so packed trials stack visibly.
    (Named tuples, not dataclasses: thousands are made per pull.)
    """

    trial_id: int
    gpu_id: int
    lane: int
    share: float
    start: float
    end: float
    bottom: float
    top: float


class Segment(NamedTuple):
    """GPU ``gpu_id`` (lane ``lane``) was ``util`` busy over [start, end)."""

    gpu_id: int
    lane: int
    start: float
    end: float
    util: float


class Lanes:
    """Incremental rectangles and utilization of one engine (the model holds the lock)."""

    def __init__(self, engine: Engine, *, measured: bool = False) -> None:
        self.engine = engine
        # the runtime samples utilization (a real run): say "measured" from the start and
        # show nothing until the first sample, rather than an estimate that the title retracts
        self.expect_measured = measured
        self.lane_of: dict[int, int] = {}
        self._t0: float | None = None
        self._cluster: Any = None
        self._log_seen = 0
        self._util_seen = 0
        self._live: dict[int, Rect] = {}  # ledger index -> rectangle still open
        self._open_by_trial: dict[int, set[int]] = {}  # trial -> ledger indices still open
        self._stack: dict[int, list[tuple[float, float]]] = {}  # gpu -> occupied (bottom, top)
        self._level: dict[int, float] = {}  # estimated utilization per GPU now
        self._level_since: dict[int, float] = {}
        self._measured: dict[int, tuple[float, float]] = {}  # gpu -> (since, util) last sample
        self._demand = _demand_fn(engine)
        self._closed: list[Rect] = []
        self._util_closed: list[Segment] = []  # estimated from the allocation
        self._meas_closed: list[Segment] = []  # between the runtime's samples

    @property
    def open_trials(self) -> set[int]:
        return set(self._open_by_trial)

    @property
    def kind(self) -> str:
        return "measured" if self._measured or self.expect_measured else "allocated"

    @property
    def device(self) -> str | None:
        """``CPU`` when every lane is a CPU worker standing for a GPU, ``GPU`` when not,
        ``None`` while the cluster is not known yet. The cluster is an immutable value the
        engine swaps whole, so reading the reference from another thread is safe."""
        cluster = self._cluster or self.engine.ledger.cluster
        if cluster is None:
            return None
        return "CPU" if cluster.cpu_stand_ins else "GPU"

    def take(self) -> tuple[list[Rect], list[Segment]]:
        """Rectangles closed and utilization segments finished since the last take."""
        measured = self._measured or self.expect_measured
        out = (self._closed, self._meas_closed if measured else self._util_closed)
        self._closed, self._util_closed, self._meas_closed = [], [], []
        return out

    def open_rects(self, now: float) -> list[Rect]:
        return [_ended(r, now) for r in self._live.values()]

    def util_open(self, now: float) -> list[Segment]:
        if self._measured or self.expect_measured:
            return [Segment(g, self.lane_of[g], s, max(now, s), u)
                    for g, (s, u) in self._measured.items()]
        return [Segment(g, self.lane_of[g], self._level_since[g], max(now, self._level_since[g]),
                        min(max(self._level[g], 0.0), 1.0))
                for g in self.lane_of if g in self._level_since]

    def sync(self, touched: set[int]) -> None:
        """Catch up with the ledger and samples (``touched``: trials that may have released)."""
        self._sync_lanes()
        self._sync_allocations(touched)
        if len(self.engine.utilization) > self._util_seen:
            self._take_samples()

    def _sync_lanes(self) -> None:
        cluster = self.engine.ledger.cluster
        if cluster is None or cluster is self._cluster:
            return
        self._cluster = cluster
        if self._t0 is None:
            log = self.engine.ledger.log
            self._t0 = float(log[0].start) if log else float(self.engine.time)
        for g in cluster.gpus:
            self._lane(g.gpu_id)

    def _lane(self, gpu: int) -> int:
        lane = self.lane_of.get(gpu)
        if lane is None:
            lane = self.lane_of[gpu] = len(self.lane_of)
            self._level[gpu] = 0.0
            self._level_since[gpu] = self._t0 if self._t0 is not None else float(self.engine.time)
        return lane

    def _sync_allocations(self, touched: set[int]) -> None:
        """Open and close rectangles (and step utilization) in time order.

        Live, everything in one batch happens at the same instant; on catch-up
        the whole ledger is replayed, so changes are sorted by time, closes
        before opens at equal times, to stack packed trials without overlap.
        """
        log = self.engine.ledger.log
        todo: list[tuple[float, int, int]] = []  # (time, 0 close | 1 open, ledger index)
        for tid in touched:
            for i in self._open_by_trial.get(tid, ()):
                if log[i].end is not None:
                    todo.append((float(log[i].end), 0, i))
        # the engine may append while a view pulls from another thread: read the length once,
        # so a record appended during this loop is taken next time, not skipped
        n = len(log)
        for i in range(self._log_seen, n):
            rec = log[i]
            if rec.end is not None and rec.end <= rec.start:
                continue  # held for no time at all: nothing to draw
            todo.append((float(rec.start), 1, i))
            if rec.end is not None:
                todo.append((float(rec.end), 0, i))
        self._log_seen = n
        todo.sort()
        for when, kind, i in todo:
            rec = log[i]
            g = rec.gpu_id
            u = self._util_of(rec.trial_id, rec.share)
            if kind == 1:
                lane = self._lane(g)
                bottom = lane + self._fit(g, rec.share)
                r = Rect(rec.trial_id, g, lane, rec.share, when, when, bottom, bottom + rec.share)
                self._stack.setdefault(g, []).append((r.bottom, r.top))
                self._live[i] = r
                self._open_by_trial.setdefault(rec.trial_id, set()).add(i)
                self._add_level(g, u, when)
            else:
                r = self._live.pop(i)
                self._closed.append(_ended(r, when))
                self._stack[g].remove((r.bottom, r.top))
                opened = self._open_by_trial[rec.trial_id]
                opened.discard(i)
                if not opened:
                    del self._open_by_trial[rec.trial_id]
                self._add_level(g, -u, when)

    def _fit(self, gpu: int, share: float) -> float:
        """Lowest offset in the GPU's lane where ``share`` fits between the trials there."""
        lane = self.lane_of[gpu]
        pos = 0.0
        for b, t in sorted((b - lane, t - lane) for b, t in self._stack.get(gpu, ())):
            if b - pos >= share - EPS:
                break
            pos = max(pos, t)
        return pos

    def _util_of(self, tid: int, share: float) -> float:
        return share if self._demand is None else min(share, self._demand(tid))

    def _add_level(self, gpu: int, delta: float, when: float) -> None:
        since = self._level_since[gpu]
        if when > since + 1e-12:
            level = min(max(self._level[gpu], 0.0), 1.0)
            self._util_closed.append(Segment(gpu, self.lane_of[gpu], since, when, level))
            self._level_since[gpu] = when
        new = self._level[gpu] + delta
        self._level[gpu] = 0.0 if abs(new) < EPS else new

    def _take_samples(self) -> None:
        samples = self.engine.utilization
        n = len(samples)  # once: samples appended meanwhile are taken next time
        for when, g, util, _mem in samples[self._util_seen:n]:
            if g not in self.lane_of:
                self.lane_of[g] = len(self.lane_of)
            prev = self._measured.get(g)
            if prev is not None and when > prev[0]:
                self._meas_closed.append(Segment(g, self.lane_of[g], prev[0], when, prev[1]))
            self._measured[g] = (float(when), min(max(float(util), 0.0), 1.0))
        self._util_seen = n


def _ended(r: Rect, end: float) -> Rect:
    # the constructor, not r._replace: thousands per pull and _replace is several times slower
    return Rect(r.trial_id, r.gpu_id, r.lane, r.share, r.start, max(end, r.start), r.bottom,
                r.top)


def _demand_fn(engine: Engine) -> Callable[[int], float] | None:
    """Compute share a trial can use, from the simulator's workload model if there is one.

    Mirrors :meth:`SimRuntime.utilization` (a trial holding share s uses
    min(s, demand)); without a model the allocated share stands in.
    """
    workload = engine.hints.get("workload") if hasattr(engine, "hints") else None
    if workload is None or not hasattr(workload, "demand"):
        return None
    cache: dict[int, float] = {}

    def demand(tid: int) -> float:
        if tid not in cache:
            cache[tid] = float(workload.demand(tid, engine.trials[tid].config).compute)
        return cache[tid]

    return demand
