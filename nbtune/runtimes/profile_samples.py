"""What the runtime's profiler keeps per model signature while a run goes on.

Raw samples (:class:`Obs`) and the mark a trial's next interval is timed from
(:class:`Mark`); :class:`~nbtune.runtimes.profiler.Profiler` fills them and
summarises them into Profiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Obs", "Mark", "SAMPLES", "mean", "add"]


@dataclass
class Obs:
    """Raw measurements of one signature in this run."""

    packing: dict[int, list[float]] = field(default_factory=dict)   # p -> unit times, width 1/p
    scaling: dict[int, list[float]] = field(default_factory=dict)   # w -> unit times, alone
    first: dict[tuple[int, int], list[float]] = field(default_factory=dict)  # (p, w) after a start
    util: list[float] = field(default_factory=list)
    demand: list[float] = field(default_factory=list)  # runnable share; the max is used
    memory: list[float] = field(default_factory=list)
    resize: list[tuple] = field(default_factory=list)  # see fit_resize_cost

    def compute_share(self) -> float:
        """The compute share alone: the mean utilization sampled, kept in [0.01, 1]."""
        return min(max(mean(self.util), 0.01), 1.0)


@dataclass
class Mark:
    """Where a trial's current interval began: time, budget, its (p, w) and GPU generation."""

    time: float
    budget: float
    p: int
    w: int
    gen: int
    first: bool
    resized_at: float | None = None
    #: its shape (not a first interval) already holds SAMPLES unit times: reports only move it
    full: bool = False


#: samples kept per shape (HyperSack's sampler takes ~10 iterations; more only smooths noise)
SAMPLES = 64
#: utilization samples of a model alone before its GPU room counts (4 s at Dask's 1 Hz)
ROOM_SAMPLES = 4


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def add(xs: list[float], x: float) -> None:
    if len(xs) < SAMPLES:
        xs.append(x)
