"""What the JupyterLab sidebar shows: a JSON summary of every experiment in a store.

Kept apart from the tornado handler so it is plain, synchronous and testable
on its own; the handler runs it in a thread. It reads only through
:class:`nbtune.store.Store`'s public methods, so the sidebar sees exactly what
``nbtune.Store(...).results(name)`` shows in a notebook.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nbtune.core.listing import allocation_timeline, curves, experiment_summary, trial_rows
from nbtune.core.resources import ClusterSpec, device_noun, device_of
from nbtune.store import DEFAULT_DIR, DEFAULT_FILE, Store

__all__ = ["resolve_location", "summarize", "empty_reply", "display_location", "detail",
           "totals"]


def resolve_location(spec: str, root_dir: str | os.PathLike[str]) -> str:
    """Where the store is: an SQLAlchemy URL as given, or an absolute SQLite file path.

    Follows ``tune(store=...)``'s rules (a directory or a suffix-less path means
    ``<dir>/nbtune.db``) with relative paths taken from the server's root
    directory, because that is where notebooks run ``tune(store=True)``.
    An empty spec means the default, ``<root_dir>/nbtune-store/nbtune.db``.
    """
    text = (spec or "").strip()
    if "://" in text:
        return text
    path = Path(text or DEFAULT_DIR).expanduser()
    if not path.is_absolute():
        path = Path(root_dir).expanduser() / path
    if path.is_dir() or (not path.exists() and path.suffix == ""):
        path = path / DEFAULT_FILE
    return str(path.resolve())


def display_location(location: str) -> str:
    """The location as the sidebar may show it: never a database password."""
    if "://" not in location:
        return location
    from sqlalchemy.engine import make_url

    return make_url(location).render_as_string(hide_password=True)


def empty_reply(location: str, *, available: bool) -> dict[str, Any]:
    """The answer for a store with no experiments (or no store file yet)."""
    return {
        "store": display_location(location),
        "available": available,
        "experiments": [],
        "totals": totals([]),
    }


def _run_of(store: Store, row: dict[str, Any],
            cache: dict[tuple[Any, ...], dict[str, Any]] | None,
            keep: bool = True) -> dict[str, Any]:
    """What one run of an experiment keeps, from the cluster the store recorded (read once
    per run: a scan of the events): ``device``, ``"GPU"``, ``"CPU"`` (CPU workers standing
    in for GPUs) or None, and the ``lanes`` (GPU ids). A store that cannot say (an older
    one, a run not started) says None and no lanes, and is asked again next time. Kept in
    ``cache`` only with ``keep`` (a finished experiment's summary is cached whole instead)."""
    run = _run_key(row)
    known = None if cache is None else cache.get(run)
    if known is not None:
        return known
    try:
        cluster: ClusterSpec | None = store.cluster(str(row["name"]))
    except Exception:  # an unreadable event must not take the list down: the words go neutral
        cluster = None
    known = {"device": device_of(cluster),
             "lanes": [] if cluster is None else [g.gpu_id for g in cluster.gpus]}
    if cache is not None and keep and known["device"] is not None:
        cache[run] = known  # summarize() forgets it with the run
    return known


def _summarize_one(store: Store, row: dict[str, Any], device: str | None) -> dict[str, Any]:
    name, metric, mode = str(row["name"]), str(row["metric"]), str(row["mode"])
    trials = store.results(name)
    running_ids: set[int] = set()
    if not trials.empty:
        running_ids = {int(t) for t in trials.loc[trials["state"] == "running", "trial_id"]}
    # A GPU is in use while a running trial holds an open allocation on it.
    allocs = store.allocations(name)
    gpus: set[int] = set()
    if not allocs.empty:
        open_ = allocs[allocs["end"].isna() & allocs["trial_id"].isin(running_ids)]
        gpus = {int(g) for g in open_["gpu_id"]}
    updated = row.get("updated")
    planned = row.get("num_trials")
    planned = None if planned is None or planned != planned else int(planned)  # NaN: unknown
    cols = ([], [], [], []) if trials.empty else (
        list(trials["trial_id"]), list(trials["state"]), list(trials[metric]),
        list(trials["budget_used"]))
    return experiment_summary(
        name=name, state=str(row["state"]), algorithm=str(row["algorithm"]), metric=metric,
        mode=mode, trial_ids=cols[0], states=cols[1], values=cols[2], budgets=cols[3],
        planned=planned, gpus_in_use=len(gpus), device=device,
        updated=updated.isoformat() if hasattr(updated, "isoformat") else None)


#: marks a run's device in the cache (a tuple: never equal to an experiment's name)
_DEVICE = ("device",)


def _run_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """A cache key for what one run of an experiment keeps (its device): a resume may move it."""
    return (_DEVICE, row["name"], str(row["created"]), row["restarts"])


def _done_key(row: dict[str, Any]) -> tuple[Any, ...] | None:
    """A cache key for a finished experiment, ``None`` while it can still change.

    ``created`` tells a re-created name apart; ``restarts``/``state`` change on resume.
    """
    if row["state"] != "done":
        return None
    return (row["name"], str(row["created"]), str(row["updated"]), row["restarts"])


def summarize(store: Store, location: str,
              cache: dict[tuple[Any, ...], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every experiment of ``store`` with state, trials ended/total (``trials``, as ``nbtune ls``
    shows it) and running, best metric with its direction, GPUs (or the CPU workers
    standing in for them: ``device``) in use.

    The status bar's totals count distinct GPUs per experiment and add them up:
    two experiments sharing a GPU fractionally both count it, which is what a
    user asking "how many GPUs are my jobs holding" expects.

    ``cache`` (kept by the caller across polls) holds finished experiments'
    summaries, so a poll re-reads only the experiments that can still change
    rather than every trial table of a long-lived store every few seconds, and
    each running experiment's device (read once per run, not once per poll).
    """
    reply = empty_reply(location, available=True)
    frame = store.experiments()
    experiments = []
    live_keys = set()
    for row in frame.to_dict("records"):
        key = _done_key(row)
        if key is not None and cache is not None and key in cache:
            summary = cache[key]
        else:
            run = _run_key(row)
            summary = _summarize_one(store, row,
                                     _run_of(store, row, cache, keep=key is None)["device"])
            if cache is not None and run in cache:
                live_keys.add(run)
            if key is not None and cache is not None:
                cache[key] = summary
        if key is not None:
            live_keys.add(key)
        experiments.append(summary)
    if cache is not None:  # forget deleted experiments
        for stale in set(cache) - live_keys:
            del cache[stale]
    reply["experiments"] = experiments
    reply["totals"] = totals(experiments)
    return reply


def totals(experiments: list[dict[str, Any]]) -> dict[str, Any]:
    """The status bar's sums over listed experiments.

    ``gpus_in_use`` (the name older clients read) counts every lane held, GPU or CPU
    worker; ``in_use_by_device`` splits it by what the lanes are (``GPU``, ``CPU``, and
    ``unknown`` for experiments that do not say), ``device`` is the one kind every listed
    experiment runs on (``"mixed"`` for several, ``None`` when none says), and ``in_use``
    says it in words as the status bar shows it: ``3 GPUs`` only on GPUs,
    ``2 CPU workers`` on CPU stand-ins, ``3 GPUs · 2 CPU workers`` for both.
    """
    by: dict[str, int] = {}
    for e in experiments:
        dev = e.get("device") or "unknown"
        by[dev] = by.get(dev, 0) + int(e["gpus_in_use"])
    kinds = {e.get("device") for e in experiments} - {None}
    device = None if not kinds else kinds.pop() if len(kinds) == 1 else "mixed"
    held = [(d, by[d]) for d in ("GPU", "CPU", "unknown") if by.get(d)]
    words = (" · ".join(device_noun(None if d == "unknown" else d, n) for d, n in held)
             if held else device_noun(device, 0))
    return {
        "experiments": len(experiments),
        "trials_running": sum(e["trials_running"] for e in experiments),
        "gpus_in_use": sum(e["gpus_in_use"] for e in experiments),
        "device": device,
        "in_use_by_device": by,
        "in_use": words,
    }


def detail(store: Store, name: str,
           cache: dict[tuple[Any, ...], dict[str, Any]] | None = None) -> dict[str, Any]:
    """One experiment for the sidebar's main-area panel: its summary, every trial's row
    (state, best metric, budget, the error's last line), learning curves and the allocation
    timeline (the placements the store recorded, on the lanes of the cluster it recorded).

    ``cache`` is :func:`summarize`'s: a run's device is read from the events once, not at
    every refresh of an open panel.
    """
    row = next((r for r in store.experiments().to_dict("records") if r["name"] == name), None)
    if row is None:
        raise KeyError(name)
    known = _run_of(store, row, cache)
    summary = _summarize_one(store, row, known["device"])
    metric = summary["metric"]
    trials = store.results(name)
    rows = [] if trials.empty else trial_rows(
        *(list(trials[c]) for c in ("trial_id", "state", metric, "budget_used", "error")))
    lc = store.learning_curves(name)
    points = [] if lc.empty or metric not in lc else zip(lc["trial_id"], lc["budget"], lc[metric],
                                                         strict=True)
    allocs = store.allocations(name)
    timeline = allocation_timeline(allocs.itertuples(index=False, name=None), known["lanes"],
                                   summary["device"], row.get("time"))
    return {"summary": summary, "trials": rows, "curves": curves(points),
            "allocations": timeline}
