"""Fused units in the engine (Hydro §4.2–4.3): pending trials that train as one fused model.

With ``tune(..., fusion=F)`` the engine coalesces pending specs whose shape-changing
hyperparameters agree (:func:`nbtune.fusion.trial_planner.group_trials`) and that go from the
same budget to the same budget into *units* of up to F members, spread evenly over the
idle workers (:func:`nbtune.fusion.trial_planner.split_group`). Why the budgets: the members of
one fused model take every step together, so they must start and end their segment at
the same step (then they also reach each rung together and checkpoint together).

The allocator sees one pending spec per unit (its lead) and one running entry per unit,
and places a unit like any trial. Every member then becomes RUNNING on a ``1/F`` share of
that placement: the ledger, the GPU-seconds and the ``running == placed`` invariant stay
per trial, and the unit's GPU turns idle only when its last member has ended (a stopped
member frees no worker while others train on in the same process). Each member's Launch
carries the unit id and the member ids, so the runtime starts one process for them.
Algorithms see members as ordinary trials: a stop ends one member, the rest go on.

Elastic split (§5.3, :func:`split_idle`, when the loop checkpoints): when workers are idle
and nothing is queued, the biggest running unit gives half its members away; they resume
from their checkpoints as a new unit on the idle workers. A unit is never resized.

F_max from memory (``tune(..., fusion=True)``, :mod:`.fusion_memory`): ``f_max`` is then
only a cap; each shape group is probed with units of one and two members, and once both
have reported their peak memory its units are sized under the smallest worker's memory
less a margin.

Pure, like the engine: no clock, no I/O. Specs that restore another trial's checkpoint
(PBT) and Hydro target trials (the full model, :mod:`nbtune.core.roles`) are not fused.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbtune.allocators.allocator_protocol import Allocation
from nbtune.core import events as ev
from nbtune.core.resources import Placement
from nbtune.core.roles import is_target
from nbtune.core.trial import TrialSpec
from nbtune.engine.errors import EngineError
from nbtune.engine.fusion_memory import PROBES, Key, MemoryFit, shape_key
from nbtune.engine.state import InvariantError
from nbtune.fusion.trial_planner import group_trials, split_group

#: the :class:`~nbtune.engine.engine.Engine` these functions work on (not imported:
#: the engine imports this module)
Engine = Any

__all__ = ["FusionBinder", "UnitView", "enable", "capacity", "allocate", "split_idle", "check",
           "measured", "DEFAULT_FUSION"]

#: how many trials per worker the algorithm is asked for under fusion=True before any
#: group's F_max is measured
DEFAULT_FUSION = 16

_START, _BUDGET = "__nbtune_start", "__nbtune_budget"  # budget keys added to the shape keys


@dataclass
class FusionBinder:
    """The engine's fusion state: the limit, the shape keys and every unit launched."""

    #: the most members a unit may have (with ``fit``: a cap over the measured F_max)
    f_max: int
    shape_keys: tuple[str, ...] = ()
    #: split running units onto idle workers (§5.3): only when the loop checkpoints
    elastic: bool = False
    #: F_max from measured memory (fusion=True); None: every unit up to ``f_max``
    fit: MemoryFit | None = None
    #: unit id -> its member trial ids (at launch) and its whole placement
    members: dict[int, tuple[int, ...]] = field(default_factory=dict)
    placements: dict[int, Placement] = field(default_factory=dict)
    #: trial -> unit, set by :func:`allocate` and taken by the engine's launch
    launching: dict[int, int] = field(default_factory=dict)
    next_unit: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.f_max, bool) or not isinstance(self.f_max, int) or self.f_max < 1:
            raise ValueError(f"fusion: F must be an integer >= 1, got {self.f_max!r}")
        self.shape_keys = tuple(self.shape_keys)

    def settings(self) -> dict[str, Any]:
        """What :func:`enable` takes to fuse the same way again (stored for resume)."""
        return {"f_max": self.f_max, "shape_keys": list(self.shape_keys),
                "elastic": self.elastic, "memory": self.fit is not None,
                "margin": 0.1 if self.fit is None else self.fit.margin}

    def units(self, eng: Engine) -> list[list[TrialSpec]]:
        """The pending queue as units, in the queue order of their first member."""
        pending = list(eng.pending)
        order = {s.trial_id: i for i, s in enumerate(pending)}
        # a PBT clone restores another trial's checkpoint; a Hydro target trains alone (§4.3)
        fusible = [s for s in pending if s.restore_from is None and not is_target(s.config)]
        out = [[s] for s in pending if s.restore_from is not None or is_target(s.config)]
        configs = [{**s.config, _START: eng.trials[s.trial_id].budget_used, _BUDGET: s.budget}
                   for s in fusible]
        idle = len(eng.idle_gpus)
        probes: dict[Key, list[int]] = {}
        for g in group_trials(configs, [*self.shape_keys, _START, _BUDGET], batch_key=None):
            specs = [fusible[i] for i in g.trials]
            key = shape_key(specs[0].config, self.shape_keys)
            lim = self.limit(eng, key)
            if lim is not None:
                workers = max(idle + self._probing_gpus(eng, key), 1)
                out.extend([specs[i] for i in part]
                           for part in split_group(range(len(specs)), workers, lim))
                continue
            # probed: the missing sizes, one unit each; the group's other trials wait
            fit = self.fit
            assert fit is not None  # only a measured limit is ever None
            sizes = probes.setdefault(key, fit.probes(key, fit.in_flight(
                key, lambda u: self._alive(eng, u))))
            while sizes and specs:
                n = sizes.pop(0)
                out.append(specs[:n])
                specs = specs[n:]
        out.sort(key=lambda u: order[u[0].trial_id])
        return out

    def limit(self, eng: Engine, key: Key) -> int | None:
        """The most members a unit of shape group ``key`` may have now; None while the
        group is probed (fusion=True, fewer than two sizes measured)."""
        if self.fit is None or self.f_max < max(PROBES):  # nothing to choose
            return self.f_max
        lim = self.fit.limit(key, min(g.memory_gb for g in eng.cluster.gpus) * 1e9)
        return None if lim is None else min(lim, self.f_max)

    def _probing_gpus(self, eng: Engine, key: Key) -> int:
        """GPUs that the group's probes still hold. They come back to the group, so its
        trials are split over them too: without that, a group whose F = 2 probe reports
        while only the F = 1 probe's worker is idle puts every trial in one unit, and the
        second worker then idles (61 trials in one unit in ``fusion_e2e --fusion true``)."""
        if self.fit is None:
            return 0
        return len({g for u, (k, _, lim) in self.fit.units.items()
                    if k == key and lim is None and self._alive(eng, u)
                    for g, _ in self.placements[u]})

    def _alive(self, eng: Engine, unit: int) -> bool:
        return any(eng.trials[t].unit == unit and t in eng.running
                   for t in self.members.get(unit, ()))

    def running(self, eng: Engine) -> dict[int, Placement]:
        """One entry per running unit (its first running member, the unit's placement),
        and the unfused running trials as they are."""
        out: dict[int, Placement] = {}
        seen: set[int] = set()
        for tid, placement in eng.running.items():
            u = eng.trials[tid].unit
            if u is None:
                out[tid] = placement
            elif u not in seen:
                seen.add(u)
                out[tid] = self.placements[u]
        return out


class UnitView:
    """The engine as an allocator sees it under fusion: a unit is one trial."""

    def __init__(self, eng: Engine, pending: Sequence[TrialSpec],
                 running: Mapping[int, Placement]) -> None:
        self._eng = eng
        self.pending = deque(pending)
        self.running = running

    def __getattr__(self, name: str) -> Any:
        return getattr(self._eng, name)


def enable(eng: Engine, f_max: int, shape_keys: Sequence[str] = (),
           elastic: bool = False, memory: bool = False, margin: float = 0.1) -> FusionBinder:
    """Turn fusion on for ``eng`` (before it starts): units of up to ``f_max`` members;
    ``elastic`` splits running units onto idle workers (the loop must checkpoint);
    ``memory`` sizes units from measured memory (:mod:`.fusion_memory`), ``f_max`` capping
    them, keeping ``margin`` of the worker's memory free."""
    if eng.started:
        raise EngineError("fusion must be enabled before the experiment starts")
    eng.fusion = FusionBinder(f_max, tuple(shape_keys), elastic,
                              MemoryFit(margin) if memory else None)
    return eng.fusion


def measured(eng: Engine, e: ev.UnitMemoryMeasured) -> bool:
    """A unit's peak memory: refit its group's line; True when pending trials may now fuse
    wider (the engine then schedules again)."""
    b: FusionBinder | None = eng.fusion
    return b is not None and b.fit is not None and b.fit.measured(e.unit, int(e.peak_bytes))


def _view(eng: Engine, units: list[list[TrialSpec]] | None = None) -> UnitView:
    b: FusionBinder = eng.fusion
    units = b.units(eng) if units is None else units
    return UnitView(eng, [u[0] for u in units], b.running(eng))


def capacity(eng: Engine) -> int:
    """How many more trials the algorithm may hand out: the allocator's room in units,
    times F (a unit holds up to F trials)."""
    b: FusionBinder = eng.fusion
    per_unit = b.f_max
    if b.fit is not None:  # the widest F_max measured so far, else a default
        known = [b.limit(eng, k) for k in b.fit.peaks]
        per_unit = max([lim for lim in known if lim is not None],
                       default=min(DEFAULT_FUSION, b.f_max))
    return eng.allocator.capacity(_view(eng, [])) * per_unit


def allocate(eng: Engine) -> Allocation:
    """Ask the allocator to place units; return the allocation per member trial.

    Each launched unit gets the next unit id; its members get ``1/F`` of its placement.
    Resizes of fused trials are dropped (a unit is not resized).
    """
    b: FusionBinder = eng.fusion
    units = b.units(eng)
    by_lead = {u[0].trial_id: u for u in units}
    alloc = eng.allocator.allocate(_view(eng, units))
    launch: dict[int, Placement] = {}
    for lead, placement in alloc.launch.items():
        unit = by_lead.get(lead)
        if unit is None:
            raise EngineError(f"allocator {eng.allocator.name!r} launched trial {lead}, "
                              "which leads no pending unit")
        if unit[0].restore_from is not None:  # not fused (a PBT clone)
            launch[lead] = placement
            continue
        uid = b.next_unit
        b.next_unit += 1
        b.members[uid] = tuple(s.trial_id for s in unit)
        b.placements[uid] = placement
        if b.fit is not None:
            key = shape_key(unit[0].config, b.shape_keys)
            b.fit.launched(uid, key, len(unit), b.limit(eng, key))
        share = tuple((g, s / len(unit)) for g, s in placement)
        for s in unit:
            launch[s.trial_id] = share
            b.launching[s.trial_id] = uid
    resize = {tid: p for tid, p in alloc.resize.items() if eng.trials[tid].unit is None}
    return Allocation(launch=launch, resize=resize)


def split_idle(eng: Engine) -> list[int]:
    """Elastic split (Hydro §5.3): idle workers and nothing queued, so the running unit
    with the most members gives its second half away; returns those members.

    The engine pauses the half (each member leaves the fused model; its checkpoint at its
    last reported step is where it resumes) and requeues it at the front, in the order
    returned, then places it again, where the idle workers are. Units of one member are
    left alone (a lone trial gets more workers through the allocator, by data parallelism,
    if at all).
    """
    b: FusionBinder = eng.fusion
    if not (b.elastic and eng.ledger.idle) or eng.pending or eng.paused or eng.stopped:
        return []
    units: dict[int, list[int]] = {}
    for tid in eng.running:
        u = eng.trials[tid].unit
        if u is not None:
            units.setdefault(u, []).append(tid)
    biggest = max(units.values(), key=len, default=[])
    if len(biggest) < 2:
        return []
    return list(reversed(biggest[(len(biggest) + 1) // 2:]))  # front of the queue, in order


def check(eng: Engine) -> None:
    """Fused members run on their unit's GPUs with ``1/F`` of its shares; units <= F."""
    b: FusionBinder | None = eng.fusion
    if b is None:
        return
    if b.launching:
        raise InvariantError(f"trials {sorted(b.launching)} were given a unit but not launched")
    if b.fit is not None:
        b.fit.check()
    for uid, members in b.members.items():
        if not 1 <= len(members) <= b.f_max:
            raise InvariantError(f"unit {uid} has {len(members)} members, F is {b.f_max}")
    for tid, placement in eng.ledger.placements.items():
        u = eng.trials[tid].unit
        if u is None:
            continue
        if tid not in b.members.get(u, ()):
            raise InvariantError(f"trial {tid} runs in unit {u}, which it is not a member of")
        n = len(b.members[u])
        want = [(g, s / n) for g, s in b.placements[u]]
        if len(want) != len(placement) or any(
                g != h or abs(s - r) > 1e-9 for (g, s), (h, r) in zip(want, placement,
                                                                     strict=True)):
            raise InvariantError(f"trial {tid} holds {placement}, not 1/{n} of its unit "
                                 f"{u}'s {b.placements[u]}")
