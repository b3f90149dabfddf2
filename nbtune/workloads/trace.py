"""Trace replay: trials whose step times and metrics were recorded from real runs.

Two CSV shapes are read:

* a *summary* per trial (total time, number of budget units, final metrics),
  such as the Hydro artifact's ``ray_trials.csv``; metrics between 0 and the
  final budget follow a power-law shape pinned to the recorded final value;
* *steps*, one row per trial and budget unit (time of that step and its
  metrics), as nbtune's own store exports them; replayed exactly;
* a finished :class:`~nbtune.Experiment` (:meth:`TraceWorkload.from_experiment`),
  to ask the simulator what it predicts for a run that really happened.

The search space of a trace is the list of its trials (``{"trace_id":
grid([...])}``): an algorithm picks recorded trials instead of sampling.
A trace made from an experiment keeps that experiment's own space instead,
and finds a trial by its config: the same algorithm with the same seed
samples the same configs in the same order, so the simulated trial ``k`` is
the real trial ``k`` (a config that was never recorded is a clear error).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbtune.core.handles import ExperimentView
from nbtune.core.resources import Demand
from nbtune.core.space import grid
from nbtune.core.tolerance import EPS
from nbtune.workloads.workload_protocol import OverheadModel, WorkloadModel

__all__ = ["TraceTrial", "TraceWorkload"]


@dataclass
class TraceTrial:
    key: str
    config: dict[str, Any]
    unit_time: float
    budget: float
    #: budget -> metrics (every unit for step traces; only the last for summaries)
    points: dict[float, dict[str, float]] = field(default_factory=dict)
    #: start budget -> measured seconds that launch took before its first unit (replays)
    launches: dict[float, float] = field(default_factory=dict)


class TraceWorkload(WorkloadModel):
    """Replays recorded trials. ``start_values`` give each metric's value at budget 0."""

    def __init__(
        self,
        trials: Sequence[TraceTrial],
        *,
        metric: str,
        launch_overhead: float = 0.0,
        alpha: float = 1.0,
        beta: float = 1.0,
        demand: Demand = Demand(),
        start_values: Mapping[str, float] | None = None,
        kappa: float = 1.0,
        space: Mapping[str, Any] | None = None,
    ) -> None:
        if not trials:
            raise ValueError("a trace needs at least one trial")
        self.trials = {t.key: t for t in trials}
        if len(self.trials) != len(trials):
            raise ValueError("trace trial keys must be unique")
        self.order = [t.key for t in trials]
        self.metric = metric
        self._launch = float(launch_overhead)
        self._overhead = OverheadModel(alpha, beta)
        self._demand = demand
        self._start = dict(start_values or {})
        self._kappa = kappa
        self._space = None if space is None else dict(space)
        self._by_config = {config_key(t.config): t for t in trials} if space is not None else {}

    # -------------------------------------------------------------- readers
    @classmethod
    def from_summary_csv(
        cls,
        path: str | Path,
        *,
        id_column: str,
        time_column: str,
        budget: float | str,
        config_columns: Sequence[str],
        metric_columns: Sequence[str],
        metric: str,
        **kwargs: Any,
    ) -> TraceWorkload:
        df = pd.read_csv(path)
        missing = [c for c in [id_column, time_column, *config_columns, *metric_columns]
                   if c not in df.columns]
        if isinstance(budget, str) and budget not in df.columns:
            missing.append(budget)
        if missing:
            raise ValueError(f"{path}: missing columns {missing}; it has {list(df.columns)}")
        trials = []
        for row in df.to_dict("records"):
            b = float(row[budget]) if isinstance(budget, str) else float(budget)
            trials.append(TraceTrial(
                key=str(row[id_column]),
                config={c: row[c] for c in config_columns},
                unit_time=float(row[time_column]) / b,
                budget=b,
                points={b: {m: float(row[m]) for m in metric_columns}},
            ))
        return cls(trials, metric=metric, **kwargs)

    @classmethod
    def from_steps(
        cls,
        data: str | Path | pd.DataFrame,
        *,
        id_column: str = "trial_id",
        budget_column: str = "budget",
        time_column: str = "step_time",
        config_columns: Sequence[str] = (),
        metric_columns: Sequence[str],
        metric: str,
        **kwargs: Any,
    ) -> TraceWorkload:
        df = data if isinstance(data, pd.DataFrame) else pd.read_csv(data)
        trials = []
        for key, g in df.sort_values([id_column, budget_column]).groupby(id_column, sort=False):
            first = g.iloc[0]
            b = float(g[budget_column].max())
            trials.append(TraceTrial(
                key=str(key),
                config={c: first[c] for c in config_columns},
                unit_time=float(g[time_column].sum()) / b,
                budget=b,
                points={float(r[budget_column]): {m: float(r[m]) for m in metric_columns}
                        for r in g.to_dict("records")},
            ))
        return cls(trials, metric=metric, **kwargs)

    @classmethod
    def from_experiment(cls, exp: ExperimentView, **kwargs: Any) -> TraceWorkload:
        """The trace of a finished experiment: each trial's measured step time and metrics.

        A trial's unit time is the median gap between two reports inside one
        segment (one launch), so the launch cost is not counted per unit; what
        each segment's first report took beyond that is that launch's own
        cost (:meth:`launch_time`: the cold first launches of a run cost far
        more than warm ones), and ``launch_overhead`` their median. The trace keeps the experiment's search
        space: run it with the same algorithm and seed and each simulated
        trial replays the real trial with the same config.
        """
        return _from_experiment(cls, exp, **kwargs)

    @classmethod
    def hydro_ray_trials(cls, path: str | Path, **kwargs: Any) -> TraceWorkload:
        """The Hydro artifact's ``ray_trials.csv`` (50 ResNet-18 trials, 50 epochs each)."""
        kwargs.setdefault("start_values", {"final_val_acc": 0.1, "final_loss": 2.3})
        return cls.from_summary_csv(
            path, id_column="trial_id", time_column="time_total_s", budget="epochs",
            config_columns=["batch_size", "lr", "momentum", "gamma"],
            metric_columns=["final_val_acc", "final_loss"],
            metric=kwargs.pop("metric", "final_val_acc"), **kwargs,
        )

    # ------------------------------------------------------------ the model
    @property
    def space(self) -> dict[str, Any]:
        if self._space is not None:
            return dict(self._space)
        return {"trace_id": grid(self.order)}

    def _trial(self, config: Mapping[str, Any]) -> TraceTrial:
        if self._space is not None:
            found = self._by_config.get(config_key(config))
            if found is None:
                raise KeyError(
                    f"config {dict(config)} was not run in the recorded experiment; replay it "
                    "with the same algorithm, space and seed as the real run"
                )
            return found
        try:
            return self.trials[str(config["trace_id"])]
        except KeyError:
            raise KeyError(
                f"config {dict(config)} names no recorded trial; search over workload.space"
            ) from None

    def config_of(self, trace_id: str) -> dict[str, Any]:
        return dict(self.trials[trace_id].config)

    def unit_time(self, trial_id: int, config: Mapping[str, Any]) -> float:
        return self._trial(config).unit_time

    def overhead(self, config: Mapping[str, Any]) -> OverheadModel:
        return self._overhead

    def launch_time(self, trial_id: int, config: Mapping[str, Any],
                    start_budget: float) -> float | None:
        """The recorded launch's cost, when this trial was launched at ``start_budget``."""
        launches = self._trial(config).launches
        for b, t in launches.items():
            if abs(b - start_budget) < EPS:
                return t
        return None

    def demand(self, trial_id: int, config: Mapping[str, Any]) -> Demand:
        return self._demand

    @property
    def launch_overhead(self) -> float:
        return self._launch

    def metrics(self, trial_id: int, config: Mapping[str, Any], budget: float) -> dict[str, float]:
        tr = self._trial(config)
        if budget in tr.points:
            return dict(tr.points[budget])
        known = sorted(tr.points)
        out: dict[str, float] = {}
        for m in tr.points[known[-1]]:
            xs = [b for b in known if m in tr.points[b]]
            if len(xs) > 1:  # step trace: interpolate between recorded budgets
                out[m] = float(np.interp(budget, xs, [tr.points[b][m] for b in xs]))
                continue
            final, b_end = tr.points[xs[-1]][m], xs[-1]
            v0 = self._start.get(m, final)
            k, tau = self._kappa, max(b_end / 10.0, 1.0)
            shape_end = (1 + b_end / tau) ** -k
            frac = ((1 + budget / tau) ** -k - shape_end) / (1 - shape_end)
            out[m] = float(final + (v0 - final) * max(frac, 0.0))
        return out


def config_key(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A hashable, exact key of a config (``repr`` of a float round-trips exactly)."""
    return tuple(sorted((str(k), repr(v)) for k, v in config.items()))


def segment_times(curves: pd.DataFrame, allocations: pd.DataFrame) -> pd.DataFrame:
    """Split recorded reports into segments and time each step.

    A segment is one launch of a trial: its reports fall between the start
    of one of the trial's allocation intervals and the next launch. Returns
    one row per report: trial_id, budget, time, ``segment_start``, ``first``
    (the segment's first report, whose gap includes the launch) and ``gap``
    (seconds since the segment started or since the previous report).
    """
    rows = []
    starts = {int(t): sorted(set(g["start"].astype(float)))
              for t, g in allocations.groupby("trial_id")}
    for tid, g in curves.sort_values(["trial_id", "time"]).groupby("trial_id"):
        st = starts.get(int(tid), [0.0])
        prev_seg, prev_t = None, None
        for r in g.to_dict("records"):
            t = float(r["time"])
            # a report at a segment's start time ended the previous one (same handle call)
            seg = max((s for s in st if s < t - EPS), default=st[0])
            first = seg != prev_seg
            gap = t - seg if first else t - float(prev_t)  # type: ignore[arg-type]
            rows.append({"trial_id": int(tid), "budget": float(r["budget"]), "time": t,
                         "segment_start": seg, "first": first, "gap": max(gap, 0.0)})
            prev_seg, prev_t = seg, t
    return pd.DataFrame(rows, columns=["trial_id", "budget", "time", "segment_start", "first",
                                       "gap"])


def _from_experiment(cls: type[TraceWorkload], exp: ExperimentView, **kwargs: Any) -> TraceWorkload:
    curves, allocs = exp.learning_curves(), exp.allocations()
    if curves.empty:
        raise ValueError(f"experiment {exp.name!r} has no reports to replay")
    seg = segment_times(curves, allocs)
    # per trial: seconds per unit from steps inside a segment (no launch in them)
    inner = seg[~seg["first"]].groupby("trial_id")["gap"].median().to_dict()
    typical = float(np.median(list(inner.values()))) if inner else 0.0
    firsts = seg[seg["first"]]
    metric_cols = [c for c in curves.columns if c not in ("trial_id", "time", "budget")]
    trials = []
    launch_all = []
    for tid, g in curves.sort_values(["trial_id", "budget"]).groupby("trial_id"):
        tid = int(tid)
        mine = firsts[firsts["trial_id"] == tid]
        # a trial never measured between two reports: split its first gap at the typical unit
        unit = float(inner.get(tid, min(typical, float(mine["gap"].min()))))
        unit = max(unit, 1e-3)
        launches: dict[float, float] = {}
        rows = g.to_dict("records")
        for r in mine.to_dict("records"):
            before = [float(x["budget"]) for x in rows if float(x["time"]) <= r["segment_start"]]
            start = max(before, default=0.0)
            steps = max(float(r["budget"]) - start, EPS)
            cost = max(float(r["gap"]) - unit * steps, 0.0)
            launches.setdefault(start, cost)
            launch_all.append(cost)
        config = dict(exp.engine.trials[tid].config)
        pts = {float(r["budget"]): {m: float(r[m]) for m in metric_cols
                                    if r[m] is not None and not _nan(r[m])}
               for r in rows}
        trials.append(TraceTrial(str(tid), config, unit, float(g["budget"].max()), pts,
                                 launches))
    kwargs.setdefault("launch_overhead", float(np.median(launch_all)) if launch_all else 0.0)
    kwargs.setdefault("space", exp.engine.algorithm.space)
    return cls(trials, metric=exp.metric, **kwargs)


def _nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)
