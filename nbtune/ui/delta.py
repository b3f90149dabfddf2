"""What the dashboard model hands a view: a :class:`Delta` per pull, its curve points and progress.

Plain data, no behaviour: kept apart from :mod:`nbtune.ui.dashboard_model` (which makes
them from the engine) so the snapshot fold and the figures can name them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from nbtune.ui.lanes import Rect, Segment

__all__ = ["Delta", "Points", "Progress"]


class Points(NamedTuple):
    """New learning-curve points of one trial as columns (no object per point)."""

    budget: list[float]
    value: list[float]
    time: list[float]


@dataclass(frozen=True)
class Progress:
    """Trials settled (paused at a rung or finished) out of ``total`` (None: unknown).

    ``errors`` counts the trials that ended in an error; ``failed`` says the
    experiment ended with every trial in error (``Experiment.failed``).
    """

    settled: int
    total: int | None
    fraction: float | None
    elapsed: float
    eta: float | None
    errors: int = 0
    failed: bool = False
    #: ``ended/total`` as ``nbtune ls`` and the sidebar count (:func:`ended_of_total`)
    ended: str = ""


@dataclass
class Delta:
    """Everything that changed since the previous :meth:`DashboardModel.pull`.

    ``alloc_open`` and ``util_open`` are complete (they change every instant);
    every other list holds only what is new. ``rows`` maps a trial id to its
    full current table row; ``best_changed`` says the best trial moved.
    """

    time: float
    done: bool
    paused: bool
    metric: str
    lanes: list[int]
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    points: dict[int, Points] = field(default_factory=dict)
    alloc_closed: list[Rect] = field(default_factory=list)
    alloc_open: list[Rect] = field(default_factory=list)
    util_kind: str = "allocated"
    #: "CPU": the lanes are CPU workers (their trials' CPU share); None: no cluster yet
    util_device: str | None = None
    util_closed: list[Segment] = field(default_factory=list)
    util_open: list[Segment] = field(default_factory=list)
    best: int | None = None
    best_value: float | None = None
    best_changed: bool = False
    best_curve: Points | None = None  # the best trial's whole curve, when it or its curve changed
    progress: Progress | None = None
    #: the metered bill so far, when the run follows a RubberBand plan (``Experiment.cost``)
    cost: float | None = None
    #: that plan's predicted ``(JCT seconds, cost)``, shown beside the measured ones
    planned: tuple[float, float] | None = None
