"""What every list of experiments shows of one: a summary row, trial rows and learning curves.

Two readers make these from different sources: the server extension from a
store's frames (:mod:`nbtune.server.summary`), and a notebook kernel from its
live engine for the experiments it keeps in memory only (:mod:`nbtune.kernels`).
Both come through here, so ``ended/total``, the best trial (:mod:`nbtune.core.best`)
and the JSON shape the JupyterLab sidebar reads are one rule, whatever the source.
Plain columns in, plain JSON-safe dicts out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from nbtune.core.best import best_index
from nbtune.core.resources import device_noun
from nbtune.core.trial import TrialState, ended_of_total

__all__ = ["json_number", "error_line", "experiment_summary", "trial_rows", "curves"]


def json_number(x: Any) -> float | None:
    """A JSON-safe float: NaN/inf (a diverged loss) and missing values become ``None``."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def error_line(error: str | None) -> str:
    """A traceback's last non-blank line (``ValueError: bad lr``): what a table cell can show."""
    lines = [ln.strip() for ln in (error or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def experiment_summary(*, name: str, state: str, algorithm: str, metric: str, mode: str,
                       trial_ids: Sequence[int], states: Sequence[str],
                       values: Sequence[Any], budgets: Sequence[Any], planned: int | None,
                       gpus_in_use: int = 0, updated: str | None = None,
                       device: str | None = None) -> dict[str, Any]:
    """One experiment as the sidebar lists it; the columns are per trial, in trial-id order.

    ``device`` is what its lanes are (:func:`nbtune.core.resources.device_of`):
    ``"GPU"``, ``"CPU"`` (CPU workers standing in for GPUs) or ``None`` (not
    known yet). ``gpus_in_use`` keeps its name for older clients, but counts
    the lanes held whatever they are; ``in_use`` says it in words, as the
    sidebar shows it (``3 GPUs``, ``2 CPU workers``, ``1 worker``).

    ``trials`` is ``ended/total`` exactly as ``nbtune ls`` and the dashboard's
    header count it; ``best``/``best_trial`` follow :func:`best_index` (the
    rule of ``exp.best``: the best among the furthest-trained trials).
    """
    i = best_index(zip(map(json_number, values), (float(b or 0.0) for b in budgets),
                       strict=True), mode)
    states = [str(s) for s in states]
    return {
        "name": name,
        "state": state,
        "algorithm": algorithm,
        "metric": metric,
        "mode": mode,
        "trials_total": len(states),
        "trials_running": sum(s == TrialState.RUNNING.value for s in states),
        "trials_ended": sum(TrialState(s).is_terminal for s in states),
        "trials": ended_of_total(states, planned, state in ("done", "failed")),
        "best": None if i is None else json_number(values[i]),
        "best_trial": None if i is None else int(trial_ids[i]),
        "gpus_in_use": int(gpus_in_use),
        "device": device,
        "in_use": device_noun(device, int(gpus_in_use)),
        "updated": updated,
    }


def trial_rows(trial_ids: Sequence[int], states: Sequence[str], values: Sequence[Any],
               budgets: Sequence[Any], errors: Sequence[Any]) -> list[dict[str, Any]]:
    """The trials table of the sidebar's experiment panel: the error as its last line only."""
    return [{"trial_id": int(t), "state": str(s), "value": json_number(v),
             "budget": json_number(b), "error": error_line(e) if isinstance(e, str) else None}
            for t, s, v, b, e in zip(trial_ids, states, values, budgets, errors, strict=True)]


def curves(points: Iterable[tuple[int, Any, Any]],
           max_points: int | None = None) -> dict[str, list[list[float | None]]]:
    """``(trial_id, budget, value)`` points as ``{"<trial id>": [[budget, value], ...]}``.

    ``max_points`` thins each trial's curve to about that many points, evenly,
    always keeping its last one (a kernel file is rewritten every second: it
    must stay small whatever the number of reports).
    """
    out: dict[str, list[list[float | None]]] = {}
    for tid, budget, value in points:
        out.setdefault(str(int(tid)), []).append([json_number(budget), json_number(value)])
    if max_points is not None:
        for tid, pts in out.items():
            if len(pts) > max_points:
                step = len(pts) / max_points
                keep = [pts[int(k * step)] for k in range(max_points - 1)]
                out[tid] = [*keep, pts[-1]]
    return out
