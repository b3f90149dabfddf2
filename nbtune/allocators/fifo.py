"""FIFO, one trial per GPU: what Ray Tune and most tuners do by default; the baseline."""

from __future__ import annotations

import heapq
from typing import Any

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator, SchedulingView
from nbtune.core.tolerance import EPS

__all__ = ["FifoAllocator"]


class FifoAllocator(BaseAllocator):
    """Pending trials, in queue order, each get a whole idle GPU (lowest id first).

    ``gpus_per_trial`` is Ray Tune's per-trial GPU request (``resources={"gpu": k}``):
    an integer k > 1 gives every trial k idle GPUs (one DDP trial across k workers);
    a fraction gives every trial that share of one GPU (MPS packing; ``0.5``: two
    trials per GPU). The request is fixed: the other allocators size trials
    themselves, so it belongs to FIFO only.
    """

    name = "fifo"

    def __init__(self, gpus_per_trial: float = 1.0) -> None:
        w = float(gpus_per_trial)
        if not (w > 0 and (w <= 1 or w.is_integer())):
            raise ValueError(f"gpus_per_trial must be a fraction of one GPU (0 < x <= 1) or a "
                             f"whole number of GPUs, got {gpus_per_trial!r}")
        self.gpus_per_trial = w
        self._most = 0  # the most GPUs the cluster has had

    def _fits(self, view: SchedulingView) -> None:
        """A request larger than the cluster ever was is the user's error; one larger than
        it is now (a worker lost) waits for the worker's replacement."""
        n = self._most = max(self._most, len(view.cluster.gpus))
        if self.gpus_per_trial > n:
            raise ValueError(
                f"gpus_per_trial={self.gpus_per_trial:g} asks for more GPUs than the cluster has "
                f"({n}; on CPU each Dask worker stands for one): ask for at most {n} or give the "
                "cluster more workers")

    def _slots(self, view: SchedulingView) -> list[tuple[int, float]]:
        """Free places for one trial each: (GPU, share), lowest GPU ids first."""
        w = self.gpus_per_trial
        if w >= 1:
            return [(g, 1.0) for g in sorted(view.idle_gpus)]
        load = view.gpu_load
        return [(g.gpu_id, w) for g in view.cluster.gpus
                for _ in range(int((1.0 - load.get(g.gpu_id, 0.0)) / w + EPS))]

    def _room(self, view: SchedulingView) -> int:
        self._fits(view)
        w = self.gpus_per_trial
        room = len(view.idle_gpus) // int(w) if w >= 1 else len(self._slots(view))
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
        if self.gpus_per_trial != 1.0:
            slots, per = self._slots(view), max(int(self.gpus_per_trial), 1)
            return Allocation(launch={pending[i].trial_id: tuple(slots[i * per:(i + 1) * per])
                                      for i in range(k)})
        if held:
            return Allocation(launch=_home_first([pending[i].trial_id for i in range(k)],
                                                 view.idle_gpus, held))
        # lowest ids first: tidy strips (the engine's idle set keeps them in order, an IdleSet;
        # a view's filtered copy is a plain set, walked)
        idle = view.idle_gpus
        lowest = getattr(idle, "lowest", None)
        gpus = heapq.nsmallest(k, idle) if lowest is None else lowest(k)
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
