"""Events: facts that already happened, named in the past tense.

Runtimes turn what they observe (a trial printed a metric, a worker died, the
cluster grew) into these and feed them to :meth:`nbtune.engine.Engine.handle`.
Every event carries the runtime's timestamp, so the engine never reads a clock.
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
    "TrialFailed",
    "TrialStopRequested",
    "ExperimentStopRequested",
    "ExperimentPauseRequested",
    "ExperimentResumeRequested",
    "ConcurrencyChanged",
    "UtilizationSampled",
]


@dataclass(frozen=True)
class Event:
    time: float


@dataclass(frozen=True)
class ExperimentStarted(Event):
    cluster: ClusterSpec


@dataclass(frozen=True)
class ResourcesChanged(Event):
    """The cluster grew or shrank (elastic resize, a worker died or joined)."""

    cluster: ClusterSpec


@dataclass(frozen=True)
class TrialStarted(Event):
    """The runtime has the trial running (after its launch overhead)."""

    trial_id: int


@dataclass(frozen=True)
class TrialReported(Event):
    """A trial finished ``budget`` cumulative units of training and measured ``metrics``."""

    trial_id: int
    budget: float
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialFailed(Event):
    trial_id: int
    error: str = ""
    out_of_memory: bool = False
    worker_lost: bool = False


@dataclass(frozen=True)
class TrialStopRequested(Event):
    """A person (dashboard, magic) asked to stop one trial."""

    trial_id: int


@dataclass(frozen=True)
class ExperimentStopRequested(Event):
    pass


@dataclass(frozen=True)
class ExperimentPauseRequested(Event):
    pass


@dataclass(frozen=True)
class ExperimentResumeRequested(Event):
    pass


@dataclass(frozen=True)
class ConcurrencyChanged(Event):
    """A person capped how many trials may run at once (``None`` lifts the cap)."""

    max_concurrent: int | None


@dataclass(frozen=True)
class UtilizationSampled(Event):
    """Per-GPU utilization in [0, 1] and memory in GB, as a runtime measured them."""

    gpu_util: dict[int, float]
    gpu_memory_gb: dict[int, float] = field(default_factory=dict)
