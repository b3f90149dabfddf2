"""Bookkeeping the engine keeps between events: placements, per-GPU load, the allocation log.

Kept apart from the decision logic in :mod:`nbtune.engine.engine` so the
invariants checked by ``validate=True`` have one obvious place to look.
"""

from __future__ import annotations

from dataclasses import dataclass

from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.tolerance import EPS

__all__ = ["AllocationRecord", "ResourceLedger", "InvariantError"]


class InvariantError(AssertionError):
    """``validate=True`` found the engine's state inconsistent (a bug, not bad input)."""


@dataclass
class AllocationRecord:
    """Trial ``trial_id`` held ``share`` of GPU ``gpu_id`` from ``start`` to ``end``."""

    trial_id: int
    gpu_id: int
    share: float
    start: float
    end: float | None = None


class ResourceLedger:
    """Who holds which share of which GPU, kept incrementally so each event is O(placement)."""

    def __init__(self) -> None:
        self.cluster: ClusterSpec | None = None
        self.load: dict[int, float] = {}
        self.idle: set[int] = set()
        self.placements: dict[int, Placement] = {}
        self.log: list[AllocationRecord] = []
        self._open: dict[int, list[int]] = {}  # trial -> indices of open records

    def set_cluster(self, cluster: ClusterSpec) -> list[int]:
        """Adopt a new cluster; return trials that held a GPU that is gone."""
        self.cluster = cluster
        ids = {g.gpu_id for g in cluster.gpus}
        for g in ids:
            self.load.setdefault(g, 0.0)
        lost = [
            tid for tid, pl in self.placements.items() if any(g not in ids for g, _ in pl)
        ]
        for g in list(self.load):
            if g not in ids:
                del self.load[g]
        self.idle = {g for g, v in self.load.items() if v <= 1e-12}
        return lost

    def place(self, trial_id: int, placement: Placement, time: float) -> None:
        self.placements[trial_id] = placement
        opened = []
        for g, s in placement:
            self.load[g] = self.load[g] + s
            self.idle.discard(g)
            self.log.append(AllocationRecord(trial_id, g, s, time))
            opened.append(len(self.log) - 1)
        self._open[trial_id] = opened

    def release(self, trial_id: int, time: float) -> Placement:
        placement = self.placements.pop(trial_id, ())
        for g, s in placement:
            if g in self.load:
                v = self.load[g] - s
                if v <= EPS:
                    v = 0.0
                    self.idle.add(g)
                self.load[g] = v
        for i in self._open.pop(trial_id, []):
            self.log[i].end = time
        return placement

    def check(self, max_share: dict[int, float]) -> None:
        if self.cluster is None:
            return
        recomputed = {g.gpu_id: 0.0 for g in self.cluster.gpus}
        for tid, pl in self.placements.items():
            if not pl:
                raise InvariantError(f"trial {tid} is running with an empty placement")
            for g, s in pl:
                if g not in recomputed:
                    raise InvariantError(f"trial {tid} placed on unknown GPU {g}")
                if not s > 0:
                    raise InvariantError(f"trial {tid} has non-positive share {s} on GPU {g}")
                recomputed[g] += s
        for g, v in recomputed.items():
            cap = max_share.get(g, 1.0)
            if v > cap + 1e-6:
                raise InvariantError(f"GPU {g} holds {v:.4f} > capacity {cap}")
            if abs(v - self.load[g]) > 1e-6:
                raise InvariantError(f"GPU {g} load drifted: ledger {self.load[g]} vs {v}")
            if (v <= EPS) != (g in self.idle):
                raise InvariantError(f"GPU {g} idle set inconsistent (load {v})")
