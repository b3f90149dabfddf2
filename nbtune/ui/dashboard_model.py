"""The dashboard's state: what changed in an experiment since the view last looked.

:class:`DashboardModel` subscribes to the engine (``engine.subscribe``) and
turns each ``handle`` call into small incremental deltas: new learning-curve
points, allocation rectangles opened and closed, GPU-utilization segments,
changed trial rows, progress. A view calls :meth:`DashboardModel.pull` on its
own throttle and gets everything since the previous pull, or
folds the deltas into immutable snapshots of everything so far
(:class:`nbtune.ui.snapshot.Snapshots`: what the live dashboard renders, whole,
so any view converges). The model
knows nothing of widgets, Bokeh or comms, so it is tested with a bare engine
and simulator.

Threading, one rule: **only the engine's thread reads the engine.** The
subscriber runs on whatever thread drives the engine, right after each
``handle`` (the engine's state is then whole), and copies what the trials the
events name show into the model's own rows under the model's lock; ``pull``
reads only those copies, never live engine state from another thread. When
the copy is behind (a model attached to a running experiment, or changes not
copied yet because they came within :data:`SYNC_EVERY`), a pull on another
thread *asks*: it submits :class:`~nbtune.core.events.SnapshotRequested` to the
runtime, which hands it to the engine on the engine's thread like any event,
and the subscriber copies there; the next pull has it. So an idle or paused
experiment, where no trial event would come, still shows everything. Only an
engine that no runtime drives (not started yet, or let go at its end:
``runtime.drives(engine)`` is False) is read from the caller's thread, since no
``handle`` can then change it; without a runtime, the caller is taken to drive
the engine. Paused trials, which the engine can retire without an event naming
them, get a cheap state check at most every :data:`WAITING_CHECK` seconds.
"""

from __future__ import annotations

import itertools
import threading
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbtune.core import events as ev
from nbtune.core.best import best_index
from nbtune.core.commands import Command, Finish, Launch, Pause, Resize, Stop
from nbtune.core.roles import is_target
from nbtune.core.trial import TrialRecord, TrialState, ended_of_total
from nbtune.experiment import error_line
from nbtune.runtimes.runtime_protocol import Runtime
from nbtune.ui.delta import Delta, Points, Progress
from nbtune.ui.lanes import Lanes, Rect, Segment

if TYPE_CHECKING:
    from nbtune.engine.engine import Engine

__all__ = ["DashboardModel", "Delta", "Rect", "Segment", "Points", "Progress", "DISPLAY_STATES"]

#: what a trial is shown as, in legend order (``best`` and ``promoted`` are derived)
DISPLAY_STATES = ("best", "running", "promoted", "completed", "paused", "pending", "stopped",
                  "error")
_EVENTS_WITH_TRIAL = (ev.TrialReported, ev.TrialStarted, ev.TrialFailed, ev.TrialReturned,
                      ev.TrialStopRequested)
_CMDS_WITH_TRIAL = (Launch, Resize, Pause, Stop)
_SWEEP_EVERYTHING = (ev.ExperimentStopRequested, ev.ExperimentPauseRequested,
                     ev.ResourcesChanged, ev.ConcurrencyChanged)
#: seconds between checks of paused trials' states (the engine may retire them silently)
WAITING_CHECK = 0.2
#: seconds between copies on the engine's thread; changes that end or pause the experiment
#: are copied at once (the simulator handles events far faster than any view looks:
#: copying after each one would cost more than the tuning; no view looks more often than
#: every 0.1 s)
SYNC_EVERY = 0.05


@dataclass
class _Row:
    trial: TrialRecord
    state: TrialState = TrialState.PENDING
    best: float | None = None
    last: float | None = None
    budget: float = 0.0
    target: float = 0.0
    promotions: int = 0
    launched: float | None = None  # target budget of the latest launch
    unit: int | None = None  # the fused unit of the latest launch (tune(..., fusion=F))
    n_results: int = 0
    error: str | None = None
    start: float | None = None
    end: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    #: the whole curve (every report with the metric), copied on the engine's thread
    curve: Points = field(default_factory=lambda: Points([], [], []))

    def __post_init__(self) -> None:
        self.config = dict(self.trial.config)


class DashboardModel:
    """Incremental view-model of one engine; see the module docstring.

    Attach it before the experiment starts or at any time later: it replays
    what already happened first. ``max_points`` caps the curve points one
    trial contributes to one pull (None: all of them); the cap only bites when
    reports arrive faster than the view looks, as in the simulator.
    """

    def __init__(self, engine: Engine, *, max_points: int | None = 32,
                 measured: bool = False, cost: Callable[[], float | None] | None = None,
                 runtime: Runtime | None = None,
                 planned: tuple[float, float] | None = None) -> None:
        if max_points is not None and max_points < 1:
            raise ValueError(f"max_points must be >= 1 or None, got {max_points}")
        self.max_points = max_points
        self.engine = engine
        self.runtime = runtime  # drives the engine: asked for its state (see the module doc)
        self.cost = cost  # reads the bill (a planned run's meter), or None
        self.planned = planned  # the plan's predicted (JCT s, cost), or None
        self.metric: str = engine.metric
        self.mode: str = engine.mode
        self._touched: set[int] = set()  # trials named by events since the last sync
        self._lock = threading.Lock()
        self._copied = threading.Condition(self._lock)  # notified after each copy
        self._rows: dict[int, _Row] = {}
        self._n_seen = 0  # engine trials (in insertion order) already given a row
        # paused trials can be retired or re-queued with no event or command naming them
        self._waiting: set[int] = set()
        self.lanes = Lanes(engine, measured=measured)
        self._best: int | None = None
        self._pulled = False
        self._reset_buffers()
        self.updates = 0  # handle calls seen (for tests and the overhead benchmark)
        self._total = getattr(engine.algorithm, "num_trials", None)
        self._checked = 0.0  # when paused trials' states were last checked
        self._synced_at = 0.0  # when the engine's state was last copied (engine thread)
        self._stale = False  # the engine changed since the last copy
        self._engine_thread: int | None = None
        self._asked = False  # a SnapshotRequested is on its way to the engine
        self._now, self._done, self._paused = 0.0, False, False
        with self._lock:
            self._unsubscribe = engine.subscribe(self._on_handle)
            # nothing copied yet: catch up here if no runtime drives the engine (no handle
            # can change it meanwhile), else on the engine's thread, at a handle we ask for
            self._behind = True
            if self._at_rest() or (runtime is None and (engine.done or not engine.trials)):
                self._catch_up()
            else:
                self._ask()

    # ------------------------------------------------------------------ API
    def pull(self) -> Delta:
        """Everything new since the previous pull (the first pull: everything so far)."""
        with self._lock:
            return self._pull()

    def _pull(self) -> Delta:
        if self._behind or self._stale:
            if threading.get_ident() == self._engine_thread or self._at_rest():
                self._copy_here()  # safe: the engine's thread, or no runtime drives the engine
            else:
                self._ask()  # the engine's thread copies it at the handle this causes
        now = self._now
        best = self._find_best()
        if best != self._best:
            self._dirty.update(t for t in (best, self._best) if t is not None)
        best_changed = best != self._best or not self._pulled
        self._best, self._pulled = best, True
        best_curve = None
        if best is not None and (best_changed or best in self._raw):
            best_curve = self._curve(best)
        lanes = self.lanes
        util_kind = lanes.kind
        closed, segments = lanes.take()
        d = Delta(
            time=now, done=self._done, paused=self._paused,
            metric=self.metric, lanes=list(lanes.lane_of),
            rows={tid: self._row_dict(tid) for tid in sorted(self._dirty)},
            points=self._take_points(), alloc_closed=closed, alloc_open=lanes.open_rects(now),
            util_kind=util_kind, util_device=lanes.device, util_closed=segments,
            util_open=lanes.util_open(now),
            best=best, best_changed=best_changed, best_curve=best_curve,
            best_value=None if best is None else self._rows[best].best,
            progress=self._progress(now), cost=None if self.cost is None else self.cost(),
            planned=self.planned,
        )
        self._reset_buffers()
        return d

    def settle(self, timeout: float = 10.0) -> bool:
        """Bring the copy up to date before returning (False: ``timeout`` seconds passed first).

        Where this thread may read the engine it copies at once (without a runtime, the
        caller drives the engine); else it asks and waits for the engine's thread to copy,
        or for the runtime to let the engine go.
        """
        deadline = _time.monotonic() + timeout
        with self._lock:
            while self._behind or self._stale:
                if (self.runtime is None or threading.get_ident() == self._engine_thread
                        or self._at_rest()):
                    self._copy_here()
                    break
                self._ask()
                left = deadline - _time.monotonic()
                if left <= 0:
                    return False
                self._copied.wait(min(left, 0.1))  # and look again: the run may have ended
        return True

    def close(self) -> None:
        """Stop listening to the engine."""
        self._unsubscribe()

    def _copy_here(self) -> None:
        if self._behind:
            self._catch_up()
        else:
            self._sync(everything=bool(self.engine.done))
            self._stamp()
            self._stale = False

    def _at_rest(self) -> bool:
        """No runtime's thread may call ``handle`` now: any thread may read the engine."""
        rt = self.runtime
        return rt is not None and not rt.drives(self.engine)

    def _ask(self) -> None:
        """Ask the runtime to hand the engine's state over on the engine's thread (once until
        it comes). A virtual-clock runtime is not asked: it never idles, and an event in its
        queue would be part of the simulation."""
        rt = self.runtime
        if rt is None or rt.virtual_clock or self._asked:
            return
        self._asked = True
        rt.submit(ev.SnapshotRequested(rt.clock.now()))

    # ------------------------------------------------------- engine thread
    def _stamp(self) -> None:
        """Copy the engine's clock and flags (on the engine's thread, or an engine at rest)."""
        engine = self.engine
        self._now, self._done, self._paused = float(engine.time), bool(engine.done), \
            bool(engine.paused)

    def _on_handle(self, events: tuple[ev.Event, ...], cmds: list[Command]) -> None:
        with self._lock:
            self.updates += 1
            self._engine_thread = threading.get_ident()
            if self._behind:
                self._catch_up()  # attached while running: the engine's state is whole now
                self._copied.notify_all()
                return
            everything = False
            asked = False
            touched = self._touched
            for e in events:
                if isinstance(e, _EVENTS_WITH_TRIAL):
                    touched.add(e.trial_id)
                elif isinstance(e, _SWEEP_EVERYTHING):
                    everything = True
                elif isinstance(e, ev.SnapshotRequested):
                    asked = True
            for c in cmds:
                if isinstance(c, _CMDS_WITH_TRIAL):
                    touched.add(c.trial_id)
                    if isinstance(c, Launch):
                        self._on_launch(c)
                elif isinstance(c, Finish):
                    everything = True
            now = _time.monotonic()
            self._stale = True
            if asked or everything or self.engine.done or now - self._synced_at >= SYNC_EVERY:
                self._sync(everything=everything or bool(self.engine.done))
                self._stamp()
                self._synced_at, self._stale = now, False
                self._copied.notify_all()
            if asked:
                self._asked = False

    def _catch_up(self) -> None:
        """Replay the engine's state so far (on the engine's thread, or an engine at rest)."""
        self._behind = self._stale = self._asked = False
        self._touched = set(self.engine.trials)
        self._sync(everything=True)
        self._stamp()
        # promotions happened before we listened: a trial placed again right where it
        # reported and released its GPUs had finished a segment and won its rung
        last_end: dict[int, float] = {}
        counted: set[tuple[int, float]] = set()
        for rec in self.engine.ledger.log:
            tid, prev = rec.trial_id, last_end.get(rec.trial_id)
            if prev is not None and rec.start >= prev and (tid, rec.start) not in counted \
                    and any(when == prev for when, _, _ in self._rows[tid].trial.results):
                self._rows[tid].promotions += 1
                counted.add((tid, rec.start))
            if rec.end is not None:
                last_end[tid] = max(rec.end, prev if prev is not None else rec.end)
        for tid, row in self._rows.items():
            launched = row.trial.start_time is not None and row.state is not TrialState.PENDING
            row.launched = row.target if launched else None
            row.unit = row.trial.unit  # the fused unit it last ran in
            if row.promotions:
                self._dirty.add(tid)

    def _add_new_trials(self, touched: set[int]) -> None:
        trials = self.engine.trials
        if len(trials) > self._n_seen:  # new trials are appended to the engine's dict
            # one snapshot: a trial the engine thread adds meanwhile is taken next time
            current = list(trials.values())
            for t in itertools.islice(current, self._n_seen, None):
                if t.trial_id not in self._rows:
                    self._rows[t.trial_id] = _Row(t)
                touched.add(t.trial_id)
            self._n_seen = len(current)

    def _sync(self, *, everything: bool) -> None:
        """Bring the model up to date with every trial noted since the last sync."""
        touched, self._touched = self._touched, set()
        self._add_new_trials(touched)
        rows = self._rows
        if everything:
            touched |= self._waiting
            touched |= self.lanes.open_trials
        elif self._waiting and _time.monotonic() - self._checked > WAITING_CHECK:
            # a cheap identity check; full sync only for what moved
            self._checked = _time.monotonic()
            touched.update(tid for tid in self._waiting
                           if rows[tid].trial.state is not rows[tid].state)
        self.lanes.sync(touched)
        for tid in touched:
            row = rows.get(tid)
            if row is not None:
                self._sync_row(tid, row)

    def _sync_row(self, tid: int, row: _Row) -> None:
        t = row.trial
        n = len(t.results)
        if n > row.n_results:
            new = t.results[row.n_results:n]
            metric = self.metric
            full = [r for r in new if r[2].get(metric) is not None]
            row.curve.budget.extend([b for _, b, _ in full])
            row.curve.value.extend([m[metric] for _, _, m in full])
            row.curve.time.extend([w for w, _, _ in full])
            self._raw.setdefault(tid, []).extend(new)  # thinned at the pull
            row.n_results = n
            self._dirty.add(tid)
        snap = (t.state, t.best, t.last, t.budget_used, t.target_budget, t.error, t.start_time,
                t.end_time)
        if snap != (row.state, row.best, row.last, row.budget, row.target, row.error, row.start,
                    row.end):
            (row.state, row.best, row.last, row.budget, row.target, row.error, row.start,
             row.end) = snap
            self._dirty.add(tid)
        if t.state is TrialState.PAUSED:
            self._waiting.add(tid)
        else:
            self._waiting.discard(tid)

    def _on_launch(self, c: Launch) -> None:
        row = self._rows.get(c.trial_id)
        if row is None:  # first launch: a row now, so a later promotion is seen
            t = self.engine.trials.get(c.trial_id)
            if t is None:
                return
            row = self._rows[c.trial_id] = _Row(t)
        # a relaunch towards a higher target than the last segment is a promotion (SHA
        # rungs); a relaunch to the same target is a pause/resume and is not
        if row.launched is not None and c.budget > row.launched + 1e-9:
            row.promotions += 1
            self._dirty.add(c.trial_id)
        row.launched = c.budget
        if c.unit != row.unit:
            row.unit = c.unit
            self._dirty.add(c.trial_id)

    # --------------------------------------------------------- pull helpers
    def _reset_buffers(self) -> None:
        self._dirty: set[int] = set()
        self._raw: dict[int, list[Any]] = {}  # trial -> reports since the last pull

    def _take_points(self) -> dict[int, Points]:
        """The reports since the last pull as curve points, bursts thinned to ``max_points``."""
        out: dict[int, Points] = {}
        metric, cap = self.metric, self.max_points
        for tid, new in self._raw.items():
            if cap is not None and len(new) > cap:
                # thin a burst (the simulator reports faster than any eye): an even
                # stride, always ending on the latest report
                stride = -(-len(new) // cap)
                new = new[(len(new) - 1) % stride::stride]
            if any(m.get(metric) is None for _, _, m in new):
                new = [r for r in new if r[2].get(metric) is not None]
            out[tid] = Points([b for _, b, _ in new], [m[metric] for _, _, m in new],
                              [w for w, _, _ in new])
        return out

    def _curve(self, tid: int) -> Points:
        c = self._rows[tid].curve  # the model's own copy, made on the engine's thread
        return Points(list(c.budget), list(c.value), list(c.time))

    def _find_best(self) -> int | None:
        """The rule of :attr:`Experiment.best` (:mod:`nbtune.core.best`): furthest-trained trials only."""
        rows = list(self._rows.items())
        i = best_index(((r.best, r.budget) for _, r in rows), self.mode)
        return None if i is None else rows[i][0]

    def display_state(self, tid: int) -> str:
        """How a trial is shown: its engine state, or ``best`` / ``promoted``.

        ``promoted`` marks a trial that won at least one rung and is not running,
        stopped or failed (waiting for its next rung, or trained to the end).
        """
        return "best" if tid == self._best else self._state(tid)

    def _state(self, tid: int) -> str:
        r = self._rows[tid]
        if r.state in (TrialState.RUNNING, TrialState.STOPPED, TrialState.ERROR):
            return r.state.value
        return "promoted" if r.promotions else r.state.value

    def _row_dict(self, tid: int) -> dict[str, Any]:
        r, state, best = self._rows[tid], self._state(tid), tid == self._best
        # the cell says what the best trial is doing, starred; its colour says "best"
        return {"trial_id": tid, "state": f"★ {state}" if best else state,
                "colour": "best" if best else state, "role": _role(r),
                "config": dict(r.config), self.metric: r.best, "last": r.last,
                "budget": r.budget, "promotions": r.promotions,
                "start": r.start, "end": r.end, "error": error_line(r.error)}

    def _progress(self, now: float) -> Progress:
        total = self._total
        settled = sum(1 for r in self._rows.values()
                      if r.state is TrialState.PAUSED or r.state.is_terminal)
        errors = sum(1 for r in self._rows.values() if r.state is TrialState.ERROR)
        ended = ended_of_total([r.state for r in self._rows.values()], total, self._done)
        if self._done:
            failed = 0 < errors == len(self._rows)
            return Progress(settled, total, 1.0, now, 0.0, errors, failed, ended)
        if not total:
            return Progress(settled, None, None, now, None, errors, ended=ended)
        frac = min(settled / total, 1.0)
        eta = now * (1.0 - frac) / frac if frac >= 0.02 and now > 0 else None
        return Progress(settled, total, frac, now, eta, errors, ended=ended)


def _role(r: _Row) -> str:
    """What the table's ``role`` column says: a Hydro target trial, a fused unit's member."""
    if is_target(r.config):
        return "target"
    return "" if r.unit is None else f"unit {r.unit}"
