"""The JupyterLab panel's analysis views of one experiment, as JSON, cached per change.

``GET <base_url>/nbtune/api/experiments/<name>/analysis?budget=<b>`` answers with
what :mod:`nbtune.core.trial_analysis` computes (the notebook report's views:
history by time and by trial number, parallel coordinates, slices, the forest's
importance), at a budget, and every trial as the panel's grid shows it (id,
state, metric, last value, budget reached, its configuration).

The input is built from what the server reads, through public functions only:
a store's :meth:`~nbtune.store.Store.results`, :meth:`~nbtune.store.Store.learning_curves`
and recorded search space, or the trials a running kernel writes to its file.
:class:`ViewsCache` keeps the answers by a fingerprint of that input, so a
panel polling every few seconds refits the forest only when a trial changed.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from nbtune.core import trial_analysis as ta
from nbtune.core.listing import json_number
from nbtune.core.space import Choice, Domain, LogUniform, QLogUniform
from nbtune.store import Store
from nbtune.store.serialize import load_space

__all__ = ["ViewsCache", "ViewsInput", "store_input", "kernel_input", "views_reply",
           "axis_ticks", "CACHED"]

#: answers kept (one per experiment, budget and change)
CACHED = 64


class ViewsInput:
    """What the views are computed from: the trials table, the space, the grid's rows."""

    def __init__(self, table: ta.TrialTable, space: Mapping[str, Any],
                 trials: list[dict[str, Any]]) -> None:
        self.table = table
        self.space = dict(space)
        self.trials = trials

    def fingerprint(self) -> str:
        """Changes whenever anything the views show changes (a report, a state, a budget)."""
        data = [self.table.metric, self.table.mode, self.trials,
                sorted((k, list(v.time)) for k, v in self.table.curves.items()),
                sorted(self.space)]
        return hashlib.sha1(json.dumps(data, default=str, sort_keys=True).encode()).hexdigest()


def _jsonable(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int | float):
        return json_number(v) if isinstance(v, float) else int(v)
    try:  # numpy scalars
        return _jsonable(v.item())
    except AttributeError:
        return str(v)


def _grid_row(trial_id: int, state: str, value: Any, last: Any, budget: Any,
              config: Mapping[str, Any]) -> dict[str, Any]:
    return {"trial_id": int(trial_id), "state": str(state), "value": json_number(value),
            "last": json_number(last), "budget": json_number(budget),
            "config": {str(k): _jsonable(v) for k, v in config.items()}}


def store_input(store: Store, name: str) -> ViewsInput:
    """The views' input from a store (raises KeyError when ``name`` is not in it)."""
    row = store.experiment(name)
    metric, mode = str(row.metric), str(row.mode)
    space = {k: d for k, d in load_space(row.space).items() if isinstance(d, Domain)}
    res = store.results(name)
    configs = [c for c in res.columns if str(c).startswith("config/")]
    rows, trials = [], []
    for r in res.to_dict("records"):
        config = {c[len("config/"):]: r[c] for c in configs}
        rows.append({"trial_id": int(r["trial_id"]), "last": json_number(r["last"]),
                     "budget": json_number(r["budget_used"]) or 0.0,
                     "start": json_number(r["start"]), "config": config})
        trials.append(_grid_row(r["trial_id"], r["state"], r[metric], r["last"],
                                r["budget_used"], config))
    lc = store.learning_curves(name)
    times = [] if lc.empty else zip(lc["trial_id"], lc["time"], strict=True)
    return ViewsInput(ta.trial_table(metric, mode, rows, times), space, trials)


def kernel_input(detail: Mapping[str, Any]) -> ViewsInput:
    """The views' input from a running kernel's file (an experiment kept in memory only).

    The kernel writes each trial's configuration and last value but not its search
    space: the axes of the hyperparameters are then their shown range.
    """
    s = detail["summary"]
    rows, trials = [], []
    for t in detail.get("trials", []):
        config = t.get("config") or {}
        last = t.get("last", t.get("value"))
        rows.append({"trial_id": int(t["trial_id"]), "last": last,
                     "budget": t.get("budget") or 0.0, "start": None, "config": config})
        trials.append(_grid_row(t["trial_id"], t["state"], t.get("value"), last,
                                t.get("budget"), config))
    return ViewsInput(ta.trial_table(str(s["metric"]), str(s["mode"]), rows), {}, trials)


def _nice_step(span: float, count: int) -> float:
    raw = span / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def axis_ticks(domain: Any) -> list[list[Any]]:
    """``[position 0..1, label]`` ticks of a hyperparameter's axis, as its domain scales it:
    every option of a choice, the decades of a log range, round numbers of a linear one."""
    if isinstance(domain, Choice):
        return [[domain.to_unit(o), str(o)] for o in domain.options]
    low, high = float(getattr(domain, "low", 0.0)), float(getattr(domain, "high", 1.0))
    if isinstance(domain, LogUniform | QLogUniform):
        values = [10.0 ** e for e in range(math.floor(math.log10(low)),
                                           math.ceil(math.log10(high)) + 1)]
        values = [v for v in values if low * (1 - 1e-9) <= v <= high * (1 + 1e-9)] or [low, high]
    else:
        step = _nice_step(high - low, 4)
        first = math.ceil(low / step - 1e-9) * step
        values = [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]
    out = []
    for v in values:
        try:
            out.append([domain.to_unit(v), f"{v:g}"])
        except (ValueError, TypeError):
            continue
    return out


def _history(h: ta.History) -> dict[str, list[Any]]:
    return {"x": list(h.x), "value": list(h.value), "budget": list(h.budget),
            "trial_id": list(h.trial_id), "best": list(h.best)}


def views_reply(inp: ViewsInput, budget: float | None) -> dict[str, Any]:
    """Every view at ``budget``: only the trials that reached it; every trial at 0; the
    default budget when None or a budget no trial reached."""
    table, space = inp.table, inp.space
    budgets = ta.budgets(table)
    default = ta.default_budget(table)
    if budget is not None and budget <= 0:
        budget = 0.0  # every trial with a value, whatever its budget
    elif budget is None or not any(abs(b - budget) <= 1e-9 for b in budgets):
        budget = default
    params = list(space) or sorted({k for t in inp.trials for k in t["config"]})
    if space:
        pc = ta.parallel_coordinates(table, space, budget=budget)
        sl = ta.slices(table, space, budget=budget)
        imp = ta.importance(table, space, budget=budget)
    else:
        shown = ta.ended_trials(table, budget)
        pc = {"trial_id": [e.trial_id for e in shown], "budget": [e.budget for e in shown],
              table.metric: [e.value for e in shown]}
        for k in params:
            pc[k] = [_jsonable(e.config.get(k)) for e in shown]
        sl = {k: {"x": pc[k], "value": pc[table.metric], "budget": pc["budget"],
                  "trial_id": pc["trial_id"]} for k in params}
        imp = None
    return {
        "metric": table.metric, "mode": table.mode, "params": params,
        "budgets": budgets, "default_budget": default, "budget": budget,
        "min_trials": ta.MIN_TRIALS,
        "trials": inp.trials,
        "history": {"time": _history(ta.history(table, budget=budget, by="time")),
                    "trial": _history(ta.history(table, budget=budget, by="trial"))},
        "parallel": {k: [_jsonable(v) for v in vs] for k, vs in pc.items()},
        "axes": {k: {"ticks": axis_ticks(d), "categorical": bool(d.is_categorical),
                     "log": isinstance(d, LogUniform | QLogUniform)}
                 for k, d in space.items()},
        "slices": {k: {c: [_jsonable(v) for v in vs] for c, vs in s.items()}
                   for k, s in sl.items()},
        "importance": imp,
    }


class ViewsCache:
    """The last :data:`CACHED` answers, by experiment, budget and input fingerprint.

    Shared by every poll of every open panel (each browser tab polls on its own),
    so it locks; the forest is fitted outside the lock, at most once per change
    and budget unless two polls race on the same change.
    """

    def __init__(self, size: int = CACHED) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._answers: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
        self.computed = 0  # answers computed (not taken from the cache)

    def reply(self, key: Sequence[Any], inp: ViewsInput, budget: float | None) -> dict[str, Any]:
        full = (*key, None if budget is None else float(budget), inp.fingerprint())
        with self._lock:
            found = self._answers.get(full)
            if found is not None:
                self._answers.move_to_end(full)
                return found
        answer = views_reply(inp, budget)
        with self._lock:
            self.computed += 1
            self._answers[full] = answer
            while len(self._answers) > self._size:
                self._answers.popitem(last=False)
        return answer
