"""TrialGroup (Fluid §3.2): the unit of scheduling between algorithms and the allocator.

A TrialGroup is a set of trials, each with a training budget. Trials leave the
group when they complete or when the algorithm terminates them; the group's
goal is the smallest makespan. Grid/random search submit one group holding
every trial; SHA/Hyperband submit one group per rung; asynchronous algorithms
(ASHA, PBT) submit small groups as workers free up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nbtune.core.trial import TrialSpec

__all__ = ["TrialGroup"]


@dataclass
class TrialGroup:
    group_id: int
    specs: list[TrialSpec]
    members: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        ids = [s.trial_id for s in self.specs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"TrialGroup {self.group_id}: duplicate trial ids {ids}")
        self.members = set(ids)

    @classmethod
    def of(cls, group_id: int, specs: Iterable[TrialSpec]) -> TrialGroup:
        return cls(group_id, list(specs))

    def leave(self, trial_id: int) -> None:
        """A trial completed or was terminated: it no longer counts toward the makespan."""
        self.members.discard(trial_id)

    @property
    def done(self) -> bool:
        return not self.members

    def __len__(self) -> int:
        return len(self.specs)
