"""The Dask driver's fused units: one process trains a unit's members as one fused model.

The engine launches a fused unit (``tune(..., fusion=F)``, :mod:`nbtune.engine.fusion_units`)
as one Launch per member, all with the same ``unit`` in one batch. Here they become *one*
run: one job whose ``members`` list holds each member's trial id, config and checkpoint
to resume from; the trial process (:mod:`.fused_child`) builds one
:class:`~nbtune.runtimes.dask.trial_side.trial_api.Trial` per member and hands the user's
``train(config, trial)`` a :class:`nbtune.fusion.fusion_trial.FusionTrial` over them.

Each member reports as its own trial (its messages carry ``"m"``: its trial id), so the
engine and the algorithm decide per member. A Stop or Pause for one member becomes a
control message for that member only (``"m"``): its ``should_stop()`` turns true and
``FusionTrial.report`` slices it out of the model (``FusedModel.keep``); the others go on
in the same process, which ends when no member is left. A member whose run ends short of
its budget (an error, the function returned early) fails alone; a lost worker fails every
member it held (the engine requeues them, from their checkpoints).

:class:`FusedUnits` is a collaborator of the experiment's
:class:`~nbtune.runtimes.dask.driver_side.driver.RunDriver` (its ``units``), which offers it each
batch of commands, each message, failed launch and run end first. Fused runs live in the
driver's ``runs`` under the key ``-1 - run_id`` (never a trial id), so the driver's loop,
its Finish grace and ``trial_timeout`` handle them like any run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nbtune.core import events as ev
from nbtune.core.commands import Command, Launch, Pause, Stop
from nbtune.core.trial import TrialState
from nbtune.runtimes.dask import protocol as msg
from nbtune.runtimes.dask.driver_side.jobs import restore_point
from nbtune.runtimes.dask.driver_side.runs import EPS, Run

if TYPE_CHECKING:
    from nbtune.runtimes.dask.driver_side.driver import RunDriver

__all__ = ["FusedUnits", "MemberRun", "UnitRun"]


@dataclass
class MemberRun:
    """What the driver knows of one member of a running fused unit."""

    trial_id: int
    budget: float
    last_step: float
    cancelled: str | None = None  # "stop" | "pause": told to leave the fused model


@dataclass
class UnitRun:
    unit: int
    members: dict[int, MemberRun]


def run_key(run_id: int) -> int:
    """A fused run's key in the driver's ``runs``: negative, so it never shadows a trial's."""
    return -1 - run_id


class FusedUnits:
    """One experiment's fused units, each trained as one run of its ``driver``."""

    def __init__(self, driver: RunDriver) -> None:
        self.driver = driver
        self.units: dict[int, UnitRun] = {}  # run id -> its unit
        self.live: dict[int, int] = {}  # member trial -> run id
        #: unit launches waiting for a member's previous process to exit
        self.waiting: list[list[Launch]] = []

    # ------------------------------------------------------------ commands
    def take(self, cmds: list[Command]) -> list[Command]:
        """Carry out the units' launches and their members' stops; return the other commands."""
        rest: list[Command] = []
        units: dict[int, list[Launch]] = {}
        for c in cmds:
            if isinstance(c, Launch) and c.unit is not None:
                units.setdefault(c.unit, []).append(c)
            elif not (isinstance(c, Pause | Stop) and self._member_leaves(c)):
                rest.append(c)
        self.waiting.extend(units.values())
        if units:
            self._start_waiting()
        return rest

    def _member_leaves(self, c: Pause | Stop) -> bool:
        """Tell one member of a live fused run to leave it; False if it is in none."""
        rid = self.live.get(c.trial_id)
        run = self.driver.by_id.get(rid) if rid is not None else None
        if run is None:
            return False
        members = self.units[run.run_id].members
        m = members[c.trial_id]
        if m.cancelled is None and run.cancelled is None:
            m.cancelled = "pause" if isinstance(c, Pause) else "stop"
            self.driver.signal(run, msg.StopRequest(reason=m.cancelled, member=c.trial_id))
            if all(x.cancelled is not None for x in members.values()):
                run.cancelled = m.cancelled  # nothing it does later counts
        return True

    def restart_waiting(self) -> None:
        """A run ended: a unit that waited for its process may start now."""
        if self.waiting:
            self._start_waiting()

    def _start_waiting(self) -> None:
        """Start the unit launches whose members' previous processes have all exited."""
        trials, running = self.driver.engine.trials, self.driver.engine.running
        still: list[list[Launch]] = []
        for launches in self.waiting:
            launches = [c for c in launches if c.trial_id in running
                        and trials[c.trial_id].state is TrialState.RUNNING
                        and trials[c.trial_id].unit == c.unit]
            if not launches:
                continue  # every member stopped or paused while it waited
            if any(self._busy(c.trial_id) for c in launches):
                still.append(launches)
            else:
                self._start_unit(launches)
        self.waiting = still

    def _busy(self, tid: int) -> bool:
        """A trial's previous process still trains it: its own run, or a fused run it has
        not been told to leave. A member told to leave may start again at once: it resumes
        from a checkpoint already written (files are replaced atomically), and what its old
        process still reports is not counted."""
        if tid in self.driver.runs:
            return True
        rid = self.live.get(tid)
        unit = self.units.get(rid) if rid is not None else None
        return unit is not None and unit.members[tid].cancelled is None

    def _start_unit(self, launches: list[Launch]) -> None:
        d = self.driver
        lead = launches[0]
        placement = d.engine.fusion.placements[lead.unit]
        missing = [g for g, _ in placement if d.inventory.slots.get(g) is None]
        if missing:
            now = d.clock.now()
            d.pending.extend(ev.TrialFailed(now, c.trial_id, worker_lost=True,
                                            error=f"GPU(s) {missing} left the cluster")
                             for c in launches)
            return
        members = []
        for c in launches:
            found = restore_point(d.settings.checkpoint_dir, c.trial_id, c.start_budget, None)
            members.append({"trial_id": c.trial_id, "config": dict(c.config),
                            "restore_path": None if found is None else str(found[1]),
                            "restore_step": None if found is None else found[0]})
        run = d.start_run(lead.trial_id, lead.config, lead.start_budget, lead.budget,
                          placement, None, members=members, unit=lead.unit, hold=False)
        assert run is not None
        del d.runs[lead.trial_id]
        d.runs[run_key(run.run_id)] = run
        self.units[run.run_id] = UnitRun(lead.unit, {
            c.trial_id: MemberRun(c.trial_id, float(c.budget), float(c.start_budget))
            for c in launches})
        for c in launches:
            self.live[c.trial_id] = run.run_id

    # ------------------------------------------------------------ messages
    def on_msg(self, m: msg.Message, now: float) -> list[ev.Event] | None:
        """Events for a message of a fused run; None for any other message."""
        if not isinstance(m, msg.TrialMessage) or m.run is None:
            return None
        unit = self.units.get(int(m.run))
        if unit is None:
            return None
        run = self.driver.by_id[int(m.run)]
        if isinstance(m, msg.Exit):
            return self.driver.rank_exited(run, int(m.rank or 0), m, now)
        if isinstance(m, msg.Started):
            if int(m.rank or 0) == 0 and not run.started:
                run.started = True
                return [ev.TrialStarted(now, t) for t, x in unit.members.items()
                        if x.cancelled is None]
            return []
        member = unit.members.get(int(m.member if m.member is not None else -1))
        if member is None:
            return []
        if isinstance(m, msg.Checkpointed):  # filed under the member's own trial id
            return self.driver.on_checkpoint(dataclasses.replace(m, trial=member.trial_id))
        # the unit's peak memory so far rides on a report (fusion=True sizes units by it)
        mem = ([ev.UnitMemoryMeasured(now, unit.unit, int(m.mem))]
               if isinstance(m, msg.Report) and m.mem is not None else [])
        if member.cancelled is not None:
            return mem  # told to leave: later progress is not counted
        if isinstance(m, msg.Report):
            member.last_step = max(member.last_step, float(m.step))
            run.last_step = max(run.last_step, member.last_step)
            return [*mem, ev.TrialReported(now, member.trial_id, float(m.step),
                                           dict(m.metrics))]
        if isinstance(m, msg.Recomputed):
            return [ev.TrialRecomputed(now, member.trial_id, float(m.step))]
        return []

    def on_launch_failed(self, run_id: int, rank: int, error: str, lost: bool,
                         now: float) -> list[ev.Event] | None:
        """A fused run's worker could not be reached: its members fail (worker lost)."""
        unit = self.units.get(run_id)
        run = self.driver.by_id.get(run_id)
        if unit is None or run is None or not lost or run.ranks[rank].exited:
            return None
        return self._lose(run, unit, error, now, finishing=False)

    # ------------------------------------------------------------ run ends
    def _lose(self, run: Run, unit: UnitRun, error: str, now: float,
              finishing: bool) -> list[ev.Event]:
        """The unit's worker is gone: every member still in it fails (worker lost)."""
        out: list[ev.Event] = []
        if not finishing and run.cancelled is None:
            out = [ev.TrialFailed(now, tid, worker_lost=True, error=error)
                   for tid in self._still_running(unit)]
        run.cancelled = "killed" if finishing else "lost"
        self.driver.signal(run, msg.Kill(reason=error))
        for r in run.ranks:
            r.exited = True
        return out + self.driver.finalize(run, now)

    def _still_running(self, unit: UnitRun) -> list[int]:
        """Members not told to leave that the engine still runs in this unit."""
        trials = self.driver.engine.trials
        return [tid for tid, x in unit.members.items() if x.cancelled is None
                and trials[tid].state is TrialState.RUNNING and trials[tid].unit == unit.unit]

    def end_runs_on(self, address: str, now: float) -> list[ev.Event]:
        """A worker left: the fused runs with a rank on it are lost."""
        out: list[ev.Event] = []
        for rid, unit in list(self.units.items()):
            run = self.driver.by_id.get(rid)
            if run is not None and any(r.worker == address for r in run.ranks):
                out.extend(self._lose(run, unit, f"worker {address} was lost", now,
                                      finishing=self.driver.finishing))
        return out

    def end_run(self, run: Run, now: float) -> list[ev.Event] | None:
        """A fused run ended: each member still in it completed its segment or fails.

        None if ``run`` is no fused unit's (the driver ends it as a trial's own run).
        """
        unit = self.units.pop(run.run_id, None)
        if unit is None:
            return None
        self.driver.runs.pop(run_key(run.run_id), None)
        self.driver.by_id.pop(run.run_id, None)
        for tid in unit.members:
            if self.live.get(tid) == run.run_id:
                del self.live[tid]
        if run.cancelled is not None:
            return []  # lost (members failed already), killed at the end, or all told to leave
        out: list[ev.Event] = []
        for tid in self._still_running(unit):
            m = unit.members[tid]
            if run.error is not None:
                out.append(ev.TrialFailed(
                    now, tid, error=str(run.error.error or "fused unit failed"),
                    out_of_memory=bool(run.error.oom)))
            elif m.last_step < m.budget - EPS:
                out.append(ev.TrialFailed(now, tid, error=(
                    f"the fused training function returned at step {m.last_step:g} of trial "
                    f"{tid}, before the budget {m.budget:g} it was launched for; loop over "
                    "trial.steps() and report every member (trial.report)")))
        return out
