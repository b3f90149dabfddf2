"""The engine: a pure state machine, ``handle(*events) -> list[Command]``.

Shaped like dask's ``worker_state_machine``: runtimes feed it facts (events stamped with
their own time) and carry out the commands it returns. It asks the algorithm for
TrialGroups and decisions and the allocator for placements; it never reads a clock and
never does I/O, so the simulator and the Dask runtime drive the very same object.
``validate=True`` re-checks every invariant after each call (:mod:`.invariants`).

One class holds the state and every change to it: the event handlers, the trial
transitions, the scheduling pass that runs once per :meth:`Engine.handle` (where
algorithm and allocator meet) and barrier filling (speculative runs of likely
promotions, :mod:`.barrier_fill`, which holds its records). Fused units are a
collaborator with state of its own (:class:`.fusion_units.FusionBinder`), reached through
the engine's public view.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any

from nbtune.algorithms.algorithm_protocol import BaseAlgorithm
from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator
from nbtune.allocators.fifo import FifoAllocator
from nbtune.core import events as ev
from nbtune.core.commands import Command, Finish, Launch, Pause, Resize, Stop
from nbtune.core.group import TrialGroup
from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.tolerance import EPS
from nbtune.core.trial import Decision, TrialRecord, TrialSpec, TrialState
from nbtune.engine import fusion_units, invariants
from nbtune.engine.barrier_fill import FillRecord, Speculation
from nbtune.engine.errors import EngineError
from nbtune.engine.state import ResourceLedger

__all__ = ["Engine", "EngineError", "Subscriber"]

Subscriber = Callable[[tuple[ev.Event, ...], list[Command]], None]

_NUMBER = (int, float)  # a metric the best-trial rule ranks (bool aside)
# read on every report: an enum's members are found through its metaclass, several times
# slower than a module's names
_RUNNING = TrialState.RUNNING
_CONTINUE, _STOP, _PAUSE = Decision.CONTINUE, Decision.STOP, Decision.PAUSE
_CHANGES_KEPT = 1 << 16  # trial_changes: the log is dropped past this length


class Engine:
    """Holds every trial's state; turns events into commands. Implements ``SchedulingView``."""

    def __init__(
        self,
        algorithm: BaseAlgorithm,
        allocator: BaseAllocator | None = None,
        *,
        validate: bool = False,
        max_failures: int = 0,
        hints: Mapping[str, Any] | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.allocator = allocator or FifoAllocator()
        self.validate = validate
        self.max_failures = int(max_failures)
        self.max_budget = algorithm.max_budget
        self.metric = algorithm.metric
        self.mode = algorithm.mode
        self._minimize = algorithm.mode == "min"
        self._hints: dict[str, Any] = dict(hints or {})
        self._started_hints: tuple[str, ...] = ()  # keys the last ExperimentStarted set
        self.time = 0.0
        self.trials: dict[int, TrialRecord] = {}
        self.groups: dict[int, TrialGroup] = {}
        self._pending: deque[TrialSpec] = deque()
        self.ledger = ResourceLedger()
        # LedgerView: the ledger's live read-only mappings (and its idle set), the same
        # objects for the engine's life; plain attributes, as the profiler reads one per event
        self.running: Mapping[int, Placement] = self.ledger.running
        self.gpu_load: Mapping[int, float] = self.ledger.gpu_load
        self.gpu_count: Mapping[int, int] = self.ledger.gpu_count
        self.idle_gpus: Set[int] = self.ledger.idle_gpus
        self.held: Mapping[int, Placement] = self.ledger.held
        self.max_concurrent: int | None = None
        self.started = False
        self.paused = False
        self.stopped = False
        self.done = False
        self.events_handled = 0
        # trial ids whose record (budget, results, target, config, measured time) or
        # placement changed, in order, repeats kept: see trial_changes
        self._changes: list[int] = []
        self._changes_base = 0  # marks before it were dropped
        self._rounds = 0  # handle calls, scheduling rounds, hints set: see state_version
        self.utilization: list[tuple[float, int, float, float]] = []
        self._dirty = True
        self._spec: dict[int, Speculation] = {}
        self.fill_log: list[FillRecord] = []  # every speculative launch, in order
        self._outbox: list[Command] = []
        self._subscribers: tuple[Subscriber, ...] = ()  # replaced whole: a call sees a snapshot
        self._handlers: dict[type, Callable[[Any, list[Command]], None]] = {
            ev.ExperimentStarted: self._on_started,
            ev.ResourcesChanged: self._on_resources,
            ev.TrialStarted: self._on_trial_started,
            ev.TrialReported: self._on_reported,
            ev.TrialFailed: self._on_failed,
            ev.TrialReturned: self._on_returned,
            ev.TrialHeld: self._on_held,
            ev.TrialRecomputed: self._on_recomputed,
            ev.TrialStopRequested: self._on_stop_requested,
            ev.ExperimentStopRequested: self._on_experiment_stop,
            ev.ExperimentPauseRequested: self._on_experiment_pause,
            ev.ExperimentResumeRequested: self._on_experiment_resume,
            ev.ConcurrencyChanged: self._on_concurrency,
            ev.UtilizationSampled: self._on_utilization,
            ev.TrialSampled: self._on_sampled,
            ev.UnitMemoryMeasured: self._on_unit_memory,
            ev.SnapshotRequested: self._on_snapshot_requested,
        }

    # ------------------------------------------------------------ public API
    def handle(self, *events: ev.Event) -> list[Command]:
        cmds: list[Command] = []
        handlers = self._handlers
        self._rounds += 1  # trials change from here on (and the subscribers' profiles at the end)
        if len(self._changes) > _CHANGES_KEPT:  # readers that fell this far behind rescan
            self._changes_base += len(self._changes)
            self._changes = []
        for e in events:
            t = e.time
            if t > self.time:
                self.time = t
            try:
                handler = handlers[type(e)]
            except KeyError:
                raise EngineError(f"engine does not know event {type(e).__name__}") from None
            handler(e, cmds)
        self.events_handled += len(events)
        if self._dirty and self.started and not self.done:
            self._schedule(cmds)
        if self._outbox:  # Stops for held processes, before a Finish
            cmds[:0] = self._outbox
            self._outbox = []
        if self.validate:
            self.check()
        if self._subscribers:
            for sub in self._subscribers:  # a snapshot: a subscriber may unsubscribe while called
                sub(events, cmds)
        self._rounds += 1  # what they learnt is read in the next round
        return cmds

    #: a second ``ExperimentStarted`` means "the runtime restarted" (resume), not an error
    restartable = False
    restarts = 0
    fusion: Any = None  # a fusion_units.FusionBinder once tune(fusion=F) enabled it

    def restart(self, e: ev.ExperimentStarted, cmds: list[Command]) -> None:
        """A new runtime took over: requeue the running trials first (from their checkpoints,
        no failure, as for a lost worker) and adopt its cluster."""
        self.restarts += 1
        if not self.done:
            for tid in reversed(list(self.ledger.placements)):
                self._requeue(tid, failed=False, front=True)
            self._on_resources(ev.ResourcesChanged(e.time, e.cluster), cmds)

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Call ``fn(events, commands)`` after every :meth:`handle`; returns an unsubscribe."""
        self._subscribers = (*self._subscribers, fn)
        return lambda: self._unsubscribe(fn)

    def _unsubscribe(self, fn: Subscriber) -> None:
        subs = list(self._subscribers)
        if fn in subs:
            subs.remove(fn)
            self._subscribers = tuple(subs)

    # ------------------------------------------------------ SchedulingView
    @property
    def cluster(self) -> ClusterSpec:
        if self.ledger.cluster is None:
            raise EngineError("no cluster yet: feed ExperimentStarted first")
        return self.ledger.cluster

    @property
    def pending(self) -> deque[TrialSpec]:
        return self._pending

    @property
    def hints(self) -> Mapping[str, Any]:
        return self._hints

    def set_hint(self, key: str, value: Any) -> None:
        """Give the allocator a measurement source (the runtime's profiler sets ``"profiles"``)."""
        self._hints[key] = value
        self._dirty = True
        self._rounds += 1

    @property
    def state_version(self) -> tuple[int, int]:
        """A stamp of what allocators read: equal stamps, the same running placements, loads,
        held trials, hints and profiles. It moves as each event batch is handled, as each
        scheduling round begins, after the subscribers (profilers) have seen a batch, and with
        each change of the ledger (launches, resizes, releases), so an allocator asked twice
        in a round (capacity, then allocate) may reuse what it derived the first time."""
        return (self._rounds, self.ledger.version)

    @property
    def speculating(self) -> Mapping[int, float]:  # trial -> budget: see .barrier_fill
        return {tid: sp.target for tid, sp in self._spec.items()}

    def trial(self, trial_id: int) -> TrialRecord:
        return self.trials[trial_id]

    def trial_changes(self, mark: int, running: Mapping[int, Placement]
                      ) -> tuple[int, list[int] | None]:
        """The mark now, and the trials whose record or placement changed since ``mark`` (a
        mark this returned before), in order, repeats kept. A reader keeping something
        derived from the running trials then redoes only those. None in place of the list
        when that is not known (the log was dropped since, or ``mark`` is -1); and no mark
        (-1) with it when ``running`` is not this engine's own (a view that shows the trials
        otherwise, as fused units): what was derived from it says nothing of the engine's."""
        if running is not self.running:
            return -1, None
        base, log = self._changes_base, self._changes
        return base + len(log), (log[mark - base:] if mark >= base else None)

    def in_running_order(self, tids: Iterable[int]) -> list[int]:
        """Those of ``tids`` that are running (each once), in the order of ``running``."""
        seq = self.ledger.placed_seq
        return sorted(set(filter(seq.__contains__, tids)), key=seq.__getitem__)

    def group(self, group_id: int) -> TrialGroup | None:
        return self.groups.get(group_id)

    def unit_time(self, trial_id: int) -> tuple[float, float] | None:
        t = self.trials.get(trial_id)
        return None if t is None else t.unit_time

    # --------------------------------------------------------------- events
    def _on_started(self, e: ev.ExperimentStarted, cmds: list[Command]) -> None:
        for key in self._started_hints:  # a restart's runtime says anew
            self._hints.pop(key, None)
        self._started_hints = tuple(e.hints)
        for key, value in e.hints.items():
            self.set_hint(key, value)
        if self.started:
            if not self.restartable:
                raise EngineError("ExperimentStarted fed twice")
            self.restart(e, cmds)
            return
        self.started = True
        self.ledger.set_cluster(e.cluster)
        self._dirty = True

    def _on_resources(self, e: ev.ResourcesChanged, cmds: list[Command]) -> None:
        for tid in self.ledger.set_cluster(e.cluster):
            cmds.append(Pause(tid))
            self._requeue(tid, failed=False)
        self._dirty = True

    def _on_trial_started(self, e: ev.TrialStarted, cmds: list[Command]) -> None:
        t = self.trials.get(e.trial_id)
        if t is not None and t.state is TrialState.RUNNING:
            t.last_mark = (e.time, t.budget_used)

    def _on_reported(self, e: ev.TrialReported, cmds: list[Command]) -> None:
        # the hot path: one call per budget unit of every trial
        tid = e.trial_id
        t = self.trials.get(tid)
        if t is None or t.state is not _RUNNING:
            return  # a late report from a trial already stopped: nothing to decide
        if self._spec and tid in self._spec:
            self._on_speculative_report(e)  # speculative: kept from the algorithm until promoted
            return
        b = e.budget
        if t.results and b <= t.budget_used + EPS:  # recorded: a relaunch recomputed it
            return self._on_recomputed(e, cmds)
        now = e.time
        prev = t.last_mark
        if prev is not None and b > prev[1] + EPS:
            first = t.unit_time is None
            t.unit_time = ((now - prev[0]) / (b - prev[1]), t.share)
            self._changes.append(tid)
            if first:  # an allocator that placed it on a guess may re-plan from this
                measured = getattr(self.allocator, "on_measured", None)
                if measured is not None and measured(tid):
                    self._dirty = True
        t.last_mark = (now, b)
        decision = self._record(t, e)
        if decision is not _CONTINUE or b >= t.target_budget - EPS:
            self._decide(t, b, decision, cmds)  # else it trains on (most reports)

    def _apply_report(self, t: TrialRecord, e: ev.TrialReported, cmds: list[Command]) -> None:
        """A result counts: record it, ask the algorithm, end the segment at its budget."""
        self._decide(t, e.budget, self._record(t, e), cmds)

    def _decide(self, t: TrialRecord, b: float, decision: Decision, cmds: list[Command]) -> None:
        """Carry out the algorithm's decision on a report at budget ``b``; the segment ends
        at its target budget whatever the decision."""
        running = t.state is _RUNNING
        if b >= t.target_budget - EPS:
            if decision is _STOP:
                self._end(t, TrialState.STOPPED)
            elif b >= self.max_budget - EPS:
                self._end(t, TrialState.COMPLETED)
            else:
                self._pause(t)
        elif decision is _STOP:
            if running:
                cmds.append(Stop(t.trial_id))
            self._end(t, TrialState.STOPPED)
        elif decision is _PAUSE and running:
            cmds.append(Pause(t.trial_id))
            self._pause(t)

    def _record(self, t: TrialRecord, e: ev.TrialReported) -> Decision:
        b = e.budget
        if b > t.budget_used:
            t.budget_used = b
        metrics = e.metrics
        value = metrics.get(self.metric)
        kind = type(value)  # a float, most often: one check instead of two isinstance calls
        if kind is float or (kind is not bool and isinstance(value, _NUMBER)):  # text: not ranked
            t.last = value
            best = t.best
            if best is None or (value < best if self._minimize else value > best):
                t.best = value
        t.results.append((e.time, b, metrics))
        self._changes.append(t.trial_id)
        return self.algorithm.on_report(t.trial_id, b, metrics)

    def _on_held(self, e: ev.TrialHeld, cmds: list[Command]) -> None:
        t = self.trials.get(e.trial_id)
        if t is not None and t.state is TrialState.PAUSED and self.ledger.hold(e.trial_id):
            self._dirty = True  # an allocator may now prefer its placement
        elif t is not None and t.state.is_terminal:
            cmds.append(Stop(e.trial_id))  # ended before its process said it waits

    def _on_recomputed(self, e: ev.TrialRecomputed, cmds: list[Command]) -> None:
        if (t := self.trials.get(e.trial_id)) is not None:
            t.recomputed += 1.0

    def _on_failed(self, e: ev.TrialFailed, cmds: list[Command]) -> None:
        t = self.trials.get(e.trial_id)
        if t is None or t.state is not TrialState.RUNNING:
            return
        msg = e.error or "trial failed"
        t.error = f"out of memory: {msg}" if e.out_of_memory else msg
        self._requeue(t.trial_id, failed=not e.worker_lost)

    def _on_returned(self, e: ev.TrialReturned, cmds: list[Command]) -> None:
        if (t := self.trials.get(e.trial_id)) is not None and t.state is TrialState.RUNNING:
            self._end(t, TrialState.COMPLETED)  # at its last report: nothing is retried

    def _on_stop_requested(self, e: ev.TrialStopRequested, cmds: list[Command]) -> None:
        t = self.trials.get(e.trial_id)
        if t is None or t.state.is_terminal:
            return
        if t.state is TrialState.RUNNING:
            cmds.append(Stop(t.trial_id))
        elif t.state is TrialState.PENDING:
            self._drop_pending(t.trial_id)
        self._end(t, TrialState.STOPPED)

    def _on_experiment_stop(self, e: ev.ExperimentStopRequested, cmds: list[Command]) -> None:
        for t in list(self.trials.values()):
            if t.state is TrialState.RUNNING:
                cmds.append(Stop(t.trial_id))
            if not t.state.is_terminal:
                self._end(t, TrialState.STOPPED)
        self._pending.clear()
        self.stopped = True
        self._finish(cmds)

    def _on_experiment_pause(self, e: ev.ExperimentPauseRequested, cmds: list[Command]) -> None:
        self.paused = True
        for tid in list(self.ledger.placements):
            cmds.append(Pause(tid))
            self._requeue(tid, failed=False, front=True)

    def _on_experiment_resume(self, e: ev.ExperimentResumeRequested, cmds: list[Command]) -> None:
        self.paused = False
        self._dirty = True

    def _on_concurrency(self, e: ev.ConcurrencyChanged, cmds: list[Command]) -> None:
        if e.max_concurrent is not None and e.max_concurrent < 1:
            raise EngineError(f"max_concurrent must be >= 1 or None, got {e.max_concurrent}")
        self.max_concurrent = e.max_concurrent
        if e.max_concurrent is not None:
            # the most recently launched give way first
            for tid in reversed(list(self.ledger.placements)[e.max_concurrent:]):
                cmds.append(Pause(tid))
                self._requeue(tid, failed=False, front=True)
        self._dirty = True

    def _on_sampled(self, e: ev.TrialSampled, cmds: list[Command]) -> None:
        pass  # for the runtime's profiler (a subscriber); nothing to decide

    def _on_snapshot_requested(self, e: ev.SnapshotRequested, cmds: list[Command]) -> None:
        pass  # for the subscribers: they copy the state on this thread; nothing to decide

    def _on_unit_memory(self, e: ev.UnitMemoryMeasured, cmds: list[Command]) -> None:
        if fusion_units.measured(self, e):  # F_max from memory (tune(..., fusion=True))
            self._dirty = True  # pending trials may now fuse wider

    def _on_utilization(self, e: ev.UtilizationSampled, cmds: list[Command]) -> None:
        for g, u in e.gpu_util.items():
            self.utilization.append((e.time, g, float(u), float(e.gpu_memory_gb.get(g, 0.0))))

    # ------------------------------------------------------------ transitions
    def _release(self, t: TrialRecord, *, pause: bool = False) -> None:
        if self.ledger.release(t, self.time, pause=pause) is not None:  # banks GPU-seconds
            t.last_mark = None
            self._changes.append(t.trial_id)
        self._dirty = True

    def _pause(self, t: TrialRecord) -> None:
        self._release(t, pause=True)  # the ledger remembers where it paused
        t.transition(TrialState.PAUSED)
        self.algorithm.on_segment_end(t.trial_id, t.budget_used)

    def _end(self, t: TrialRecord, state: TrialState) -> None:
        self._spec.pop(t.trial_id, None)
        if self.ledger.forget(t.trial_id):
            self._outbox.append(Stop(t.trial_id))  # its waiting process must end too
        self._release(t)
        t.transition(state)
        t.end_time = self.time
        if t.group_id is not None and t.group_id in self.groups:
            self.groups[t.group_id].leave(t.trial_id)
        self.algorithm.on_trial_end(t.trial_id, state)

    def _requeue(self, trial_id: int, *, failed: bool, front: bool = False) -> None:
        """Put a running trial back in the queue (from its checkpoint), or fail it for good."""
        if trial_id in self._spec and self._drop_speculation(trial_id):
            return  # a speculative run yields: its trial waits for its verdict
        t = self.trials[trial_id]
        self._release(t)
        if failed:
            t.failures += 1
            if t.failures > self.max_failures:
                t.transition(TrialState.ERROR)
                t.end_time = self.time
                if t.group_id is not None and t.group_id in self.groups:
                    self.groups[t.group_id].leave(trial_id)
                self.algorithm.on_trial_end(trial_id, TrialState.ERROR)
                return
        t.transition(TrialState.PENDING)
        spec = TrialSpec(trial_id, t.config, t.target_budget, None, t.group_id)
        (self._pending.appendleft if front else self._pending.append)(spec)

    def _drop_pending(self, trial_id: int) -> None:
        self._pending = deque(s for s in self._pending if s.trial_id != trial_id)

    def _finish(self, cmds: list[Command]) -> None:
        if self.done:
            return
        for t in self.trials.values():
            if t.state is TrialState.PAUSED:
                self._end(t, TrialState.STOPPED)
        self.done = True
        cmds.append(Finish())

    # ------------------------------------------------------- scheduling pass
    # After the handlers, when something changed, :meth:`_schedule` runs once per
    # :meth:`handle`: it asks the algorithm for TrialGroups while the allocator has room,
    # admits each spec (a new trial, or a paused one resumed), asks the allocator for
    # placements and turns its :class:`Allocation` into ledger changes and Launch/Resize
    # commands. Times come from ``self.time``: no clock is read.
    def _admit(self, spec: TrialSpec, cmds: list[Command]) -> bool:
        """Queue the spec (a new trial or a paused one resumed); True if it closed a segment at once."""
        if spec.budget > self.max_budget + EPS:
            raise EngineError(
                f"{self.algorithm.name}: trial {spec.trial_id} asks for budget {spec.budget} "
                f"> max_budget {self.max_budget}"
            )
        if self._spec and spec.trial_id in self._spec:
            # promoted while speculating: it runs on, or its segment closes now (True)
            return self._adopt(spec, cmds)
        t = self.trials.get(spec.trial_id)
        if t is None:
            t = TrialRecord(spec.trial_id, dict(spec.config), group_id=spec.group_id)
            self.trials[spec.trial_id] = t
        elif t.state is not TrialState.PAUSED:
            raise EngineError(
                f"{self.algorithm.name}: resumed trial {spec.trial_id} is {t.state.value}, "
                "only paused trials can be resumed"
            )
        else:
            t.transition(TrialState.PENDING)
            t.config = dict(spec.config)
            t.group_id = spec.group_id
        if spec.restore_from is not None:
            donor = self.trials.get(spec.restore_from)
            if donor is None:
                raise EngineError(f"trial {spec.trial_id} restores from unknown {spec.restore_from}")
            t.budget_used = donor.budget_used
        t.restore_from = spec.restore_from
        if spec.budget <= t.budget_used + EPS:
            raise EngineError(
                f"{self.algorithm.name}: trial {spec.trial_id} asks for budget {spec.budget} "
                f"but has already used {t.budget_used}"
            )
        t.target_budget = spec.budget
        self._changes.append(spec.trial_id)
        self._pending.append(spec)
        return False

    def _schedule(self, cmds: list[Command]) -> None:
        self._dirty = False
        self._rounds += 1
        if self.paused or self.stopped:
            return
        closed = False
        fused = self.fusion is not None  # units of trials: see .fusion_units
        for _ in range(4):
            room = (fusion_units.capacity(self) if fused else self.allocator.capacity(self)) \
                - len(self._pending)
            if room <= 0 or self.algorithm.finished:
                break
            groups = self.algorithm.ask(room)
            self._retire()
            if not groups:
                break
            for g in groups:
                self.groups[g.group_id] = g
                for spec in g.specs:
                    closed = self._admit(spec, cmds) or closed
        # called even with an empty queue: freed GPUs may be worth giving to running trials
        if fused:
            self._apply_allocation(fusion_units.allocate(self), cmds)
            if self._split_idle(cmds):  # idle workers take half a running unit
                self._apply_allocation(fusion_units.allocate(self), cmds)
        else:
            self._apply_allocation(self.allocator.allocate(self), cmds)
        if self._spec and self._pending and self._yield_to_pending(cmds):
            self._apply_allocation(self.allocator.allocate(self), cmds)  # real work takes their GPUs
        self._retire()
        if not fused:  # a speculative run is one trial alone: not with fused units
            self._fill(cmds)
        if closed and not self.ledger.placements and not self.done:
            self._schedule(cmds)  # a promotion closed a speculated segment: the algorithm has more
            return
        if not self.ledger.placements:
            if self._pending:
                raise EngineError(
                    f"allocator {self.allocator.name!r} placed none of {len(self._pending)} "
                    "pending trials on an idle cluster: a trial needs more than the cluster has"
                )
            if self.algorithm.finished:
                self._finish(cmds)
            elif not self.paused:
                raise EngineError(
                    f"algorithm {self.algorithm.name!r} stalled: nothing runs, nothing is "
                    "pending, and it returned no work while not finished"
                )

    def _retire(self) -> None:
        for tid in self.algorithm.pop_retired():
            t = self.trials.get(tid)
            if self._spec and self._retire_speculation(tid):
                continue
            if t is not None and t.state is TrialState.PAUSED:
                self._end(t, TrialState.STOPPED)

    def _apply_allocation(self, alloc: Allocation, cmds: list[Command]) -> None:
        if alloc.launch:
            launched: list[TrialSpec] = []
            keep: deque[TrialSpec] = deque()
            n = len(alloc.launch)
            prefix = all(
                i < len(self._pending) and self._pending[i].trial_id in alloc.launch
                for i in range(n)
            )
            if prefix:
                for _ in range(n):
                    launched.append(self._pending.popleft())
            else:
                for s in self._pending:
                    (launched if s.trial_id in alloc.launch else keep).append(s)
                self._pending = keep
            if len(launched) != n:
                raise EngineError(f"allocator {self.allocator.name!r} launched unknown trials")
            for spec in launched:
                self._launch(spec, alloc.launch[spec.trial_id], cmds)
        for tid, placement in alloc.resize.items():
            t = self.trials[tid]
            if t.state is not TrialState.RUNNING:
                raise EngineError(f"allocator resized trial {tid} which is {t.state.value}")
            if placement == self.ledger.placements.get(tid):
                continue
            self.ledger.release(t, self.time)  # banks its GPU-seconds at the old share
            self.ledger.place(t, placement, self.time)
            self._changes.append(tid)
            t.last_mark = (self.time, t.budget_used)
            cmds.append(Resize(tid, placement))

    def _launch(self, spec: TrialSpec, placement: Placement, cmds: list[Command]) -> None:
        t = self.trials[spec.trial_id]
        t.transition(TrialState.RUNNING)
        self.ledger.place(t, placement, self.time)  # no longer paused (or held) anywhere
        self._changes.append(spec.trial_id)
        if t.start_time is None:
            t.start_time = self.time
        t.last_mark = (self.time, t.budget_used)
        unit = self.fusion.launching.pop(t.trial_id, None) if self.fusion is not None else None
        t.unit = unit
        cmds.append(
            Launch(t.trial_id, t.config, t.budget_used, t.target_budget, placement,
                   spec.restore_from, unit, () if unit is None else self.fusion.members[unit])
        )

    def _split_idle(self, cmds: list[Command]) -> bool:
        """Elastic split of a fused unit (:func:`.fusion_units.split_idle`): the members it
        gives away are paused and requeued at the front; True when there were any."""
        members = fusion_units.split_idle(self)
        for tid in members:
            cmds.append(Pause(tid))
            self._requeue(tid, failed=False, front=True)
        return bool(members)

    # ------------------------------------------------------- barrier filling
    # Speculative runs of likely promotions on workers a synchronous rung leaves idle;
    # the policy and its guarantees are described in :mod:`.barrier_fill`.
    def _fill(self, cmds: list[Command]) -> None:
        """Give idle GPUs to the algorithm's likely promotions (nothing real is waiting)."""
        if self._pending or self.paused or self.stopped or not self.ledger.idle:
            return

        for spec in self.algorithm.speculate():
            if self.max_concurrent is not None and len(self.ledger.placements) >= self.max_concurrent:
                return
            tid = spec.trial_id
            t = self.trials.get(tid)
            where = self.ledger.paused_on.get(tid)
            if (t is None or t.state is not TrialState.PAUSED or tid in self._spec or where is None
                    or spec.budget <= t.budget_used + EPS or spec.budget > self.max_budget + EPS):
                continue
            idle = self.ledger.idle
            if not all(g in idle for g, _ in where):
                continue  # only where it paused: a waiting process goes on, a GPU in use is not taken
            rec = FillRecord(self.time, tid, tuple(where), t.budget_used, float(spec.budget),
                             len(self.ledger.log))
            self.fill_log.append(rec)
            self._spec[tid] = Speculation(float(spec.budget), t.target_budget, record=rec)
            t.transition(TrialState.PENDING)
            t.target_budget = float(spec.budget)
            self._changes.append(tid)
            self._launch(TrialSpec(tid, t.config, spec.budget, None, t.group_id), where, cmds)
            if not self.ledger.idle:
                return

    def _on_speculative_report(self, e: ev.TrialReported) -> None:
        """Buffer a speculative report; at its target the run pauses and waits for the verdict."""
        t = self.trials[e.trial_id]
        sp = self._spec[e.trial_id]
        prev = t.last_mark
        if prev is not None and e.budget > prev[1] + EPS:
            t.unit_time = ((e.time - prev[0]) / (e.budget - prev[1]), t.share)
            self._changes.append(e.trial_id)
        t.last_mark = (e.time, e.budget)
        sp.reports.append(e)
        if e.budget >= sp.target - EPS:
            self._release(t, pause=True)
            t.transition(TrialState.PAUSED)
            sp.done = True
        if sp.promoted is not None:
            self._flush_speculation(t, sp)

    def _flush_speculation(self, t: TrialRecord, sp: Speculation) -> bool:
        """Hand the algorithm the buffered reports up to the promoted budget; True if it was reached.

        The run itself goes on (speculatively, past the promotion) where it is.
        """
        assert sp.promoted is not None
        while sp.reports and sp.reports[0].budget <= sp.promoted + EPS:
            self._record(t, sp.reports.pop(0))
        if t.budget_used < sp.promoted - EPS:
            return False
        sp.rung_target, sp.promoted = sp.promoted, None
        self.algorithm.on_segment_end(t.trial_id, sp.rung_target)
        self._dirty = True
        return True

    def _adopt(self, spec: TrialSpec, cmds: list[Command]) -> bool:
        """The algorithm promoted a speculating trial: replay its reports; True if the segment closed.

        Promoted to the budget it was speculated to: it becomes an ordinary trial
        (running on, or its segment closes here with the replay's last report).
        Promoted to a rung below that (the run speculates on past it): the reports
        up to the rung are handed over now or as they come, and the run goes on.
        Either way it is not queued again.
        """
        tid = spec.trial_id
        sp = self._spec[tid]
        t = self.trials[tid]
        if spec.budget > sp.target + EPS:
            raise EngineError(
                f"{self.algorithm.name}: trial {tid} was speculated to budget {sp.target} but "
                f"promoted to {spec.budget}: speculate() must name a budget its promotions reach"
            )
        t.config = dict(spec.config)
        t.group_id = spec.group_id
        self._changes.append(tid)
        sp.settle("adopted")
        if spec.budget < sp.target - EPS:
            sp.promoted = float(spec.budget)
            return self._flush_speculation(t, sp)
        del self._spec[tid]
        t.target_budget = float(spec.budget)
        self._changes.append(tid)
        for r in sp.reports:
            if t.state.is_terminal:
                break
            self._apply_report(t, r, cmds)
        return t.state is not TrialState.RUNNING

    def _drop_speculation(self, trial_id: int) -> bool:
        """Forget a speculation (its run yields or failed); True if nothing real was lost.

        A purely speculative trial is paused where its rung left it. One already
        promoted (running past the rung it was promoted to) becomes an ordinary
        trial of that rung and False is returned: the caller requeues it as any other.
        """
        sp = self._spec.pop(trial_id)
        if sp.promoted is None:
            sp.settle("yielded")
        t = self.trials[trial_id]
        self.ledger.forget(trial_id)  # its process went on or ended: nothing waits there
        self._changes.append(trial_id)
        if sp.promoted is not None:
            t.target_budget = sp.promoted
            return False
        if t.state is TrialState.RUNNING:
            self._release(t)
            t.transition(TrialState.PAUSED)
        t.target_budget = sp.rung_target
        self._changes.append(trial_id)
        return True

    def _retire_speculation(self, trial_id: int) -> bool:
        """The algorithm retired a speculating trial: stop its run, drop its reports; True if it was."""
        if trial_id not in self._spec:
            return False
        self._spec.pop(trial_id).settle("retired")
        t = self.trials[trial_id]
        if t.state is TrialState.RUNNING:
            self._outbox.append(Stop(trial_id))
        self._end(t, TrialState.STOPPED)
        return True

    def _yield_to_pending(self, cmds: list[Command]) -> bool:
        """Pause every running speculation while real work waits; True if any yielded."""
        if not self._pending:
            return False
        running = [tid for tid, sp in self._spec.items()
                   if sp.promoted is None and self.trials[tid].state is TrialState.RUNNING]
        for tid in running:
            cmds.append(Pause(tid))
            self._drop_speculation(tid)
        return bool(running)

    # ------------------------------------------------------------ validation
    def check(self) -> None:
        """Raise :class:`InvariantError` if any invariant is broken (see :mod:`.invariants`)."""
        invariants.check(self)
