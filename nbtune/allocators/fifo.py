"""FIFO, one trial per GPU: what Ray Tune and most tuners do by default; the baseline."""

from __future__ import annotations

import heapq

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
        gpus = heapq.nsmallest(k, view.idle_gpus)  # lowest ids first: tidy strips
        pending = view.pending
        return Allocation(
            launch={pending[i].trial_id: ((g, 1.0),) for i, g in enumerate(gpus)}
        )
