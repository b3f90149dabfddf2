"""Input stalls as capacity: a trial that waits on its data leaves its worker's compute idle.

HyperSack §I-A (Fig. 2): a lightweight trial keeps its GPU busy only a
fraction u of each iteration; the rest it waits on its data loader. Trials
whose busy periods interleave fill that idle time until Σu reaches 1, so a
worker holds :func:`~nbtune.allocators.bubbles.stall_oversubscription` of
them (1/mean(u), capped). ``u`` is only ever *measured*: the runtime's
profiler samples each trial's utilization while it runs alone on its worker
(NVML on a GPU, psutil's CPU time of the trial's processes on a CPU worker)
and keeps it as the model's ``demand.compute``. A model nobody measured, or
one measured busy (u = 1), is never packed.

:func:`stall_launches` is the decision ``allocator="bubbles"`` takes after its
base allocator: trials the base left waiting (no idle worker) go, in queue
order, to the worker whose trials have the most measured idle compute, if
the trials there and the newcomer still satisfy Σu ≤ 1 (equivalently, their
count ≤ ``stall_oversubscription`` of their u's). Each gets the worker whole
(share 1: a packed trial keeps its thread count; its waits, not a smaller
share, make room), and :func:`stall_max_share` raises the worker's cap to
the stall ratio accordingly (the engine's invariant check reads it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from nbtune.allocators.allocator_protocol import Allocation, SchedulingView
from nbtune.allocators.bubbles import stall_oversubscription
from nbtune.allocators.profiling import profile_for
from nbtune.core.tolerance import EPS

__all__ = ["busy_fraction", "stall_launches", "stall_max_share", "stall_slots"]

#: measured utilization at or above this is "busy": no stall worth packing into
BUSY = 0.9


def busy_fraction(view: SchedulingView, config: Mapping[str, Any]) -> float | None:
    """The model's measured busy fraction u in (0, 1), or None (unmeasured, or busy)."""
    prof = profile_for(view.hints.get("profiles"), config)
    if prof is None or not prof.demand.compute > 0 or prof.unit_time is None:
        return None  # nothing measured alone yet: the demand is the default, not a measurement
    u = float(prof.demand.compute)
    return u if u < BUSY else None


def _occupants(view: SchedulingView, alloc: Allocation | None = None) -> dict[int, list[int]]:
    """Trials on each single-GPU worker (running, and launched by ``alloc``); -1 marks a
    worker some multi-GPU trial also holds (never packed)."""
    on: dict[int, list[int]] = {}
    launches = dict(alloc.launch) if alloc is not None else {}
    for tid, pl in list(view.running.items()) + list(launches.items()):
        for g, _ in pl:
            on.setdefault(g, []).append(tid if len(pl) == 1 else -1)
    return on


def _us(view: SchedulingView, tids: Sequence[int],
        configs: Mapping[int, Mapping[str, Any]]) -> list[float] | None:
    out = []
    for t in tids:
        if t < 0:
            return None
        cfg = configs.get(t)
        if cfg is None:
            cfg = view.trial(t).config
        u = busy_fraction(view, cfg)
        if u is None:
            return None
        out.append(u)
    return out


def _fits(us: list[float]) -> bool:
    return len(us) <= stall_oversubscription(us) + EPS


def stall_launches(view: SchedulingView, alloc: Allocation) -> None:
    """Add to ``alloc`` the waiting trials that fit into measured input stalls (see module doc)."""
    left = [s for s in view.pending if s.trial_id not in alloc.launch]
    if not left or view.idle_gpus - {g for pl in alloc.launch.values() for g, _ in pl}:
        return  # an idle worker is better than a shared one: the base decides those
    configs = {s.trial_id: s.config for s in view.pending}
    on = _occupants(view, alloc)
    us = {g: _us(view, tids, configs) for g, tids in on.items()}
    for spec in left:
        u = busy_fraction(view, spec.config)
        if u is None:
            continue
        room = [(sum(x), g) for g, x in us.items() if x is not None and _fits([*x, u])]
        if not room:
            continue
        _, g = min(room)  # the worker with the most idle compute measured
        alloc.launch[spec.trial_id] = ((g, 1.0),)
        us[g] = [*us[g], u]  # type: ignore[list-item]


def stall_max_share(view: SchedulingView, gpu_id: int, base: float) -> float:
    """The worker's cap: the base's, or the stall ratio of the trials it holds if larger."""
    tids = _occupants(view).get(gpu_id, [])
    us = _us(view, tids, {}) if tids else None
    return max(base, float(math.ceil(stall_oversubscription(us) - EPS))) if us else base


def stall_slots(view: SchedulingView) -> int:
    """How many more trials like the running ones the measured stalls hold (for capacity)."""
    n = 0
    for tids in _occupants(view).values():
        us = _us(view, tids, {})
        if us:
            n += max(math.floor(1.0 / (sum(us) / len(us)) + EPS) - len(us), 0)
    return n
