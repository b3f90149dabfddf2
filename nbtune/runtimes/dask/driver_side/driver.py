"""One experiment's runs: engine commands carried out on workers, worker messages as events.

:class:`RunDriver` is made by :class:`~nbtune.runtimes.dask.DaskRuntime` when an
experiment starts, with what it needs passed in (engine, clock, inventory, links to
the workers, :class:`~.jobs.RunSettings`), and owns the experiment's run state: the
live runs, launches and clones waiting for a process to exit, the checkpoints the
trials wrote, when Finish's grace ends. The runtime's loop routes worker arrivals
and losses to :class:`~.membership.Membership`, trial messages and failed launches
here (:meth:`RunDriver.translate`), the engine's commands to :meth:`RunDriver.execute`.
All of it runs on the driver thread, which is what makes touching the engine safe.

A *run* is one process group (one process per rank) training one trial from
``start_step`` toward ``budget``. A trial has at most one live run; a Launch for a
trial whose previous run is still writing its last checkpoint waits (``deferred``)
until that run exits; a clone of a trial whose process is still writing the
checkpoint it clones waits for that process (``clones``), and a clone of a clone not
started yet for that start (which files the state it clones); a resize relaunches the
trial on the engine's current placement from its newest checkpoint. Fused units are
a collaborator (:class:`UnitRuns`, :mod:`.fused_job`) offered each command, message
and run end first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any, Protocol, cast

from nbtune.core import events as ev
from nbtune.core.commands import Command, Finish, Launch, Pause, Resize, Stop
from nbtune.core.resources import Placement
from nbtune.core.trial import TrialState
from nbtune.runtimes.dask import checkpoints as ck
from nbtune.runtimes.dask.driver_side import runs
from nbtune.runtimes.dask.driver_side.jobs import (
    RunSettings,
    rank_jobs,
    resizes_in_place,
    restore_point,
)
from nbtune.runtimes.dask.driver_side.runs import EPS, Run, RunRank, WallClock, overdue, rank_env
from nbtune.runtimes.dask.protocol import (
    Checkpointed,
    Control,
    Exit,
    Go,
    Held,
    Kill,
    Message,
    Recomputed,
    Report,
    Started,
    StopRequest,
    TrialMessage,
    Utilization,
    decode,
    encode,
)

if TYPE_CHECKING:
    from nbtune.engine.engine import Engine
    from nbtune.runtimes.dask.driver_side.cluster import Inventory, Slot
    from nbtune.runtimes.dask.driver_side.links import WorkerLinks

__all__ = ["RunDriver", "UnitRuns", "launches_first"]

class UnitRuns(Protocol):
    """Fused units (:class:`.fused_job.FusedUnits`): offered each batch of commands, each
    message, failed launch and run end first; None (or the commands left) says "not mine"."""

    def take(self, cmds: list[Command]) -> list[Command]: ...
    def on_msg(self, m: dict[str, Any], now: float) -> list[ev.Event] | None: ...
    def on_launch_failed(self, run_id: int, rank: int, error: str, lost: bool,
                         now: float) -> list[ev.Event] | None: ...
    def end_runs_on(self, address: str, now: float) -> list[ev.Event]: ...
    def end_run(self, run: Run, now: float) -> list[ev.Event] | None: ...
    def restart_waiting(self) -> None: ...


class RunDriver:
    """The per-run state machine of one experiment on the Dask runtime."""

    def __init__(self, engine: Engine, clock: WallClock, inventory: Inventory,
                 links: WorkerLinks, settings: RunSettings, run_ids: Iterator[int],
                 units: Callable[[RunDriver], UnitRuns]) -> None:
        self.engine = engine
        self.clock = clock
        self.inventory = inventory
        self.links = links
        self.settings = settings
        self._run_ids = run_ids  # the runtime's: run ids stay unique across its experiments
        #: live runs by trial id (a fused unit's under a negative key, ``fused_job.run_key``)
        self.runs: dict[int, Run] = {}
        self.by_id: dict[int, Run] = {}
        #: Launches waiting for the trial's previous process to exit
        self.deferred: dict[int, Launch] = {}
        #: clones waiting for their donor's process to write the checkpoint they clone
        self.clones: dict[int, list[Launch]] = {}
        #: latest checkpoint per trial, ``trial_id -> (step, path)``, as the trials wrote them
        self.checkpoints: dict[int, tuple[float, str]] = {}
        #: ``time.monotonic()`` when Finish's grace ends (None until the engine says Finish)
        self.finish_at: float | None = None
        #: events made between batches (a relaunch that could not start), for the next one
        self.pending: list[ev.Event] = []
        self.units = units(self)  # fused units (.fused_job.FusedUnits)

    @property
    def finishing(self) -> bool:
        """The engine said Finish: the runs are ending, the cluster's changes no longer count."""
        return self.finish_at is not None

    @property
    def finished(self) -> bool:
        """Finish came and every run is gone: the experiment is over."""
        return self.finish_at is not None and not self.runs and not self.pending

    def take_pending(self) -> list[ev.Event]:
        out, self.pending = self.pending, []
        return out

    # ------------------------------------------------------------ messages
    def translate(self, kind: str, payload: Any, now: float) -> list[ev.Event]:
        """Engine events for a ``msgs`` batch (wire forms) or a ``launch_failed`` inbox item."""
        if kind == "msgs":
            out: list[ev.Event] = []
            for raw in payload:
                out.extend(self._on_msg(decode(raw), now))
            return out
        if kind == "launch_failed":
            return self._on_launch_failed(*payload, now)
        raise AssertionError(f"unknown inbox item {kind!r}")

    def _on_msg(self, m: Message, now: float) -> list[ev.Event]:
        fused = self.units.on_msg(m, now)
        if fused is not None:
            return fused
        if isinstance(m, Utilization):
            return self._on_util(m, now)
        if isinstance(m, Checkpointed):
            return self.on_checkpoint(m)
        if not isinstance(m, TrialMessage) or m.run is None:
            return []
        run = self.by_id.get(int(m.run))
        if run is None:
            return []
        if isinstance(m, Started):
            if int(m.rank or 0) == 0 and not run.started and run.cancelled is None:
                run.started = True
                return [ev.TrialStarted(now, run.trial_id)]
            return []
        if isinstance(m, Report):
            if run.cancelled is not None:
                return []  # the engine already stopped or paused it: later progress is not counted
            run.reported(m)
            self.settings.execution.observe(m)  # auto execution's work per report
            return [ev.TrialReported(now, run.trial_id, float(m.step), dict(m.metrics))]
        if isinstance(m, Recomputed):
            return [ev.TrialRecomputed(now, run.trial_id, float(m.step))]
        if isinstance(m, Held):
            return self._on_held(run, now)
        if isinstance(m, Exit):
            return self.rank_exited(run, int(m.rank or 0), m, now)
        return []

    def on_checkpoint(self, m: Checkpointed) -> list[ev.Event]:
        """Record a checkpoint a trial wrote (``m.trial``), the newest step kept."""
        if m.run is None or int(m.run) not in self.by_id:
            return []  # a run the driver already ended (killed after a broken stream)
        tid = int(m.trial if m.trial is not None else -1)
        prev = self.checkpoints.get(tid)
        if prev is None or m.step >= prev[0] - EPS:
            self.checkpoints[tid] = (float(m.step), str(m.path))
        return []

    def _on_held(self, run: Run, now: float) -> list[ev.Event]:
        """The run's process waits at its segment's end: a promotion may have come already."""
        if run.cancelled is not None:
            return []
        run.held = True
        launch = self.deferred.pop(run.trial_id, None)
        if launch is not None:
            self._launch(launch)
            return []
        return [ev.TrialHeld(now, run.trial_id)]

    def _go_on(self, run: Run, c: Launch) -> bool:
        """Let a held run train on toward ``c.budget`` where it is, if ``c`` allows it."""
        placement = self.engine.running.get(c.trial_id)
        if (placement is None or len(run.ranks) != 1 or len(placement) != 1
                or placement[0][0] != run.placement[0][0]
                or c.restore_from not in (None, c.trial_id)
                or abs(c.start_budget - run.last_step) > EPS):
            return False
        slot = self.inventory.slots.get(placement[0][0])
        if slot is None:
            return False
        threads, _ = rank_env(c.trial_id, slot, placement[0][1], gpus=self.settings.gpus,
                              mps=self.settings.mps)
        run.held, run.budget, run.placement = False, float(c.budget), placement
        self.signal(run, Go(budget=float(c.budget), threads=threads))
        self.pending.append(ev.TrialStarted(self.clock.now(), c.trial_id))
        return True

    def _on_util(self, m: Utilization, now: float) -> list[ev.Event]:
        ids = {s.index: s.gpu_id for s in self.inventory.slots.values() if s.worker == m.worker}
        util = {ids[i]: float(u) for i, u in enumerate(m.util) if i in ids}
        mem = {ids[i]: float(x) for i, x in enumerate(m.mem) if i in ids}
        want = {ids[i]: float(x) for i, x in enumerate(m.demand or ())
                if i in ids and x is not None}
        return [ev.UtilizationSampled(now, util, mem, want)] if util else []

    def _on_launch_failed(self, run_id: int, rank: int, error: str, lost: bool,
                          now: float) -> list[ev.Event]:
        fused = self.units.on_launch_failed(run_id, rank, error, lost, now)
        if fused is not None:
            return fused
        run = self.by_id.get(run_id)
        if run is None or run.ranks[rank].exited:
            return []
        if lost and run.cancelled is None:
            # unreachable worker: the trial is requeued, not failed; every rank is told to die
            # (its launch may have landed first: a kill for a rank not started waits for it)
            t = self.engine.trials.get(run.trial_id)
            running = t is not None and t.state is TrialState.RUNNING
            if running:
                self.deferred.pop(run.trial_id, None)
            run.cancelled = "lost"
            self.signal(run, Kill(reason=error))
            for r in run.ranks:
                r.exited = True
            out = self.finalize(run, now)
            if running:
                out.insert(0, ev.TrialFailed(now, run.trial_id, worker_lost=True, error=error))
            return out
        return self.rank_exited(run, rank, Exit(ok=False, oom=False, error=error), now)

    def enforce_deadlines(self) -> None:
        """Kill the runs still alive after Finish's grace, and those past ``trial_timeout``."""
        now_m = time.monotonic()
        if self.finish_at is not None and now_m > self.finish_at:
            for run in list(self.runs.values()):
                if run.cancelled != "killed":
                    run.cancelled = "killed"
                    self.signal(run, Kill(reason="still running after Finish"))
            self.finish_at = now_m + self.settings.shutdown_grace
        for run in overdue(list(self.runs.values()), self.settings.trial_timeout, now_m):
            self.signal(run, Kill(reason="trial_timeout"))

    # ------------------------------------------------------------ run ends
    def rank_exited(self, run: Run, rank: int, m: Exit, now: float) -> list[ev.Event]:
        r = run.ranks[rank]
        if r.exited:
            return []
        r.exited = True
        if not m.ok and run.error is None and not m.killed:
            run.error = m
            if len(run.ranks) > 1:  # the others would hang in a collective
                self.signal(run, Kill(reason=f"rank {rank} failed"))
        if all(x.exited for x in run.ranks):
            return self.finalize(run, now)
        return []

    def finalize(self, run: Run, now: float) -> list[ev.Event]:
        """Every rank of ``run`` is gone: end it, then start what waited for it."""
        fused = self.units.end_run(run, now)
        out = self._end_run(run, now) if fused is None else fused
        self.units.restart_waiting()  # a member's old process is gone: its unit may start
        # clones waiting for this donor's last checkpoint (PBT's exploit) may start now
        for c in self.clones.pop(run.trial_id, []):
            self._launch(c)
        return out

    def _end_run(self, run: Run, now: float) -> list[ev.Event]:
        tid = run.trial_id
        if self.runs.get(tid) is run:
            del self.runs[tid]
        self.by_id.pop(run.run_id, None)
        t = self.engine.trials.get(tid)
        running = t is not None and t.state is TrialState.RUNNING
        if run.cancelled is not None:
            outcome = None
        elif run.error is not None:
            outcome = ev.TrialFailed(now, tid, error=str(run.error.error or "trial failed"),
                                     out_of_memory=bool(run.error.oom))
        elif tid in self.deferred or run.resize or run.last_step >= run.budget - EPS:
            outcome = None
        else:  # completed at its last report, or failed when it never reported
            outcome = runs.returned_early(run, now)
        if outcome is not None:
            self.deferred.pop(tid, None)
            return [outcome] if running else []
        if run.cancelled == "killed":
            return []  # the experiment is over
        # after "lost" the engine requeued the trial; its relaunch may have come while a
        # surviving rank was still being killed, and waited for this moment in deferred
        launch = self.deferred.pop(tid, None)
        if run.cancelled == "lost" and launch is None:
            return []
        if not running or tid not in self.engine.running:
            return []
        placement = self.engine.running[tid]
        if launch is not None:
            self.start_run(tid, launch.config, launch.start_budget, launch.budget, placement,
                           launch.restore_from)
        elif run.resize and run.last_step < run.budget - EPS:
            self.start_run(tid, run.config, run.last_step, run.budget, placement, None)
        return []

    def end_runs_on(self, address: str, now: float) -> list[ev.Event]:
        """A worker left (or its stream broke): its runs end, their trials are requeued.

        The kill goes to every rank, those on ``address`` included: after a broken stream
        the worker may be alive, and its processes must not train on beside the relaunch.
        After Finish the runs just end (no events), so the experiment can finish.
        """
        finishing = self.finish_at is not None
        out = self.units.end_runs_on(address, now)
        for run in list(self.runs.values()):
            hit = [i for i, r in enumerate(run.ranks) if r.worker == address]
            if not hit:
                continue
            t = self.engine.trials.get(run.trial_id)
            if (not finishing and run.cancelled is None and t is not None
                    and t.state is TrialState.RUNNING):
                out.append(ev.TrialFailed(now, run.trial_id, worker_lost=True,
                                          error=f"worker {address} was lost"))
                self.deferred.pop(run.trial_id, None)
            run.cancelled = "killed" if finishing else "lost"
            self.signal(run, Kill(reason=f"worker {address} was lost"))
            for i in hit:
                run.ranks[i].exited = True
            if all(r.exited for r in run.ranks):
                out.extend(self.finalize(run, now))
        return out

    def kill_all(self, reason: str) -> None:
        """Kill every live run's processes (the runtime closed, or the driver failed)."""
        for run in list(self.runs.values()):
            self.signal(run, Kill(reason=reason))

    # ------------------------------------------------------------ commands
    def execute(self, cmds: list[Command]) -> None:
        cmds = self.units.take(cmds)  # a fused unit's launches, its members' stops
        for c in launches_first(cmds, self.runs.keys() | self.deferred.keys()):
            if isinstance(c, Launch):
                donor_id = c.restore_from if c.restore_from not in (None, c.trial_id) else None
                donor = None if donor_id is None else self.runs.get(donor_id)
                if donor is not None and donor.last_step <= c.start_budget + EPS:
                    # the donor's process may still be writing that checkpoint: wait for it
                    self.clones.setdefault(donor.trial_id, []).append(c)
                elif donor is None and donor_id is not None and self._waits_to_launch(donor_id):
                    # the donor is a clone not started yet: the state it will start from is
                    # filed as its checkpoint only when it starts
                    self.clones.setdefault(donor_id, []).append(c)
                else:
                    self._launch(c)
            elif isinstance(c, Resize):
                run = self.runs.get(c.trial_id)
                if run is not None and run.cancelled is None and not run.resize:
                    if resizes_in_place(run, c.placement, self.inventory.slots, self.settings):
                        run.placement = c.placement  # same workers: only the books change
                        continue
                    run.resize = True
                    self.signal(run, StopRequest(reason="resize"))
            elif isinstance(c, Pause | Stop):
                self.deferred.pop(c.trial_id, None)
                run = self.runs.get(c.trial_id)
                if run is not None and run.cancelled is None:
                    reason = "pause" if isinstance(c, Pause) else "stop"
                    run.cancelled, run.resize = reason, False
                    self.signal(run, StopRequest(reason=reason))
            elif isinstance(c, Finish):
                self.finish_at = time.monotonic() + self.settings.shutdown_grace
        Run.send_verdicts(list(self.runs.values()), self.signal)  # after any stop it was sent

    def _launch(self, c: Launch) -> None:
        """Carry out a Launch now, or once the trial's previous process has exited."""
        run = self.runs.get(c.trial_id)
        if run is not None:
            if run.held and run.cancelled is None:
                if self._go_on(run, c):
                    return
                # placed elsewhere: the waiting process gives its worker away; the trial
                # restarts (from its checkpoint if any) once it has exited
                run.cancelled = "released"
                self.signal(run, Kill(reason="relaunched on another placement"))
            self.deferred[c.trial_id] = c  # after the previous process exits
            return
        t = self.engine.trials.get(c.trial_id)
        if t is None or t.state is not TrialState.RUNNING or c.trial_id not in self.engine.running:
            # stopped or paused while it waited for its donor: its own clones take what it has
            for clone in self.clones.pop(c.trial_id, []):
                self._launch(clone)
            return
        self.start_run(c.trial_id, c.config, c.start_budget, c.budget,
                       self.engine.running[c.trial_id], c.restore_from)
        # clones that waited for this launch: those whose checkpoint it has just filed go now,
        # the others wait for its process as any clone of a running donor does
        waiting = self.clones.pop(c.trial_id, [])
        for clone in waiting:
            found = ck.latest_checkpoint(self.settings.checkpoint_dir, c.trial_id,
                                         clone.start_budget)
            if found is not None and found[0] >= clone.start_budget - EPS:
                self._launch(clone)
            else:
                self.clones.setdefault(c.trial_id, []).append(clone)

    def _waits_to_launch(self, tid: int) -> bool:
        """Whether ``tid`` has a Launch not carried out yet (a clone waiting for its donor)."""
        return any(c.trial_id == tid for waiting in self.clones.values() for c in waiting)

    def start_run(self, tid: int, config: dict[str, Any], start: float, budget: float,
                  placement: Placement, restore_from: int | None, **extra: Any) -> Run | None:
        """Launch one run of ``tid`` on ``placement`` (``extra``: a fused unit's job fields)."""
        slots = [self.inventory.slots.get(g) for g, _ in placement]
        if any(s is None for s in slots):
            missing = [g for (g, _), s in zip(placement, slots, strict=True) if s is None]
            self.pending.append(ev.TrialFailed(self.clock.now(), tid, worker_lost=True,
                                               error=f"GPU(s) {missing} left the cluster"))
            return None
        found = restore_point(self.settings.checkpoint_dir, tid, start, restore_from)
        run_id = next(self._run_ids)
        run = Run(tid, run_id, f"{self.settings.topic}-{tid}-{run_id}", dict(config), placement,
                  float(start), float(budget), last_step=float(start))
        jobs = rank_jobs(run, cast("list[Slot]", slots), self.settings, self.engine, found,
                         **extra)
        run.ranks.extend(RunRank(worker) for worker, _ in jobs)
        self.runs[tid] = run
        self.by_id[run_id] = run
        self.links.launch(run_id, jobs)
        return run

    def signal(self, run: Run, msg: Control) -> None:
        """Send a control message to every live rank of ``run`` (never blocks the driver)."""
        raw = encode(msg)
        by_worker: dict[str, list[str]] = {}
        for i, r in enumerate(run.ranks):
            if not r.exited:
                by_worker.setdefault(r.worker, []).append(f"{run.run_key}/{i}")
        for worker, keys in by_worker.items():
            self.links.control(worker, keys, raw)


def launches_first(cmds: list[Command], live: Collection[int]) -> list[Command]:
    """``cmds`` with the launches of trials that have nothing running first, the rest in order.

    The engine frees a worker with a Stop and fills it with a Launch in one batch; the
    launch is the one the worker waits for (the stopped trial is usually waiting at its
    rung, and leaves whenever the stop comes), so it goes out first. Only a launch that
    touches no other command's run moves: a trial with no live or deferred run, restored
    from no other trial, and named by no other command of the batch (not even as a donor).
    """
    named: dict[int, int] = {}  # how many commands name each trial (a clone names its donor)
    for c in cmds:
        for tid in {getattr(c, "trial_id", None), getattr(c, "restore_from", None)} - {None}:
            named[tid] = named.get(tid, 0) + 1
    early = [c for c in cmds if isinstance(c, Launch) and c.trial_id not in live
             and c.restore_from in (None, c.trial_id) and named[c.trial_id] == 1]
    if not early:
        return cmds
    moved = {id(c) for c in early}
    return [*early, *(c for c in cmds if id(c) not in moved)]
