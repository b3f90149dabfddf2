"""The pure core: search spaces, trials, TrialGroups, events, commands and the clock protocol.

Nothing here does I/O, reads a clock, or imports Dask or a UI toolkit.
"""

from __future__ import annotations

from nbtune.core.clock import Clock, ManualClock
from nbtune.core.commands import Command, Finish, Launch, Pause, Resize, Stop
from nbtune.core.events import (
    ConcurrencyChanged,
    Event,
    ExperimentPauseRequested,
    ExperimentResumeRequested,
    ExperimentStarted,
    ExperimentStopRequested,
    ResourcesChanged,
    SnapshotRequested,
    TrialFailed,
    TrialReported,
    TrialReturned,
    TrialSampled,
    TrialStarted,
    TrialStopRequested,
    UtilizationSampled,
)
from nbtune.core.group import TrialGroup
from nbtune.core.resources import GPU, ClusterSpec, Demand, Placement, placement_gpus, width
from nbtune.core.space import (
    Choice,
    Domain,
    Grid,
    LogUniform,
    QLogUniform,
    QUniform,
    RandInt,
    SearchSpaceError,
    Uniform,
    choice,
    grid,
    loguniform,
    qloguniform,
    quniform,
    randint,
    sample_config,
    uniform,
    validate_space,
)
from nbtune.core.trial import Decision, InvalidTransition, TrialRecord, TrialSpec, TrialState

__all__ = [
    "Clock", "ManualClock",
    "Command", "Finish", "Launch", "Pause", "Resize", "Stop",
    "ConcurrencyChanged", "Event", "ExperimentPauseRequested", "ExperimentResumeRequested",
    "ExperimentStarted", "ExperimentStopRequested", "ResourcesChanged", "SnapshotRequested",
    "TrialFailed",
    "TrialReported", "TrialReturned", "TrialSampled", "TrialStarted", "TrialStopRequested", "UtilizationSampled",
    "TrialGroup",
    "GPU", "ClusterSpec", "Demand", "Placement", "placement_gpus", "width",
    "Choice", "Domain", "Grid", "LogUniform", "QLogUniform", "QUniform", "RandInt",
    "SearchSpaceError", "Uniform", "choice", "grid", "loguniform", "qloguniform", "quniform",
    "randint", "sample_config", "uniform", "validate_space",
    "Decision", "InvalidTransition", "TrialRecord", "TrialSpec", "TrialState",
]
