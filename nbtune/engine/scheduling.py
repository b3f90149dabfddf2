"""One scheduling pass of the engine: ask the algorithm, admit its specs, place, apply.

The engine's event handlers change trial state; after them, when something
changed, :func:`schedule` runs once per :meth:`Engine.handle`: it asks the
algorithm for TrialGroups while the allocator has room, admits each spec
(new trial, or a paused one resumed), asks the allocator for placements and
turns its :class:`Allocation` into ledger changes and Launch/Resize commands.
Kept apart from the handlers because it is the one place where algorithm and
allocator meet; like the engine it reads no clock (times come from ``eng.time``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from nbtune.allocators.base import Allocation
from nbtune.core.commands import Command, Launch, Resize
from nbtune.core.resources import Placement
from nbtune.core.tolerance import EPS
from nbtune.core.trial import TrialRecord, TrialSpec, TrialState
from nbtune.engine import barrier_fill, fusion_units
from nbtune.engine.errors import EngineError

#: the :class:`~nbtune.engine.engine.Engine` these functions work on (not imported:
#: the engine imports this module)
Engine = Any

__all__ = ["schedule", "admit", "retire", "apply_allocation", "launch"]


def admit(eng: Engine, spec: TrialSpec, cmds: list[Command]) -> bool:
    """Queue the spec (a new trial or a paused one resumed); True if it closed a segment at once."""
    if spec.budget > eng.max_budget + EPS:
        raise EngineError(
            f"{eng.algorithm.name}: trial {spec.trial_id} asks for budget {spec.budget} "
            f"> max_budget {eng.max_budget}"
        )
    if eng._spec and spec.trial_id in eng._spec:
        # promoted while speculating: it runs on, or its segment closes now (True)
        return barrier_fill.adopt(eng, spec, cmds)
    t = eng.trials.get(spec.trial_id)
    if t is None:
        t = TrialRecord(spec.trial_id, dict(spec.config), group_id=spec.group_id)
        eng.trials[spec.trial_id] = t
    elif t.state is not TrialState.PAUSED:
        raise EngineError(
            f"{eng.algorithm.name}: resumed trial {spec.trial_id} is {t.state.value}, "
            "only paused trials can be resumed"
        )
    else:
        t.transition(TrialState.PENDING)
        t.config = dict(spec.config)
        t.group_id = spec.group_id
    if spec.restore_from is not None:
        donor = eng.trials.get(spec.restore_from)
        if donor is None:
            raise EngineError(f"trial {spec.trial_id} restores from unknown {spec.restore_from}")
        t.budget_used = donor.budget_used
    t.restore_from = spec.restore_from
    if spec.budget <= t.budget_used + EPS:
        raise EngineError(
            f"{eng.algorithm.name}: trial {spec.trial_id} asks for budget {spec.budget} "
            f"but has already used {t.budget_used}"
        )
    t.target_budget = spec.budget
    eng._pending.append(spec)
    return False

def schedule(eng: Engine, cmds: list[Command]) -> None:
    eng._dirty = False
    if eng.paused or eng.stopped:
        return
    closed = False
    fused = eng.fusion is not None  # units of trials: see .fusion_units
    for _ in range(4):
        room = (fusion_units.capacity(eng) if fused else eng.allocator.capacity(eng)) \
            - len(eng._pending)
        if room <= 0 or eng.algorithm.finished:
            break
        groups = eng.algorithm.ask(room)
        retire(eng)
        if not groups:
            break
        for g in groups:
            eng.groups[g.group_id] = g
            for spec in g.specs:
                closed = admit(eng, spec, cmds) or closed
    # called even with an empty queue: freed GPUs may be worth giving to running trials
    if fused:
        apply_allocation(eng, fusion_units.allocate(eng), cmds)
        if fusion_units.split_idle(eng, cmds):  # idle workers take half a running unit
            apply_allocation(eng, fusion_units.allocate(eng), cmds)
    else:
        apply_allocation(eng, eng.allocator.allocate(eng), cmds)
    if eng._spec and eng._pending and barrier_fill.yield_to_pending(eng, cmds):
        apply_allocation(eng, eng.allocator.allocate(eng), cmds)  # real work takes their GPUs
    retire(eng)
    if not fused:  # a speculative run is one trial alone: not with fused units
        barrier_fill.fill(eng, cmds, launch)
    if closed and not eng.ledger.placements and not eng.done:
        schedule(eng, cmds)  # a promotion closed a speculated segment: the algorithm has more
        return
    if not eng.ledger.placements:
        if eng._pending:
            raise EngineError(
                f"allocator {eng.allocator.name!r} placed none of {len(eng._pending)} "
                "pending trials on an idle cluster: a trial needs more than the cluster has"
            )
        if eng.algorithm.finished:
            eng._finish(cmds)
        elif not eng.paused:
            raise EngineError(
                f"algorithm {eng.algorithm.name!r} stalled: nothing runs, nothing is "
                "pending, and it returned no work while not finished"
            )

def retire(eng: Engine) -> None:
    for tid in eng.algorithm.pop_retired():
        t = eng.trials.get(tid)
        if eng._spec and barrier_fill.retire(eng, tid):
            continue
        if t is not None and t.state is TrialState.PAUSED:
            eng._end(t, TrialState.STOPPED)

def apply_allocation(eng: Engine, alloc: Allocation, cmds: list[Command]) -> None:
    if alloc.launch:
        launched: list[TrialSpec] = []
        keep: deque[TrialSpec] = deque()
        n = len(alloc.launch)
        prefix = all(
            i < len(eng._pending) and eng._pending[i].trial_id in alloc.launch
            for i in range(n)
        )
        if prefix:
            for _ in range(n):
                launched.append(eng._pending.popleft())
        else:
            for s in eng._pending:
                (launched if s.trial_id in alloc.launch else keep).append(s)
            eng._pending = keep
        if len(launched) != n:
            raise EngineError(f"allocator {eng.allocator.name!r} launched unknown trials")
        for spec in launched:
            launch(eng, spec, alloc.launch[spec.trial_id], cmds)
    for tid, placement in alloc.resize.items():
        t = eng.trials[tid]
        if t.state is not TrialState.RUNNING:
            raise EngineError(f"allocator resized trial {tid} which is {t.state.value}")
        if placement == eng.ledger.placements.get(tid):
            continue
        eng.ledger.release(t, eng.time)  # banks its GPU-seconds at the old share
        eng.ledger.place(t, placement, eng.time)
        t.last_mark = (eng.time, t.budget_used)
        cmds.append(Resize(tid, placement))

def launch(eng: Engine, spec: TrialSpec, placement: Placement, cmds: list[Command]) -> None:
    t = eng.trials[spec.trial_id]
    t.transition(TrialState.RUNNING)
    eng.ledger.place(t, placement, eng.time)  # no longer paused (or held) anywhere
    if t.start_time is None:
        t.start_time = eng.time
    t.last_mark = (eng.time, t.budget_used)
    unit = eng.fusion.launching.pop(t.trial_id, None) if eng.fusion is not None else None
    t.unit = unit
    cmds.append(
        Launch(t.trial_id, t.config, t.budget_used, t.target_budget, placement,
               spec.restore_from, unit, () if unit is None else eng.fusion.members[unit])
    )
