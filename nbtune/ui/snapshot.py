"""Immutable snapshots of a dashboard: everything an experiment shows, at one instant.

:class:`Snapshots` pulls a :class:`~nbtune.ui.dashboard_model.DashboardModel` and
folds its deltas (:class:`SnapshotFold`) into whole state; each
:meth:`Snapshots.take` returns a :class:`Snapshot` that shares nothing
mutable with the model (tuples and read-only mappings). A view renders a
snapshot *whole*, so a view that missed earlier messages (a browser view
created while updates flowed, a page reloaded, a second tab) converges at
the next update instead of drifting; the HTML report renders the same
snapshot. ``versions`` count the changes of each part, so a renderer can skip
resending a part that did not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from nbtune.ui.dashboard_model import DashboardModel, Delta, Points, Progress, Rect, Segment

__all__ = ["Snapshot", "SnapshotFold", "Snapshots"]


@dataclass(frozen=True)
class Snapshot:
    """An experiment as the dashboard shows it; ``rows`` in trial-id order."""

    time: float
    done: bool
    paused: bool
    metric: str
    mode: str
    lanes: tuple[int, ...]
    rows: tuple[Mapping[str, Any], ...]
    curves: Mapping[int, Points]
    alloc_closed: tuple[Rect, ...]
    alloc_open: tuple[Rect, ...]
    util_kind: str
    util_device: str | None
    util_closed: tuple[Segment, ...]
    util_open: tuple[Segment, ...]
    best: int | None
    best_value: float | None
    best_curve: Points | None
    progress: Progress | None
    cost: float | None
    versions: Mapping[str, int]
    planned: tuple[float, float] | None = None

    def row(self, trial_id: int) -> Mapping[str, Any] | None:
        return next((r for r in self.rows if r["trial_id"] == trial_id), None)


def _frozen(p: Points) -> Points:
    return Points(tuple(p.budget), tuple(p.value), tuple(p.time))  # type: ignore[arg-type]


class SnapshotFold:
    """Whole state from successive deltas of one :class:`~nbtune.ui.dashboard_model.DashboardModel`."""

    def __init__(self, metric: str, mode: str) -> None:
        self.metric, self.mode = metric, mode
        self._rows: dict[int, Mapping[str, Any]] = {}
        self._curves: dict[int, Points] = {}
        self._alloc: list[Rect] = []
        self._util: list[Segment] = []
        self._util_kind: str | None = None
        self._best_curve: Points | None = None
        self._versions = {"rows": 0, "curves": 0, "alloc": 0, "util": 0}

    def add(self, d: Delta) -> Snapshot:
        v = self._versions
        if d.rows:
            for tid, r in d.rows.items():
                self._rows[tid] = MappingProxyType({**r, "config": MappingProxyType(r["config"])})
            v["rows"] += 1
        if d.points:
            for tid, p in d.points.items():
                old = self._curves.get(tid, Points((), (), ()))  # type: ignore[arg-type]
                self._curves[tid] = Points(old.budget + tuple(p.budget),  # type: ignore[operator]
                                           old.value + tuple(p.value),  # type: ignore[operator]
                                           old.time + tuple(p.time))  # type: ignore[operator]
            v["curves"] += 1
        if d.alloc_closed:
            self._alloc.extend(d.alloc_closed)
            v["alloc"] += 1
        if d.util_kind != self._util_kind:  # the runtime started measuring: drop estimates
            self._util_kind = d.util_kind
            self._util.clear()
            v["util"] += 1
        if d.util_closed:
            self._util.extend(d.util_closed)
            v["util"] += 1
        if d.best_curve is not None:
            self._best_curve = _frozen(d.best_curve)
        return Snapshot(
            time=d.time, done=d.done, paused=d.paused, metric=self.metric, mode=self.mode,
            lanes=tuple(d.lanes), rows=tuple(self._rows[t] for t in sorted(self._rows)),
            curves=MappingProxyType(dict(self._curves)), alloc_closed=tuple(self._alloc),
            alloc_open=tuple(d.alloc_open), util_kind=d.util_kind, util_device=d.util_device,
            util_closed=tuple(self._util), util_open=tuple(d.util_open), best=d.best,
            best_value=d.best_value, best_curve=self._best_curve, progress=d.progress,
            cost=d.cost, versions=MappingProxyType(dict(v)), planned=d.planned,
        )


class Snapshots:
    """Immutable snapshots of one model: :meth:`take` pulls it and folds the delta in."""

    def __init__(self, model: DashboardModel) -> None:
        self.model = model
        self.fold = SnapshotFold(model.metric, model.mode)

    def take(self) -> Snapshot:
        return self.fold.add(self.model.pull())


def experiment_snapshot(experiment: Any) -> Snapshot:
    """One snapshot of an experiment as it is now (a running one's state handed over on the
    engine's thread): what a report or a one-off view renders."""
    model = DashboardModel(experiment.engine, measured=not experiment.runtime.virtual_clock,
                           runtime=experiment.runtime, cost=lambda: experiment.cost,
                           planned=experiment.planned)
    try:
        model.settle()
        return Snapshots(model).take()
    finally:
        model.close()
