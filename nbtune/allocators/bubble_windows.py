"""``allocator="bubbles"``: shortest remaining work into the shortest idle window, over any base.

An idle window is a stretch of time a worker has nothing of its own to do.
Two kinds are known to a real run, and only those are used (no oracle):

* *barrier idle* — a synchronous rung waits for its stragglers: a worker idle
  now stays idle until the rung closes, i.e. until the last running trial
  reaches its segment's budget. That moment is predicted from what the run
  measured: each running trial's seconds per budget unit (the engine's
  ``unit_time``) times the budget it has left (:func:`barrier_windows`, via
  :func:`~nbtune.allocators.bubbles.straggler_gaps`).
* *published windows* — a co-located host job (a pipeline-parallel trainer)
  publishes each of its workers' measured busy/idle timeline as
  ``hints["bubbles"]``: ``{gpu_id: [IdleWindow, ...]}``. A worker inside one
  of its windows has the window's idle seconds left, ``(end − now) × capacity``
  (a pipeline stage idle a measured fraction of every iteration until the host
  ends publishes one window to the host's predicted end with that fraction,
  :class:`nbtune.bubbles.bubble_runtime.BubbleRuntime`); one outside every window is busy.

**Memory.** A window may say how much memory the host leaves beside it
(``room_gb``: its measured limit less the stage's measured peak). A trial
goes there only if its own measured peak fits that room (Hydro profiles each
trial's memory and checks it against the stage's, Fig. 9b); a trial not
measured yet counts as the largest peak measured so far, and before anything
was measured as 0: the run's first trials are its probes.

:func:`ledger_idle_windows` measures, after the fact, every stretch a worker
held nothing in the engine's allocation log (what a benchmark reports).

*Input stalls* are the third kind: a trial measured busy only a fraction of
the time (waiting on its data) leaves its worker's compute idle; trials the
base leaves waiting are packed there (:mod:`nbtune.allocators.stall_packing`).

**The rule.** :class:`BubblesAllocator` lets its base allocator decide which
pending trials start and with what share, then re-pairs the single-GPU
launches onto idle GPUs among themselves, best fit: windows in ascending
order each take the shortest remaining trial if it fits (its predicted
work ≤ the window), so the shortest work goes into the shortest window that
holds it; trials that fit no window take the windows left, shortest work
into shortest window. *Why:* this fits the most trials inside their windows
(a trial that outlives its window delays what the window's end brings back:
the barrier, or the host's next busy period). If the shortest trial does not
fit a window, no trial does, so skipping it loses nothing; if it fits, any
pairing that gives that window another trial can swap the two without
losing a fit. Only launches of the same share
on GPUs of the same kind, memory and node are exchanged, so the base's
packing, memory and per-node CPU decisions stand; a held trial (its process
waits on its own GPU) keeps its placement. Remaining work is the trial's
measured seconds per unit times its budget left; a trial not measured yet
uses the median of the measured ones (the run's own prior), else 1 s/unit.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator, SchedulingView
from nbtune.allocators.bubbles import IdleWindow, straggler_gaps
from nbtune.allocators.profiling import profile_for
from nbtune.allocators.stall_packing import stall_launches, stall_max_share, stall_slots
from nbtune.core.resources import Placement
from nbtune.core.tolerance import EPS

__all__ = ["BubblesAllocator", "bubbles_over", "best_fit", "use_registry", "barrier_windows", "published_windows",
           "published_room", "fits", "memory_need", "ledger_idle_windows",
           "remaining_work"]


def ledger_idle_windows(log: Iterable[Any], gpu_ids: Sequence[int], until: float,
                        start: float | None = None) -> list[IdleWindow]:
    """Every stretch in ``[start, until]`` in which a GPU held no allocation (kind ``"idle"``).

    ``log`` holds records with ``gpu_id``, ``start`` and ``end`` (None: still
    held), as the engine's ``ledger.log``; ``start`` defaults to the first
    allocation's start (before it the experiment was still starting up).
    """
    recs = list(log)
    if start is None:
        start = min((r.start for r in recs), default=until)
    out: list[IdleWindow] = []
    for g in gpu_ids:
        spans = sorted((r.start, until if r.end is None else r.end) for r in recs
                       if r.gpu_id == g)
        t = start
        for a, b in spans:
            if a > t + EPS:
                out.append(IdleWindow(g, t, min(a, until), "idle"))
            t = max(t, b)
        if until > t + EPS:
            out.append(IdleWindow(g, t, until, "idle"))
    return [w for w in out if w.end > w.start + EPS]


#: builds an allocator from its registry name: ``nbtune.allocators.make_allocator``, handed in
#: by the registry (it imports this module, so importing it back would be a cycle)
_make: Callable[..., BaseAllocator] | None = None


def use_registry(make: Callable[..., BaseAllocator]) -> None:
    """Called once by :mod:`nbtune.allocators`: how a base named by a string is built."""
    global _make
    _make = make


def _unit_seconds(view: SchedulingView, tid: int) -> float | None:
    ut = view.unit_time(tid)
    return None if ut is None else float(ut[0])


def remaining_work(view: SchedulingView, trial_ids: Iterable[int],
                   budgets: Mapping[int, float]) -> dict[int, float]:
    """Predicted seconds each trial needs to reach ``budgets[tid]``, from measurements only."""
    ids = list(trial_ids)
    known = [u for t in list(view.running) + ids if (u := _unit_seconds(view, t)) is not None]
    prior = statistics.median(known) if known else 1.0
    out = {}
    for tid in ids:
        try:
            used = view.trial(tid).budget_used
        except KeyError:
            used = 0.0
        u = _unit_seconds(view, tid)
        out[tid] = max(budgets[tid] - used, 0.0) * (prior if u is None else u)
    return out


def barrier_windows(view: SchedulingView) -> dict[int, float]:
    """Seconds each idle GPU stays idle until the running trials' last one ends its segment.

    The running trials' predicted finishes (remaining work from now) and the
    idle GPUs (finished now) are the straggler gaps of one barrier; nothing
    running means no barrier in sight (an unbounded window).
    """
    idle = set(view.idle_gpus)
    running = {tid: view.trial(tid).target_budget for tid in view.running}
    work = remaining_work(view, running, running)
    finish: dict[int, float] = {g: view.time for g in idle}
    for tid, pl in view.running.items():
        for g, _ in pl:
            finish[g] = max(finish.get(g, view.time), view.time + work[tid])
    if not running:
        return {g: math.inf for g in idle}
    gaps = {w.gpu_id: w.end - w.start for w in straggler_gaps(finish, view.time)}
    return {g: gaps.get(g, 0.0) for g in idle}


def published_windows(view: SchedulingView) -> dict[int, float]:
    """Idle seconds left in the published window each GPU is in now (0: it is busy now)."""
    pub = view.hints.get("bubbles")
    if not pub:
        return {}
    out = {}
    for g, windows in pub.items():
        left = [(w.end - view.time) * w.capacity for w in windows
                if w.start <= view.time + EPS < w.end]
        out[int(g)] = max(left, default=0.0)
    return out


def published_room(view: SchedulingView) -> dict[int, float]:
    """Memory (GB) the host leaves beside each GPU whose published window holds now."""
    pub = view.hints.get("bubbles")
    out: dict[int, float] = {}
    for g, windows in (pub or {}).items():
        rooms = [w.room_gb for w in windows if w.start <= view.time + EPS < w.end]
        if rooms:
            out[int(g)] = min(rooms)
    return out


def fits(guest_peak: float, stage_peak: float, limit: float) -> bool:
    """A guest may go beside a stage only if both measured peaks together stay within ``limit``."""
    return guest_peak + stage_peak <= limit


def memory_need(view: SchedulingView, config: Mapping[str, Any]) -> float:
    """A trial's measured peak memory in GB (see the module docstring for an unmeasured one)."""
    profiles = view.hints.get("profiles")
    prof = profile_for(profiles, config)
    if prof is not None and prof.demand.memory_gb > 0:
        return float(prof.demand.memory_gb)
    seen = [p.demand.memory_gb for t in view.running
            if (p := profile_for(profiles, view.trial(t).config)) is not None]
    return max(seen, default=0.0)


def best_fit(jobs: Sequence[int], places: Sequence[Placement], fits: Any,
             may: Any = None) -> dict[int, Placement]:
    """Pair ``jobs`` (shortest first) with ``places`` (shortest window first), most fits first.

    Each place in turn takes the shortest job left that ``fits(job, place)``;
    the places no job fitted then take the jobs left, in order, each the first
    one that ``may(job, place)`` go there if any does (``fits`` less the window:
    the memory check). Jobs and places come in equal numbers.
    """
    out: dict[int, Placement] = {}
    left, skipped = list(jobs), []
    for pl in places:
        job = next((j for j in left if fits(j, pl)), None)
        if job is None:
            skipped.append(pl)
        else:
            out[job] = pl
            left.remove(job)
    for pl in skipped:
        job = next((j for j in left if may is None or may(j, pl)), left[0])
        out[job] = pl
        left.remove(job)
    return out


class BubblesAllocator(BaseAllocator):
    """Wraps ``base``: its launches on idle GPUs re-paired, shortest work into shortest window.

    (Best fit: the shortest window that holds it; see the module docstring.)

    ``base`` is an allocator or a registry name (default ``"fifo"``); extra
    keyword arguments build it (``BubblesAllocator(base="waterfill", c=2)``).
    The registry names ``"bubbles"`` (FIFO inside) and ``"bubbles+<name>"``
    (any registered allocator inside) build this class. See the module
    docstring for the rule and why.
    """

    name = "bubbles"
    default_base = "fifo"

    def __init__(self, base: str | BaseAllocator | None = None, **base_options: Any) -> None:
        spec = self.default_base if base is None else base
        if isinstance(spec, BaseAllocator):
            self.base = spec
        elif _make is None:  # pragma: no cover - nbtune.allocators sets it on import
            raise RuntimeError("import nbtune.allocators to build allocators by name")
        else:
            self.base = _make(spec, **base_options)
        if base is not None:
            self.name = f"bubbles+{base if isinstance(base, str) else self.base.name}"

    def capacity(self, view: SchedulingView) -> int:
        return self.base.capacity(view) + stall_slots(view)

    def max_share(self, view: SchedulingView, gpu_id: int) -> float:
        return stall_max_share(view, gpu_id, self.base.max_share(view, gpu_id))

    def windows(self, view: SchedulingView) -> dict[int, float]:
        """Each idle GPU's idle window in seconds: published if its host said, else the barrier's."""
        out = barrier_windows(view)
        for g, left in published_windows(view).items():
            if g in out:
                out[g] = left
        return out

    def allocate(self, view: SchedulingView) -> Allocation:
        alloc = self.base.allocate(view)
        room = published_room(view)
        configs = {s.trial_id: s.config for s in view.pending}
        need = {t: memory_need(view, configs[t]) for t in alloc.launch if t in configs} \
            if room else {}

        def holds(tid: int, pl: Placement) -> bool:  # the host leaves the trial's peak room
            return all(need.get(tid, 0.0) <= room.get(g, math.inf) + EPS for g, _ in pl)

        idle = view.idle_gpus
        held = getattr(view, "held", {})
        on_gpu: dict[int, int] = {}
        for pl in alloc.launch.values():
            for g, _ in pl:
                on_gpu[g] = on_gpu.get(g, 0) + 1
        movable = [tid for tid, pl in alloc.launch.items()
                   if len(pl) == 1 and pl[0][0] in idle and on_gpu[pl[0][0]] == 1
                   and tid not in held]
        if len(movable) >= 2:
            self._repair(view, alloc, movable, holds)
        for tid in [t for t, pl in alloc.launch.items() if t not in held and not holds(t, pl)]:
            del alloc.launch[tid]  # fits beside no host stage it was given: it waits
        if not room:  # input stalls (not beside a host, whose stage's bubbles are its own)
            stall_launches(view, alloc)
        return alloc

    def _repair(self, view: SchedulingView, alloc: Allocation, movable: list[int],
                holds: Callable[[int, Placement], bool]) -> None:
        gpus = view.cluster.by_id()
        groups: dict[tuple[Any, ...], list[int]] = {}
        for tid in movable:
            g, share = alloc.launch[tid][0]
            gpu = gpus[g]
            groups.setdefault((round(share, 9), gpu.kind, gpu.memory_gb, gpu.node), []).append(tid)
        budgets = {s.trial_id: s.budget for s in view.pending}
        work = remaining_work(view, movable, budgets)
        window = self.windows(view)
        for tids in groups.values():
            if len(tids) < 2:
                continue
            places: list[Placement] = sorted((alloc.launch[t] for t in tids),
                                             key=lambda pl: (window.get(pl[0][0], math.inf),
                                                             pl[0][0]))
            alloc.launch.update(best_fit(
                sorted(tids, key=lambda t: (work[t], t)), places,
                lambda t, pl: work[t] <= window.get(pl[0][0], math.inf) and holds(t, pl),
                holds))


def bubbles_over(base_name: str) -> type[BubblesAllocator]:
    """The registry's ``"bubbles+<base_name>"``: :class:`BubblesAllocator` with that base."""
    return type(f"BubblesOver_{base_name}", (BubblesAllocator,),
                {"name": f"bubbles+{base_name}", "default_base": base_name,
                 "__doc__": f"``bubbles`` over ``{base_name}`` (see :class:`BubblesAllocator`)."})
