"""The allocator protocol: how much GPU each trial gets, and where.

An allocator is pure. The engine hands it a read-only :class:`SchedulingView`
(queue of pending specs, what the trials have measured so far, and through
:class:`LedgerView` the cluster, running placements and per-GPU load and
trial count) and applies the :class:`Allocation` it returns: ``launch``
places pending trials, ``resize`` moves or re-sizes running ones (carried out
at the trial's next iteration boundary via checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Protocol

from nbtune.core.group import TrialGroup
from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.trial import TrialRecord, TrialSpec

__all__ = ["Allocation", "LedgerView", "SchedulingView", "BaseAllocator"]


@dataclass
class Allocation:
    launch: dict[int, Placement] = field(default_factory=dict)
    resize: dict[int, Placement] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.launch or self.resize)


class LedgerView(Protocol):
    """The engine's resource ledger, read-only: who holds which share of which GPU now.

    The engine owns the one ledger (:class:`nbtune.engine.state.ResourceLedger`)
    and changes it only as it applies an :class:`Allocation`, releases a
    trial's GPUs or adopts a new cluster; an allocator reads these numbers
    and keeps no copy of them that it trusts in a later call, unless the view
    offers a ``state_version`` (the engine's :attr:`~nbtune.engine.engine.Engine.state_version`)
    and it is the same as when the copy was made. A book an allocator builds for one decision (the
    Fluid allocators' :class:`~nbtune.allocators.gpu_book.GpuBook`, the
    knapsacks' :class:`~nbtune.allocators.knapsack.ClusterRoom`) is derived
    from ``running`` or ``gpu_load`` and holds what-if placements the engine
    has not applied yet.
    """

    @property
    def cluster(self) -> ClusterSpec: ...

    @property
    def running(self) -> Mapping[int, Placement]:
        """Every running trial's placement, in the order they were placed (a resize re-places)."""
        ...

    @property
    def gpu_load(self) -> Mapping[int, float]:
        """Sum of the shares placed on each GPU of the cluster (0 = idle)."""
        ...

    @property
    def gpu_count(self) -> Mapping[int, int]:
        """How many shares of running trials each GPU of the cluster holds (0 = idle)."""
        ...

    @property
    def idle_gpus(self) -> Set[int]:
        """The GPUs of the cluster nobody holds (load 0)."""
        ...

    @property
    def held(self) -> Mapping[int, Placement]:
        """Paused trials whose process waits in place, and where: memory held, no compute.

        An allocator counts their memory there and should give a promoted held trial its
        own placement back (then it goes on in the same process; elsewhere it restarts).
        """
        ...


class SchedulingView(LedgerView, Protocol):
    """What an allocator may read. The engine implements it; tests may build their own."""

    time: float
    max_budget: float
    #: the cap a person set on concurrent trials (None: no cap)
    max_concurrent: int | None

    @property
    def pending(self) -> Sequence[TrialSpec]: ...

    def trial(self, trial_id: int) -> TrialRecord: ...

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

    def on_measured(self, trial_id: int) -> bool:
        """A running trial's time per budget unit was measured for the first time.

        True asks the engine for a scheduling pass now (an allocator that placed the
        trial on a guess re-plans from the measurement); the default waits for the
        next change of placements.
        """
        return False

    def max_share(self, view: SchedulingView, gpu_id: int) -> float:
        """The most share a GPU may hold in total (the engine validates against it)."""
        return 1.0
