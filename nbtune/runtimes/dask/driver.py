"""The driver's bookkeeping: engine events from what the workers say, commands to workers.

Kept apart from :mod:`.runtime` (the public class, the thread and the
cluster's life cycle) so each file stays readable. Everything here runs on
the driver thread only, which is what makes it safe to touch the engine.
Workers joining and leaving are :mod:`.membership`'s; here only the runs a
lost worker ends (``_end_runs_on``).

A *run* is one process group (one process per rank) training one trial from
``start_step`` toward ``budget``. A trial has at most one live run; a Launch
for a trial whose previous run is still writing its last checkpoint waits
(``_deferred``) until that run exits; a clone of a trial whose process is
still writing the checkpoint it clones waits for that process (``_clones``);
a resize relaunches the trial on the engine's current placement from its
newest checkpoint.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbtune.core import events as ev
from nbtune.core.commands import Command, Finish, Launch, Pause, Resize, Stop
from nbtune.core.resources import Placement
from nbtune.core.trial import TrialState
from nbtune.runtimes.dask import checkpoints as ck
from nbtune.runtimes.dask.dask_page import Publisher
from nbtune.runtimes.dask.runs import EPS, Run, RunRank, job_hints, overdue, rank_env

if TYPE_CHECKING:
    from nbtune.engine.engine import Engine
    from nbtune.runtimes.dask.cluster import Inventory
    from nbtune.runtimes.dask.links import WorkerLinks
    from nbtune.runtimes.dask.membership import Membership

__all__ = ["RunDriver"]

log = logging.getLogger("nbtune.dask")


class RunDriver:
    """Mixin of :class:`~nbtune.runtimes.dask.DaskRuntime`: the per-run state machine."""

    client: Any
    inventory: Inventory | None
    checkpoints: dict[int, tuple[float, str]]
    checkpoint_dir: Path | None
    gpus: bool | None
    mps: bool | None
    reuse_processes: bool | None
    trial_memory_limit: int | None
    trial_timeout: float | None
    shutdown_grace: float
    _engine: Engine | None
    _clock: Any
    _local: list[ev.Event]
    _runs: dict[int, Run]
    _by_id: dict[int, Run]
    _deferred: dict[int, Launch]
    _clones: dict[int, list[Launch]]
    _run_ids: Any
    _finish_at: float | None
    _topic: str
    _fn: bytes
    _checkpointing: bool
    _inbox: Any
    _links: WorkerLinks
    _members: Membership
    _page: Publisher

    def _translate(self, kind: str, payload: Any) -> list[ev.Event]:
        now = self._clock.now()
        if kind == "event":
            return [payload]
        if kind == "msgs":
            out: list[ev.Event] = []
            for m in payload:
                out.extend(self._on_msg(m, now))
            return out
        if kind == "launch_failed":
            return self._on_launch_failed(*payload, now)
        if kind in ("lost", "joined", "linked", "probed", "unlinked"):  # see .membership
            return self._members.on(kind, payload, now, finishing=self._finish_at is not None)
        raise AssertionError(f"unknown inbox item {kind!r}")

    def _on_msg(self, m: dict[str, Any], now: float) -> list[ev.Event]:
        k = m.get("k")
        if k == "util":
            return self._on_util(m, now)
        if k == "ckpt":
            if int(m.get("run", -1)) not in self._by_id:
                return []  # a run the driver already ended (killed after a broken stream)
            tid = int(m["trial"])
            prev = self.checkpoints.get(tid)
            if prev is None or m["step"] >= prev[0] - EPS:
                self.checkpoints[tid] = (float(m["step"]), str(m["path"]))
            return []
        run = self._by_id.get(int(m.get("run", -1)))
        if run is None:
            return []
        if k == "started":
            if int(m["rank"]) == 0 and not run.started and run.cancelled is None:
                run.started = True
                return [ev.TrialStarted(now, run.trial_id)]
            return []
        if k == "report":
            if run.cancelled is not None:
                return []  # the engine already stopped or paused it: later progress is not counted
            run.reported(m)
            return [ev.TrialReported(now, run.trial_id, float(m["step"]), dict(m["metrics"]))]
        if k == "recomputed":
            return [ev.TrialRecomputed(now, run.trial_id, float(m["step"]))]
        if k == "held":
            return self._on_held(run, now)
        if k == "exit":
            return self._rank_exited(run, int(m["rank"]), m, now)
        return []

    def _on_held(self, run: Run, now: float) -> list[ev.Event]:
        """The run's process waits at its segment's end: a promotion may have come already."""
        if run.cancelled is not None:
            return []
        run.held = True
        launch = self._deferred.pop(run.trial_id, None)
        if launch is not None:
            self._launch(launch)
            return []
        return [ev.TrialHeld(now, run.trial_id)]

    def _go_on(self, run: Run, c: Launch) -> bool:
        """Let a held run train on toward ``c.budget`` where it is, if ``c`` allows it."""
        assert self._engine is not None and self.inventory is not None
        placement = self._engine.running.get(c.trial_id)
        if (placement is None or len(run.ranks) != 1 or len(placement) != 1
                or placement[0][0] != run.placement[0][0]
                or c.restore_from not in (None, c.trial_id)
                or abs(c.start_budget - run.last_step) > EPS):
            return False
        slot = self.inventory.slots.get(placement[0][0])
        if slot is None:
            return False
        threads, _ = rank_env(c.trial_id, slot, placement[0][1], gpus=bool(self.gpus),
                              mps=bool(self.mps))
        run.held, run.budget, run.placement = False, float(c.budget), placement
        self._signal(run, {"k": "go", "budget": float(c.budget), "threads": threads})
        self._local.append(ev.TrialStarted(self._clock.now(), c.trial_id))
        return True

    def _on_util(self, m: dict[str, Any], now: float) -> list[ev.Event]:
        assert self.inventory is not None
        ids = {s.index: s.gpu_id for s in self.inventory.slots.values() if s.worker == m["worker"]}
        util = {ids[i]: float(u) for i, u in enumerate(m["util"]) if i in ids}
        mem = {ids[i]: float(x) for i, x in enumerate(m["mem"]) if i in ids}
        return [ev.UtilizationSampled(now, util, mem)] if util else []

    def _on_launch_failed(self, run_id: int, rank: int, error: str, lost: bool,
                          now: float) -> list[ev.Event]:
        run = self._by_id.get(run_id)
        if run is None or run.ranks[rank].exited:
            return []
        if lost and run.cancelled is None:
            # unreachable worker: the trial is requeued, not failed; every rank is told to die
            # (its launch may have landed first: a kill for a rank not started waits for it)
            t = self._engine.trials.get(run.trial_id) if self._engine else None
            running = t is not None and t.state is TrialState.RUNNING
            if running:
                self._deferred.pop(run.trial_id, None)
            run.cancelled = "lost"
            self._signal(run, {"k": "kill", "reason": error})
            for r in run.ranks:
                r.exited = True
            out = self._finalize(run, now)
            if running:
                out.insert(0, ev.TrialFailed(now, run.trial_id, worker_lost=True, error=error))
            return out
        return self._rank_exited(run, rank, {"ok": False, "oom": False, "error": error}, now)

    def _housekeeping(self) -> list[ev.Event]:
        now_m = time.monotonic()
        if self._finish_at is not None and now_m > self._finish_at:
            for run in list(self._runs.values()):
                if run.cancelled != "killed":
                    run.cancelled = "killed"
                    self._signal(run, {"k": "kill", "reason": "still running after Finish"})
            self._finish_at = now_m + self.shutdown_grace
        for run in overdue(list(self._runs.values()), self.trial_timeout, now_m):
            self._signal(run, {"k": "kill", "reason": "trial_timeout"})
        return []

    # ------------------------------------------------------------ run ends
    def _rank_exited(self, run: Run, rank: int, m: dict[str, Any], now: float) -> list[ev.Event]:
        r = run.ranks[rank]
        if r.exited:
            return []
        r.exited = True
        if not m.get("ok", True) and run.error is None and not m.get("killed"):
            run.error = m
            if len(run.ranks) > 1:  # the others would hang in a collective
                self._signal(run, {"k": "kill", "reason": f"rank {rank} failed"})
        if all(x.exited for x in run.ranks):
            return self._finalize(run, now)
        return []

    def _finalize(self, run: Run, now: float) -> list[ev.Event]:
        out = self._end_run(run, now)
        # clones waiting for this donor's last checkpoint (PBT's exploit) may start now
        for c in self._clones.pop(run.trial_id, []):
            self._launch(c)
        return out

    def _end_run(self, run: Run, now: float) -> list[ev.Event]:
        assert self._engine is not None
        tid = run.trial_id
        if self._runs.get(tid) is run:
            del self._runs[tid]
        self._by_id.pop(run.run_id, None)
        t = self._engine.trials.get(tid)
        running = t is not None and t.state is TrialState.RUNNING
        if run.cancelled is not None:
            failure = None
        elif run.error is not None:
            failure = ev.TrialFailed(now, tid, error=str(run.error.get("error", "trial failed")),
                                     out_of_memory=bool(run.error.get("oom")))
        elif tid in self._deferred or run.resize or run.last_step >= run.budget - EPS:
            failure = None
        else:
            failure = ev.TrialFailed(now, tid, error=(
                f"the training function returned at step {run.last_step:g} before reaching the "
                f"budget {run.budget:g} it was launched for; loop until trial.report() returns "
                "True (e.g. `for step in trial.steps(): ...`)"))
        if failure is not None:
            self._deferred.pop(tid, None)
            return [failure] if running else []
        if run.cancelled == "killed":
            return []  # the experiment is over
        # after "lost" the engine requeued the trial; its relaunch may have come while a
        # surviving rank was still being killed, and waited for this moment in _deferred
        launch = self._deferred.pop(tid, None)
        if run.cancelled == "lost" and launch is None:
            return []
        if not running or tid not in self._engine.running:
            return []
        placement = self._engine.running[tid]
        if launch is not None:
            self._start_run(tid, launch.config, launch.start_budget, launch.budget, placement,
                            launch.restore_from)
        elif run.resize and run.last_step < run.budget - EPS:
            self._start_run(tid, run.config, run.last_step, run.budget, placement, None)
        return []

    def _end_runs_on(self, address: str, now: float) -> list[ev.Event]:
        """A worker left (or its stream broke): its runs end, their trials are requeued.

        The kill goes to every rank first, those on ``address`` included: after a
        broken stream the worker may be alive, and its processes must not train
        on beside the relaunch. After Finish the runs just end (no events), so
        the experiment can finish.
        """
        assert self._engine is not None
        finishing = self._finish_at is not None
        out: list[ev.Event] = []
        for run in list(self._runs.values()):
            hit = [i for i, r in enumerate(run.ranks) if r.worker == address]
            if not hit:
                continue
            t = self._engine.trials.get(run.trial_id)
            if (not finishing and run.cancelled is None and t is not None
                    and t.state is TrialState.RUNNING):
                out.append(ev.TrialFailed(now, run.trial_id, worker_lost=True,
                                          error=f"worker {address} was lost"))
                self._deferred.pop(run.trial_id, None)
            run.cancelled = "killed" if finishing else "lost"
            self._signal(run, {"k": "kill", "reason": f"worker {address} was lost"})
            for i in hit:
                run.ranks[i].exited = True
            if all(r.exited for r in run.ranks):
                out.extend(self._finalize(run, now))
        return out

    # ------------------------------------------------------------ commands
    def _execute(self, cmds: list[Command]) -> None:
        for c in cmds:
            if isinstance(c, Launch):
                donor = self._runs.get(c.restore_from) if c.restore_from != c.trial_id else None
                if donor is not None and donor.last_step <= c.start_budget + EPS:
                    # the donor's process may still be writing that checkpoint: wait for it
                    self._clones.setdefault(donor.trial_id, []).append(c)
                else:
                    self._launch(c)
            elif isinstance(c, Resize):
                run = self._runs.get(c.trial_id)
                if run is not None and run.cancelled is None and not run.resize:
                    run.resize = True
                    self._signal(run, {"k": "stop", "reason": "resize"})
            elif isinstance(c, Pause | Stop):
                self._deferred.pop(c.trial_id, None)
                run = self._runs.get(c.trial_id)
                if run is not None and run.cancelled is None:
                    reason = "pause" if isinstance(c, Pause) else "stop"
                    run.cancelled, run.resize = reason, False
                    self._signal(run, {"k": "stop", "reason": reason})
            elif isinstance(c, Finish):
                self._finish_at = time.monotonic() + self.shutdown_grace
        Run.send_verdicts(list(self._runs.values()), self._signal)  # after any stop it was sent
        eng = self._engine  # the engine just changed: the Dask dashboard's page may show it
        self._page.tick(self.client, eng, self.inventory, self._topic, self._clock.now(),
                        force=bool(eng is not None and eng.done))

    def _launch(self, c: Launch) -> None:
        """Carry out a Launch now, or once the trial's previous process has exited."""
        assert self._engine is not None
        run = self._runs.get(c.trial_id)
        if run is not None:
            if run.held and run.cancelled is None:
                if self._go_on(run, c):
                    return
                # placed elsewhere: the waiting process gives its worker away; the trial
                # restarts (from its checkpoint if any) once it has exited
                run.cancelled = "released"
                self._signal(run, {"k": "kill", "reason": "relaunched on another placement"})
            self._deferred[c.trial_id] = c  # after the previous process exits
            return
        t = self._engine.trials.get(c.trial_id)
        if t is None or t.state is not TrialState.RUNNING or c.trial_id not in self._engine.running:
            return  # stopped or paused while it waited for its donor
        self._start_run(c.trial_id, c.config, c.start_budget, c.budget,
                        self._engine.running[c.trial_id], c.restore_from)

    def _start_run(self, tid: int, config: dict[str, Any], start: float, budget: float,
                   placement: Placement, restore_from: int | None, **extra: Any) -> Run | None:
        assert self.inventory is not None and self.checkpoint_dir is not None
        slots = [self.inventory.slots.get(g) for g, _ in placement]
        if any(s is None for s in slots):
            missing = [g for (g, _), s in zip(placement, slots, strict=True) if s is None]
            self._local.append(ev.TrialFailed(self._clock.now(), tid, worker_lost=True,
                                              error=f"GPU(s) {missing} left the cluster"))
            return None
        found = self._restore_point(tid, start, restore_from)
        run_id = next(self._run_ids)
        run = Run(tid, run_id, f"{self._topic}-{tid}-{run_id}", dict(config), placement,
                   float(start), float(budget), last_step=float(start))
        world = len(placement)
        jobs: list[tuple[str, dict[str, Any]]] = []
        for rank, ((_g, share), slot) in enumerate(zip(placement, slots, strict=True)):
            assert slot is not None
            threads, env = rank_env(tid, slot, share, gpus=bool(self.gpus), mps=bool(self.mps))
            job = {
                "topic": self._topic, "run_key": run.run_key, "run_id": run_id, "trial_id": tid,
                "rank": rank, "world_size": world, "slot": slot.index, "config": dict(config),
                "start_step": float(start), "budget": float(budget), "fn": self._fn,
                "checkpoint_dir": str(self.checkpoint_dir), "env": env, "threads": threads,
                "restore_path": None if found is None else str(found[1]),
                "restore_step": None if found is None else found[0],
                "device": "cuda" if self.gpus else "cpu", "sys_path": list(sys.path),
                "memory_limit": self.trial_memory_limit,
                "max_budget": self._engine.max_budget if self._engine else float(budget),
                "metric": self._engine.metric if self._engine else None,
                "checkpoints": self._checkpointing,
                **job_hints(self._engine),  # "hold", "verdicts"
                "reuse": not self.gpus if self.reuse_processes is None else self.reuse_processes,
                **extra,  # a fused unit's members (.fused_job)
            }
            run.ranks.append(RunRank(slot.worker))
            jobs.append((slot.worker, job))
        self._runs[tid] = run
        self._by_id[run_id] = run
        self._links.launch(run_id, jobs)
        return run

    def _restore_point(self, tid: int, start: float,
                       restore_from: int | None) -> tuple[float, Path] | None:
        """The checkpoint a launch at ``start`` resumes from, or None for a fresh start.

        A trial cloned from another (PBT's exploit, ``restore_from``) gets a
        copy of the donor's checkpoint filed as its own, and its own newer
        files are dropped: every later relaunch (resize, lost worker, resume)
        then finds the cloned lineage, never the state it had before.
        """
        assert self.checkpoint_dir is not None
        if restore_from is not None and restore_from != tid:
            donor = ck.latest_checkpoint(self.checkpoint_dir, restore_from, start)
            if donor is None:
                return None
            return donor[0], ck.adopt_checkpoint(donor[1], self.checkpoint_dir, tid, donor[0])
        if start <= EPS:
            return None
        return ck.latest_checkpoint(self.checkpoint_dir, tid, start)

    def _signal(self, run: Run, msg: dict[str, Any]) -> None:
        """Send a control message to every live rank of ``run`` (never blocks the driver)."""
        by_worker: dict[str, list[str]] = {}
        for i, r in enumerate(run.ranks):
            if not r.exited:
                by_worker.setdefault(r.worker, []).append(f"{run.run_key}/{i}")
        for worker, keys in by_worker.items():
            self._links.control(worker, keys, msg)
