"""A hand-built SchedulingView for allocator tests: every number an allocator may read."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.trial import TrialRecord, TrialSpec


@dataclass
class View:
    """A hand-built SchedulingView: every number the allocator may read is set here."""

    cluster: ClusterSpec
    trials: dict[int, TrialRecord]
    running: dict[int, Placement]
    pending: list[TrialSpec] = field(default_factory=list)
    hints: dict[str, Any] = field(default_factory=dict)
    time: float = 0.0
    max_budget: float = 100.0
    max_concurrent: int | None = None
    held: dict[int, Placement] = field(default_factory=dict)

    @property
    def gpu_load(self) -> dict[int, float]:
        load = {g.gpu_id: 0.0 for g in self.cluster.gpus}
        for pl in self.running.values():
            for g, s in pl:
                if g in load:  # a GPU the cluster no longer has holds nothing
                    load[g] += s
        return load

    @property
    def gpu_count(self) -> dict[int, int]:
        on = Counter(g for pl in self.running.values() for g, _ in pl)
        return {g.gpu_id: on[g.gpu_id] for g in self.cluster.gpus}

    @property
    def idle_gpus(self) -> set[int]:
        return {g for g, v in self.gpu_load.items() if v <= 1e-12}

    def trial(self, tid: int) -> TrialRecord:
        return self.trials[tid]

    def group(self, gid: int) -> None:
        return None

    def unit_time(self, tid: int) -> None:
        return None
