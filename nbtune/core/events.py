"""Events: facts that already happened, named in the past tense.

Runtimes turn what they observe (a trial printed a metric, a worker died, the
cluster grew) into these and feed them to :meth:`nbtune.engine.Engine.handle`.
Every event carries the runtime's timestamp, so the engine never reads a clock.

Events are treated as immutable but are plain slotted dataclasses, not frozen
ones: a frozen dataclass's ``__init__`` costs several times more, and the simulator makes
one event per budget unit of every trial (dask's worker state machine makes
the same trade).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nbtune.core.resources import ClusterSpec

__all__ = [
    "Event",
    "ExperimentStarted",
    "ResourcesChanged",
    "TrialStarted",
    "TrialReported",
    "TrialSampled",
    "TrialFailed",
    "TrialReturned",
    "TrialHeld",
    "TrialRecomputed",
    "TrialStopRequested",
    "ExperimentStopRequested",
    "ExperimentPauseRequested",
    "ExperimentResumeRequested",
    "ConcurrencyChanged",
    "UtilizationSampled",
    "UnitMemoryMeasured",
    "SnapshotRequested",
]


@dataclass(slots=True)
class Event:
    time: float


@dataclass(slots=True)
class ExperimentStarted(Event):
    cluster: ClusterSpec
    #: what the runtime tells the allocators about itself (the Dask runtime's
    #: ``"resize_restarts"``): plain JSON values, in the event and so in the store's log,
    #: so that a replay decides as the run did. A restart's event replaces them.
    hints: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ResourcesChanged(Event):
    """The cluster grew or shrank (elastic resize, a worker died or joined)."""

    cluster: ClusterSpec


@dataclass(slots=True)
class TrialStarted(Event):
    """The runtime has the trial running (after its launch overhead)."""

    trial_id: int


@dataclass(slots=True)
class TrialReported(Event):
    """A trial finished ``budget`` cumulative units of training and measured ``metrics``."""

    trial_id: int
    budget: float
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class TrialHeld(Event):
    """A trial that reached its segment's budget waits in place for the algorithm's verdict.

    Its process lives on, blocked inside ``report`` (holding its memory, using
    no compute), because its training loop keeps no checkpoint; a Launch of
    the same trial on the same placement lets it go on, a Stop ends it.
    """

    trial_id: int


@dataclass(slots=True)
class TrialRecomputed(Event):
    """A relaunched trial re-trained ``budget`` units it had already reported.

    Its loop restarted from the beginning (no checkpoint): the step is work
    done again, not a new result, so the engine counts it and ignores its metrics.
    """

    trial_id: int
    budget: float


@dataclass(slots=True)
class TrialReturned(Event):
    """The trial's training function returned on its own, after reporting, before its budget.

    A loop that trains fewer steps than ``max_budget`` (``for epoch in range(9)``) ends
    as in Ray Tune (TERMINATED) and Optuna (COMPLETE): completed at its last report.
    """

    trial_id: int


@dataclass(slots=True)
class TrialFailed(Event):
    trial_id: int
    error: str = ""
    out_of_memory: bool = False
    worker_lost: bool = False


@dataclass(slots=True)
class TrialStopRequested(Event):
    """A person (dashboard, magic) asked to stop one trial."""

    trial_id: int


@dataclass(slots=True)
class ExperimentStopRequested(Event):
    pass


@dataclass(slots=True)
class ExperimentPauseRequested(Event):
    pass


@dataclass(slots=True)
class ExperimentResumeRequested(Event):
    pass


@dataclass(slots=True)
class ConcurrencyChanged(Event):
    """A person capped how many trials may run at once (``None`` lifts the cap)."""

    max_concurrent: int | None


@dataclass(slots=True)
class UtilizationSampled(Event):
    """Per-GPU utilization in [0, 1] and memory in GB, as a runtime measured them.

    ``gpu_demand``, where a runtime can tell it, is the share of the interval
    the GPU's trials were running *or waiting to run*: on CPU stand-ins (a
    time-sliced core) the most packing can gain is ``1 / demand``, a bound that
    used CPU, which reads low on a loaded machine, cannot give. Empty for
    NVML GPUs (busy time says nothing of free SMs) and the simulator.
    """

    gpu_util: dict[int, float]
    gpu_memory_gb: dict[int, float] = field(default_factory=dict)
    gpu_demand: dict[int, float] = field(default_factory=dict)


@dataclass(slots=True)
class TrialSampled(Event):
    """What one trial alone on its GPU used, as a runtime sampled it (for the profiler).

    The simulator's stand-in for an NVML sample of a GPU holding one trial:
    it goes through the engine (which ignores it) so the store records it and
    a resumed run's profiler measures exactly what the first one did.
    """

    trial_id: int
    util: float
    memory_gb: float = 0.0


@dataclass(slots=True)
class UnitMemoryMeasured(Event):
    """A fused unit's peak memory so far, in bytes, as its process measured it.

    ``tune(..., fusion=True)``: the engine fits a line through the peaks of units of two
    sizes and sizes later units under the worker's memory (:mod:`nbtune.engine.fusion_memory`).
    On a GPU the peak is ``torch.cuda.max_memory_allocated``; on a CPU worker the trial
    process's peak resident set.
    """

    unit: int
    peak_bytes: int


@dataclass(slots=True)
class SnapshotRequested(Event):
    """A view asked for the engine's state (a dashboard attached, or its copy is behind).

    The engine decides nothing on it; the runtime handles it on the engine's thread like
    any event, so the subscribers (the dashboard's model) copy the engine's state there,
    whole, even when no trial event would come for a while (an idle or paused run).
    """
