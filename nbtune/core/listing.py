"""What every list of experiments shows of one: a summary row, trial rows, learning curves
and the allocation timeline.

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

__all__ = ["json_number", "error_line", "experiment_summary", "trial_rows", "curves",
           "allocation_timeline", "lane_word"]


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


def lane_word(device: str | None) -> str:
    """What one lane of the allocation timeline is called: ``GPU`` only on GPUs, ``worker``
    where CPU workers stand in for them, ``lane`` while the cluster is not known."""
    return {"GPU": "GPU", "CPU": "worker"}.get(device or "", "lane")


def allocation_timeline(records: Iterable[tuple[int, int, Any, Any, Any]],
                        lanes: Iterable[int], device: str | None,
                        now: Any = None) -> dict[str, Any]:
    """The allocation timeline of the experiment panel: which trial held which share of
    which lane (a GPU, or a CPU worker standing in for one) from when to when.

    ``records`` are ``(trial_id, gpu_id, share, start, end)`` in the order the engine made
    the placements (its ledger's log, as a store records it); ``end`` None is a placement
    still held, drawn up to ``now``. ``lanes`` are the cluster's lane ids (idle ones too).
    Each rectangle gets its ``offset`` in its lane: the lowest free height over its whole
    interval, so shares packed on one lane stack instead of hiding each other.
    """
    rows = [(int(t), int(g), float(json_number(sh) or 0.0), json_number(a), json_number(b))
            for t, g, sh, a, b in records]
    rows = [r for r in rows if r[3] is not None]
    times = [x for r in rows for x in (r[3], r[4]) if x is not None]
    end = json_number(now)
    end = max([end, *times] if end is not None else times, default=0.0)
    ids = sorted({int(g) for g in lanes} | {r[1] for r in rows})
    word = lane_word(device)
    placed: dict[int, list[tuple[float, float, float, float]]] = {}
    rects = []
    for tid, gpu, share, start, stop in rows:
        until = end if stop is None else stop
        if until <= start:
            continue  # held for no time: nothing to draw
        busy = sorted((o, o + h) for a, b, o, h in placed.get(gpu, ()) if a < until and b > start)
        offset = 0.0
        for lo, hi in busy:  # the lowest gap of the rectangle's height
            if offset + share <= lo + 1e-9:
                break
            offset = max(offset, hi)
        placed.setdefault(gpu, []).append((start, until, offset, share))
        rects.append({"trial_id": tid, "lane": gpu, "share": share, "start": start,
                      "end": stop, "offset": offset})
    return {"device": device, "word": word, "now": end,
            "lanes": [{"id": g, "label": f"{word} {g}"} for g in ids], "rects": rects}
