"""FIFO, one trial per GPU: what Ray Tune and most tuners do by default; the baseline."""

from __future__ import annotations

import heapq
from typing import Any

from nbtune.allocators.base import Allocation, BaseAllocator, SchedulingView

__all__ = ["FifoAllocator"]


class FifoAllocator(BaseAllocator):
    """Pending trials, in queue order, each get a whole idle GPU (lowest id first)."""

    name = "fifo"

    def _room(self, view: SchedulingView) -> int:
        room = len(view.idle_gpus)
        if view.max_concurrent is not None:
            room = min(room, max(view.max_concurrent - len(view.running), 0))
        return room

    def capacity(self, view: SchedulingView) -> int:
        return self._room(view)

    def allocate(self, view: SchedulingView) -> Allocation:
        k = min(self._room(view), len(view.pending))
        if k == 0:
            return Allocation()
        pending = view.pending
        held = view.held
        if held:
            return Allocation(launch=_home_first([pending[i].trial_id for i in range(k)],
                                                 view.idle_gpus, held))
        gpus = heapq.nsmallest(k, view.idle_gpus)  # lowest ids first: tidy strips
        return Allocation(
            launch={pending[i].trial_id: ((g, 1.0),) for i, g in enumerate(gpus)}
        )


def _home_first(trials: list[int], idle: set[int], held: Any) -> dict[int, Any]:
    """A held trial gets the GPU its waiting process holds when it is idle; others the lowest.

    Elsewhere the held process would have to be given up and the trial
    restarted (from its checkpoint if it has one, else from the beginning).
    """
    free = set(idle)
    out: dict[int, Any] = {}
    for tid in trials:
        home = held.get(tid)
        if home is not None and len(home) == 1 and home[0][0] in free:
            out[tid] = ((home[0][0], 1.0),)
            free.discard(home[0][0])
    rest = heapq.nsmallest(len(trials) - len(out), free)
    for tid in trials:
        if tid not in out:
            out[tid] = ((rest.pop(0), 1.0),)
    return out
