"""What mattered in a run: the data of the analysis views, from a table of trials.

The views answer what a person asks of a tuning run: is it getting better
(:func:`history`), which hyperparameters matter (:func:`importance`), and where
the good region is (:func:`parallel_coordinates`, :func:`slices`). Their input
``snap`` is anything with ``metric``, ``mode``, ``rows`` (one mapping per trial
in trial-id order: ``trial_id``, ``last``, ``budget``, ``start``, ``config``)
and ``curves`` (trial id -> an object whose ``time`` lists when each report came):
the dashboard's immutable :class:`~nbtune.ui.snapshot.Snapshot`, so the notebook
views show the same truth as its table, or a :class:`TrialTable` built from a
store's or a kernel's columns (:func:`trial_table`), which the JupyterLab panel
reads through the server extension. Pure: the same trials give the same views.

Under successive halving most trials stop at the first rung, so a value is
only comparable with values reached at the same budget. Every view shows
each trial's *last* value with the budget it was reached at, and takes a
``budget``: only trials that reached at least that budget are shown.
:func:`default_budget` picks the one a person would start from, the highest
budget enough trials reached.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from nbtune.core.space import Domain

__all__ = ["TrialTable", "ReportTimes", "trial_table", "Ended", "History", "ended_trials", "budgets", "default_budget", "history",
           "parallel_coordinates", "importance", "slices", "MIN_TRIALS"]

#: trials a budget needs before :func:`default_budget` picks it (and importance is computed)
MIN_TRIALS = 5


class ReportTimes(NamedTuple):
    """When a trial's reports came (seconds since the experiment began), in order."""

    time: tuple[float, ...]


@dataclass(frozen=True)
class TrialTable:
    """The input of the views when no dashboard snapshot is at hand (see the module doc)."""

    metric: str
    mode: str
    rows: tuple[Mapping[str, Any], ...]
    curves: Mapping[int, ReportTimes]


def trial_table(metric: str, mode: str, rows: Any, report_times: Any = ()) -> TrialTable:
    """A :class:`TrialTable` from plain columns.

    ``rows``: one mapping per trial with ``trial_id``, ``last`` (its last value),
    ``budget`` (the budget it reached), ``start`` and ``config``; sorted here by trial id.
    ``report_times``: ``(trial_id, time)`` pairs, one per report, in report order.
    """
    times: dict[int, list[float]] = {}
    for tid, t in report_times:
        if isinstance(t, int | float) and math.isfinite(t):
            times.setdefault(int(tid), []).append(float(t))
    frozen = tuple(MappingProxyType(dict(r)) for r in sorted(rows, key=lambda r: r["trial_id"]))
    return TrialTable(metric, mode, frozen,
                      MappingProxyType({k: ReportTimes(tuple(v)) for k, v in times.items()}))


@dataclass(frozen=True)
class Ended:
    """One trial as the analysis views show it: its last value and the budget it had."""

    trial_id: int
    value: float
    budget: float
    reported: float  # when it reported that value (seconds since the experiment began)
    config: Mapping[str, Any]


@dataclass(frozen=True)
class History:
    """Each shown trial's value in ``x`` order, and the best so far after each of them."""

    x: tuple[float, ...]
    value: tuple[float, ...]
    budget: tuple[float, ...]
    trial_id: tuple[int, ...]
    best: tuple[float, ...]


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


#: the last snapshot's trials with a value (a weak reference to it, its rows, the list): one
#: render of the views asks for them several times (budgets, default budget, each view)
_LAST_ENDED: tuple[Any, Any, list[Ended]] | None = None


def ended_trials(snap: Any, budget: float | None = None) -> list[Ended]:
    """The trials of snapshot ``snap`` with a value, in trial-id order; only those at
    ``>= budget`` if given. A new list each call; the trials are read from ``snap`` once
    (the views read the same immutable snapshot several times per render)."""
    global _LAST_ENDED
    last = _LAST_ENDED
    if last is not None and last[0]() is snap and last[1] is snap.rows:
        every = last[2]
    else:
        every = _read_ended(snap)
        with contextlib.suppress(TypeError):  # no weak reference to it: read it every time
            _LAST_ENDED = (weakref.ref(snap), snap.rows, every)
    if budget is None:
        return list(every)
    return [e for e in every if e.budget >= budget - 1e-9]


def _read_ended(snap: Any) -> list[Ended]:
    out = []
    for r in snap.rows:
        if not _finite(r.get("last")):
            continue
        b = float(r.get("budget") or 0.0)
        curve = snap.curves.get(r["trial_id"])
        when = curve.time[-1] if curve is not None and len(curve.time) else r.get("start")
        out.append(Ended(int(r["trial_id"]), float(r["last"]), b, float(when or 0.0),
                         r.get("config", {})))
    return out


def budgets(snap: Any) -> list[float]:
    """The budgets trials reached, lowest first."""
    return sorted({e.budget for e in ended_trials(snap)})


def default_budget(snap: Any, min_trials: int = MIN_TRIALS) -> float | None:
    """The highest budget at least ``min_trials`` trials reached (the lowest budget when
    none has that many), or None when no trial has a value."""
    ended = ended_trials(snap)
    if not ended:
        return None
    for b in reversed(budgets(snap)):
        if sum(1 for e in ended if e.budget >= b - 1e-9) >= min_trials:
            return b
    return min(e.budget for e in ended)


def history(snap: Any, *, budget: float | None = None, by: str = "time") -> History:
    """Optimization history: each shown trial's value against when it was reported
    (``by="time"``) or against its trial number (``by="trial"``), with the best so far."""
    if by not in ("time", "trial"):
        raise ValueError(f"by must be 'time' or 'trial', got {by!r}")
    ended = ended_trials(snap, budget)
    if by == "time":
        ended.sort(key=lambda e: (e.reported, e.trial_id))
        xs = [e.reported for e in ended]
    else:
        xs = [float(e.trial_id) for e in ended]
    better = min if snap.mode == "min" else max
    best: list[float] = []
    for e in ended:
        best.append(e.value if not best else better(best[-1], e.value))
    return History(tuple(float(x) for x in xs), tuple(e.value for e in ended),
                   tuple(e.budget for e in ended), tuple(e.trial_id for e in ended),
                   tuple(best))


def _unit(domain: Any, value: Any) -> float | None:
    """Where ``value`` lies in its domain, 0..1 (log scale for log domains), or None."""
    if isinstance(domain, Domain):
        try:
            return float(domain.to_unit(value))
        except (ValueError, TypeError, KeyError):
            return None
    return None


def parallel_coordinates(snap: Any, space: Mapping[str, Any], *,
                         budget: float | None = None) -> dict[str, list[Any]]:
    """One line per shown trial over every searched hyperparameter and the metric.

    Columns: ``trial_id``, ``budget``, the metric's value, and for each
    hyperparameter its value and ``<name>/unit``, its position on the axis (0..1,
    as the search space scales it); the metric's axis is scaled to the shown range.
    """
    ended, metric = ended_trials(snap, budget), snap.metric
    names = [k for k, d in space.items() if isinstance(d, Domain)]
    out: dict[str, list[Any]] = {"trial_id": [e.trial_id for e in ended],
                                 "budget": [e.budget for e in ended],
                                 metric: [e.value for e in ended]}
    for k in names:
        out[k] = [e.config.get(k) for e in ended]
        out[f"{k}/unit"] = [_unit(space[k], e.config.get(k)) for e in ended]
    lo, hi = (min(out[metric]), max(out[metric])) if ended else (0.0, 1.0)
    out[f"{metric}/unit"] = [0.5 if hi == lo else (v - lo) / (hi - lo) for v in out[metric]]
    return out


def slices(snap: Any, space: Mapping[str, Any], *,
           budget: float | None = None) -> dict[str, dict[str, list[Any]]]:
    """Per hyperparameter: each shown trial's value of it against its metric value."""
    ended = ended_trials(snap, budget)
    return {k: {"x": [e.config.get(k) for e in ended], "value": [e.value for e in ended],
                "budget": [e.budget for e in ended], "trial_id": [e.trial_id for e in ended]}
            for k, d in space.items() if isinstance(d, Domain)}


def importance(snap: Any, space: Mapping[str, Any], *,
               budget: float | None = None, seed: int = 0) -> dict[str, float] | None:
    """How much of the metric's variance each hyperparameter explains, summing to 1.

    A random forest (scikit-learn, ``seed`` fixed, so the same results give the
    same bars) fitted on the shown trials, each hyperparameter at its position in
    its domain (:func:`parallel_coordinates`' axes); its mean decrease in impurity
    per hyperparameter. It is the estimate Optuna's fANOVA evaluator also builds
    on a forest, without the pairwise terms. None with fewer than
    :data:`MIN_TRIALS` trials, or when every shown value is the same.
    """
    names = [k for k, d in space.items() if isinstance(d, Domain)]
    ended = ended_trials(snap, budget)
    x = [[_unit(space[k], e.config.get(k)) for k in names] for e in ended]
    keep = [i for i, r in enumerate(x) if all(v is not None for v in r)]
    if not names or len(keep) < MIN_TRIALS:
        return None
    y = [ended[i].value for i in keep]
    if max(y) == min(y):
        return None
    from sklearn.ensemble import RandomForestRegressor  # scikit-learn: on first use

    forest = RandomForestRegressor(n_estimators=64, random_state=seed, min_samples_leaf=1)
    forest.fit([x[i] for i in keep], y)
    weights = [float(w) for w in forest.feature_importances_]
    total = sum(weights)
    return {k: (w / total if total > 0 else 1.0 / len(names)) for k, w in zip(names, weights,
                                                                              strict=True)}
