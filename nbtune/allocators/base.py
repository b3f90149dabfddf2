"""The allocator protocol: how much GPU each trial gets, and where.

An allocator is pure. The engine hands it a read-only :class:`SchedulingView`
(cluster, queue of pending specs, running placements, per-GPU load, what the
trials have measured so far) and applies the :class:`Allocation` it returns:
``launch`` places pending trials, ``resize`` moves or re-sizes running ones
(carried out at the trial's next iteration boundary via checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nbtune.core.group import TrialGroup
from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.trial import Trial, TrialSpec

__all__ = ["Allocation", "SchedulingView", "BaseAllocator"]


@dataclass
class Allocation:
    launch: dict[int, Placement] = field(default_factory=dict)
    resize: dict[int, Placement] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.launch or self.resize)


class SchedulingView(Protocol):
    """What an allocator may read. The engine implements it; tests may build their own."""

    time: float
    cluster: ClusterSpec
    max_budget: float
    #: the cap a person set on concurrent trials (None: no cap)
    max_concurrent: int | None

    @property
    def pending(self) -> Sequence[TrialSpec]: ...

    @property
    def running(self) -> Mapping[int, Placement]: ...

    @property
    def gpu_load(self) -> Mapping[int, float]:
        """Sum of the shares placed on each GPU (0 = idle)."""
        ...

    @property
    def idle_gpus(self) -> set[int]: ...

    def trial(self, trial_id: int) -> Trial: ...

    def group(self, group_id: int) -> TrialGroup | None: ...

    def unit_time(self, trial_id: int) -> tuple[float, float] | None:
        """Last observed (seconds per budget unit, width it ran at), or None if not measured."""
        ...

    @property
    def hints(self) -> Mapping[str, Any]:
        """Extra knowledge injected into the engine (profiles, workload priors)."""
        ...


class BaseAllocator:
    """Subclasses implement :meth:`capacity` and :meth:`allocate`."""

    name: str = "base"

    def capacity(self, view: SchedulingView) -> int:
        """How many more trials could start now; the engine asks the algorithm for that many."""
        raise NotImplementedError

    def allocate(self, view: SchedulingView) -> Allocation:
        raise NotImplementedError

    def max_share(self, view: SchedulingView, gpu_id: int) -> float:
        """The most share a GPU may hold in total (the engine validates against it)."""
        return 1.0
