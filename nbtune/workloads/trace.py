"""Trace replay: trials whose step times and metrics were recorded from real runs.

Two CSV shapes are read:

* a *summary* per trial (total time, number of budget units, final metrics),
  such as the Hydro artifact's ``ray_trials.csv``; metrics between 0 and the
  final budget follow a power-law shape pinned to the recorded final value;
* *steps*, one row per trial and budget unit (time of that step and its
  metrics), as nbtune's own store exports them; replayed exactly.

The search space of a trace is the list of its trials (``{"trace_id":
grid([...])}``): an algorithm picks recorded trials instead of sampling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbtune.core.resources import Demand
from nbtune.core.space import grid
from nbtune.workloads.base import OverheadModel, WorkloadModel

__all__ = ["TraceTrial", "TraceWorkload"]


@dataclass
class TraceTrial:
    key: str
    config: dict[str, Any]
    unit_time: float
    budget: float
    #: budget -> metrics (every unit for step traces; only the last for summaries)
    points: dict[float, dict[str, float]] = field(default_factory=dict)


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
        return {"trace_id": grid(self.order)}

    def _trial(self, config: Mapping[str, Any]) -> TraceTrial:
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
