"""The one resource ledger: placements, per-GPU load and trial count, GPU-seconds, the log.

The engine owns it and is the only writer; allocators read it through the
read-only :class:`~nbtune.allocators.allocator_protocol.LedgerView` it implements (the
engine's ``SchedulingView`` hands these same mappings on), and the runtimes,
the store and the UI read its allocation log. Every change of what a trial
holds goes through :meth:`ResourceLedger.place` and :meth:`ResourceLedger.release`,
so a trial's share and its GPU-seconds are accrued here and nowhere else.
Kept apart from the decision logic in :mod:`nbtune.engine.engine` so the
invariants checked by ``validate=True`` have one obvious place to look.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from heapq import heappop, heappush
from types import MappingProxyType

from nbtune.core.resources import ClusterSpec, Placement, width
from nbtune.core.tolerance import EPS
from nbtune.core.trial import TrialRecord

__all__ = ["AllocationRecord", "IdleSet", "ResourceLedger", "InvariantError"]


class InvariantError(AssertionError):
    """``validate=True`` found the engine's state inconsistent (a bug, not bad input)."""


class IdleSet(set[int]):
    """The idle GPUs' ids: a set that also hands out the lowest ones, :meth:`lowest`, without
    walking itself (a set keeps the table it grew to when every GPU was idle, and a walk
    reads all of it). Its ids are also kept in a heap, entries of GPUs taken since left
    there and skipped as they come up; every way in (``add``, ``update``, ``|=``) pushes.
    Set operations (``idle - {g}``) give plain sets, so a view that filters the idle GPUs
    offers no ``lowest`` of the unfiltered ones.
    """

    __slots__ = ("_heap",)

    def __init__(self, gpus: Iterable[int] = ()) -> None:
        super().__init__(gpus)
        self._heap = sorted(self)

    def add(self, gpu: int) -> None:
        super().add(gpu)
        heappush(self._heap, gpu)

    def update(self, *others: Iterable[int]) -> None:
        super().update(*others)
        self._heap = sorted(self)

    def __ior__(self, other: Set[int]) -> IdleSet:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        super().clear()
        self._heap = []

    def lowest(self, k: int) -> list[int]:
        """The ``k`` lowest ids, ascending (fewer when fewer are idle): what
        ``heapq.nsmallest(k, self)`` returns, in O(k log n)."""
        heap, out = self._heap, []
        if len(heap) > 4 * len(self) + 64:  # mostly GPUs taken since: start afresh
            heap = self._heap = sorted(self)
        while heap and len(out) < k:
            g = heappop(heap)
            if g in self and (not out or g != out[-1]):  # taken since, or twice in: dropped
                out.append(g)
        for g in out:
            heappush(heap, g)
        return out


@dataclass
class AllocationRecord:
    """TrialRecord ``trial_id`` held ``share`` of GPU ``gpu_id`` from ``start`` to ``end``."""

    trial_id: int
    gpu_id: int
    share: float
    start: float
    end: float | None = None


class ResourceLedger:
    """Who holds which share of which GPU, kept incrementally so each event is O(placement).

    ``load`` is kept by adding a share on place and subtracting it on release
    (a GPU left at ≤ EPS is 0 and idle); allocators that re-sum shares for a
    what-if book get floats that may differ from it in the last bit, which is
    why those books re-sum instead of copying ``load`` (see
    :mod:`nbtune.allocators.gpu_book`).
    """

    def __init__(self) -> None:
        self.cluster: ClusterSpec | None = None
        self.load: dict[int, float] = {}
        self.count: dict[int, int] = {}  # shares held on each GPU
        self.idle = IdleSet()
        self.placements: dict[int, Placement] = {}
        #: running trial -> when it was placed, counted in places: ``placements``' order
        self.placed_seq: dict[int, int] = {}
        self._places = 0
        self.log: list[AllocationRecord] = []
        self._open: dict[int, list[int]] = {}  # trial -> indices of open records
        #: paused trials -> the placement they last ran on (a speculation or promotion
        #: may go on there); ``_held``: those whose process waits in place (memory held)
        self.paused_on: dict[int, Placement] = {}
        self._held: dict[int, Placement] = {}
        self._views = (MappingProxyType(self.placements), MappingProxyType(self.load),
                       MappingProxyType(self.count), MappingProxyType(self._held))
        #: counts the changes below: an equal version, an unchanged ledger
        self.version = 0

    # ---------------------------------------------------------- LedgerView (read-only)
    @property
    def running(self) -> Mapping[int, Placement]:
        return self._views[0]

    @property
    def gpu_load(self) -> Mapping[int, float]:
        return self._views[1]

    @property
    def gpu_count(self) -> Mapping[int, int]:
        return self._views[2]

    @property
    def idle_gpus(self) -> Set[int]:
        return self.idle

    @property
    def held(self) -> Mapping[int, Placement]:
        return self._views[3]

    # ---------------------------------------------------------- changes (the engine's)
    def set_cluster(self, cluster: ClusterSpec) -> list[int]:
        """Adopt a new cluster; return trials that held a GPU that is gone."""
        self.version += 1
        self.cluster = cluster
        ids = {g.gpu_id for g in cluster.gpus}
        for g in ids:
            self.load.setdefault(g, 0.0)
            self.count.setdefault(g, 0)
        lost = [
            tid for tid, pl in self.placements.items() if any(g not in ids for g, _ in pl)
        ]
        for g in list(self.load):
            if g not in ids:
                del self.load[g]
                del self.count[g]
        self.idle.clear()
        self.idle.update(g for g, v in self.load.items() if v <= EPS)
        return lost

    def place(self, trial: TrialRecord, placement: Placement, time: float) -> None:
        """``trial`` holds ``placement`` from ``time`` on (its share starts accruing GPU-seconds).

        A paused trial placed again no longer waits anywhere else.
        """
        tid = trial.trial_id
        self.version += 1
        self.forget(tid)
        self.placements[tid] = placement
        self.placed_seq.pop(tid, None)
        self.placed_seq[tid] = self._places
        self._places += 1
        opened = []
        for g, s in placement:
            self.load[g] = self.load[g] + s
            self.count[g] += 1
            self.idle.discard(g)
            self.log.append(AllocationRecord(tid, g, s, time))
            opened.append(len(self.log) - 1)
        self._open[tid] = opened
        trial.share, trial.share_since = width(placement), time

    def release(self, trial: TrialRecord, time: float, *, pause: bool = False) -> Placement | None:
        """``trial`` gives back what it holds at ``time``; its GPU-seconds so far are banked.

        ``pause``: remember the placement as where the paused trial last ran.
        Returns the placement it held, or None if it held none (then nothing changes).
        """
        tid = trial.trial_id
        placement = self.placements.pop(tid, None)
        if placement is None:
            return None
        del self.placed_seq[tid]
        self.version += 1
        if pause:
            self.paused_on[tid] = placement
        trial.gpu_seconds = trial.gpu_seconds_at(time)
        trial.share = 0.0
        for g, s in placement:
            if g in self.load:
                v = self.load[g] - s
                if v <= EPS:
                    v = 0.0
                    self.idle.add(g)
                self.load[g] = v
                self.count[g] -= 1
        for i in self._open.pop(tid, []):
            self.log[i].end = time
        return placement

    def hold(self, trial_id: int) -> bool:
        """The paused trial's process waits where it last ran; False if it ran nowhere known."""
        where = self.paused_on.get(trial_id)
        if where is None:
            return False
        self.version += 1
        self._held[trial_id] = where
        return True

    def forget(self, trial_id: int) -> bool:
        """The trial is paused nowhere any more; True if a process of it was waiting (held)."""
        self.version += 1
        self.paused_on.pop(trial_id, None)
        return self._held.pop(trial_id, None) is not None

    def check(self, max_share: dict[int, float]) -> None:
        if self.cluster is None:
            return
        recomputed = {g.gpu_id: 0.0 for g in self.cluster.gpus}
        counted = dict.fromkeys(recomputed, 0)
        for tid, pl in self.placements.items():
            if not pl:
                raise InvariantError(f"trial {tid} is running with an empty placement")
            for g, s in pl:
                if g not in recomputed:
                    raise InvariantError(f"trial {tid} placed on unknown GPU {g}")
                if not s > 0:
                    raise InvariantError(f"trial {tid} has non-positive share {s} on GPU {g}")
                recomputed[g] += s
                counted[g] += 1
        for g, v in recomputed.items():
            cap = max_share.get(g, 1.0)
            if v > cap + 1e-6:
                raise InvariantError(f"GPU {g} holds {v:.4f} > capacity {cap}")
            if abs(v - self.load[g]) > 1e-6:
                raise InvariantError(f"GPU {g} load drifted: ledger {self.load[g]} vs {v}")
            if counted[g] != self.count[g]:
                raise InvariantError(f"GPU {g} count drifted: ledger {self.count[g]} vs "
                                     f"{counted[g]}")
            if (v <= EPS) != (g in self.idle):
                raise InvariantError(f"GPU {g} idle set inconsistent (load {v})")
        if self.idle.lowest(len(self.idle)) != sorted(self.idle):
            raise InvariantError("the idle GPUs' lowest-first order lost some of them")
