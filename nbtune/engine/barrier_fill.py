"""Barrier filling: run likely promotions on workers a synchronous rung leaves idle.

A synchronous algorithm (SHA, Hyperband or SyncBOHB one bracket at a time)
hands out a rung and waits until its last straggler reports; every worker whose
trial finished early idles meanwhile (Fluid §2.2, "idle resources at stage
barriers"). When the algorithm has no work and a GPU is idle, the engine asks
it for :meth:`~nbtune.algorithms.base.BaseAlgorithm.speculate` — paused trials
likely to be promoted, at their next rung's budget — and continues them there
*speculatively*, on the placement they paused on (a process waiting in place
simply goes on, nothing restarts).

Speculative work never reaches the algorithm before its verdict, so results
cannot change: the reports are buffered. When the rung closes, a promoted
trial's spec adopts the run (the buffered reports are replayed to the algorithm
in order, exactly as they would have arrived; a run that reached the budget
already closes its segment at once) and a retired one is stopped, its reports
dropped: the worker is given back. A speculative run also yields (Pause,
progress dropped) as soon as real work waits for a GPU, and when its trial is
requeued for any reason. The policy is pure engine code: the simulator and the
Dask runtime run exactly this, from the events they feed. Every speculative
launch is kept in ``engine.fill_log`` (:class:`FillRecord`). The other half
of filling, the next bracket started in a last rung's tail when brackets run
one at a time, is the algorithm's (``Hyperband._fill_tail``): those are real
trials, not speculation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nbtune.core.commands import Command, Pause, Stop
from nbtune.core.events import TrialReported
from nbtune.core.tolerance import EPS
from nbtune.core.trial import TrialSpec, TrialState
from nbtune.engine.errors import EngineError

#: the :class:`~nbtune.engine.engine.Engine` these functions work on (not imported:
#: the engine imports this module)
Engine = Any

__all__ = ["FillRecord", "Speculation", "fill", "on_report", "adopt", "drop", "retire", "yield_to_pending"]


@dataclass
class FillRecord:
    """One speculative launch, kept in ``engine.fill_log`` so a run can show what filling did.

    ``log_index`` is the first of its records in ``engine.ledger.log`` (one per
    GPU of ``placement``): their start and end are when the fill work held the
    worker. ``outcome`` is filled in as the speculation ends: ``"adopted"``
    (promoted: its work counted), ``"retired"`` (a loser: its work dropped),
    ``"yielded"`` (real work took the worker back), or None while undecided.
    """

    time: float
    trial_id: int
    placement: tuple[tuple[int, float], ...]
    start: float
    target: float
    log_index: int
    outcome: str | None = None


@dataclass
class Speculation:
    """One speculative continuation: where the trial's real state stands, and what it did since."""

    target: float
    #: the trial's target budget before the speculation (restored if it is dropped)
    rung_target: float
    reports: list[TrialReported] = field(default_factory=list)
    #: it reached ``target`` and waits (paused) for the verdict
    done: bool = False
    #: promoted to this rung budget below ``target``: its reports up to it count as they come
    promoted: float | None = None
    record: FillRecord | None = None


def fill(eng: Engine, cmds: list[Command], launch: Any) -> None:
    """Give idle GPUs to the algorithm's likely promotions (nothing real is waiting).

    ``launch`` is :func:`nbtune.engine.scheduling.launch`, passed in by its caller
    (scheduling imports this module, so importing it back would be a cycle).
    """
    if eng._pending or eng.paused or eng.stopped or not eng.ledger.idle:
        return

    for spec in eng.algorithm.speculate():
        if eng.max_concurrent is not None and len(eng.ledger.placements) >= eng.max_concurrent:
            return
        tid = spec.trial_id
        t = eng.trials.get(tid)
        where = eng.ledger.paused_on.get(tid)
        if (t is None or t.state is not TrialState.PAUSED or tid in eng._spec or where is None
                or spec.budget <= t.budget_used + EPS or spec.budget > eng.max_budget + EPS):
            continue
        idle = eng.ledger.idle
        if not all(g in idle for g, _ in where):
            continue  # only where it paused: a waiting process goes on, a GPU in use is not taken
        rec = FillRecord(eng.time, tid, tuple(where), t.budget_used, float(spec.budget),
                         len(eng.ledger.log))
        eng.fill_log.append(rec)
        eng._spec[tid] = Speculation(float(spec.budget), t.target_budget, record=rec)
        t.transition(TrialState.PENDING)
        t.target_budget = float(spec.budget)
        launch(eng, TrialSpec(tid, t.config, spec.budget, None, t.group_id), where, cmds)
        if not eng.ledger.idle:
            return


def on_report(eng: Engine, e: TrialReported) -> None:
    """Buffer a speculative report; at its target the run pauses and waits for the verdict."""
    t = eng.trials[e.trial_id]
    sp = eng._spec[e.trial_id]
    prev = t.last_mark
    if prev is not None and e.budget > prev[1] + EPS:
        t.unit_time = ((e.time - prev[0]) / (e.budget - prev[1]), t.share)
    t.last_mark = (e.time, e.budget)
    sp.reports.append(e)
    if e.budget >= sp.target - EPS:
        eng._release(t, pause=True)
        t.transition(TrialState.PAUSED)
        sp.done = True
    if sp.promoted is not None:
        _flush(eng, t, sp)


def _flush(eng: Engine, t: Any, sp: Speculation) -> bool:
    """Hand the algorithm the buffered reports up to the promoted budget; True if it was reached.

    The run itself goes on (speculatively, past the promotion) where it is.
    """
    assert sp.promoted is not None
    while sp.reports and sp.reports[0].budget <= sp.promoted + EPS:
        eng._record(t, sp.reports.pop(0))
    if t.budget_used < sp.promoted - EPS:
        return False
    sp.rung_target, sp.promoted = sp.promoted, None
    eng.algorithm.on_segment_end(t.trial_id, sp.rung_target)
    eng._dirty = True
    return True


def adopt(eng: Engine, spec: TrialSpec, cmds: list[Command]) -> bool:
    """The algorithm promoted a speculating trial: replay its reports; True if the segment closed.

    Promoted to the budget it was speculated to: it becomes an ordinary trial
    (running on, or its segment closes here with the replay's last report).
    Promoted to a rung below that (the run speculates on past it): the reports
    up to the rung are handed over now or as they come, and the run goes on.
    Either way it is not queued again.
    """
    tid = spec.trial_id
    sp = eng._spec[tid]
    t = eng.trials[tid]
    if spec.budget > sp.target + EPS:
        raise EngineError(
            f"{eng.algorithm.name}: trial {tid} was speculated to budget {sp.target} but "
            f"promoted to {spec.budget}: speculate() must name a budget its promotions reach"
        )
    t.config = dict(spec.config)
    t.group_id = spec.group_id
    _settle(sp, "adopted")
    if spec.budget < sp.target - EPS:
        sp.promoted = float(spec.budget)
        return _flush(eng, t, sp)
    del eng._spec[tid]
    t.target_budget = float(spec.budget)
    for r in sp.reports:
        if t.state.is_terminal:
            break
        eng._apply_report(t, r, cmds)
    return t.state is not TrialState.RUNNING


def drop(eng: Engine, trial_id: int) -> bool:
    """Forget a speculation (its run yields or failed); True if nothing real was lost.

    A purely speculative trial is paused where its rung left it. One already
    promoted (running past the rung it was promoted to) becomes an ordinary
    trial of that rung and False is returned: the caller requeues it as any other.
    """
    sp = eng._spec.pop(trial_id)
    if sp.promoted is None:
        _settle(sp, "yielded")
    t = eng.trials[trial_id]
    eng.ledger.forget(trial_id)  # its process went on or ended: nothing waits there
    if sp.promoted is not None:
        t.target_budget = sp.promoted
        return False
    if t.state is TrialState.RUNNING:
        eng._release(t)
        t.transition(TrialState.PAUSED)
    t.target_budget = sp.rung_target
    return True


def retire(eng: Engine, trial_id: int) -> bool:
    """The algorithm retired a speculating trial: stop its run, drop its reports; True if it was."""
    if trial_id not in eng._spec:
        return False
    _settle(eng._spec.pop(trial_id), "retired")
    t = eng.trials[trial_id]
    if t.state is TrialState.RUNNING:
        eng._outbox.append(Stop(trial_id))
    eng._end(t, TrialState.STOPPED)
    return True


def _settle(sp: Speculation, outcome: str) -> None:
    """Note how a speculation ended on its launch's record (a chain of launches: each)."""
    if sp.record is not None and sp.record.outcome is None:
        sp.record.outcome = outcome


def yield_to_pending(eng: Engine, cmds: list[Command]) -> bool:
    """Pause every running speculation while real work waits; True if any yielded."""
    if not eng._pending:
        return False
    running = [tid for tid, sp in eng._spec.items()
               if sp.promoted is None and eng.trials[tid].state is TrialState.RUNNING]
    for tid in running:
        cmds.append(Pause(tid))
        drop(eng, tid)
    return bool(running)
