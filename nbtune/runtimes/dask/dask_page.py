"""An nbtune page on the Dask dashboard: the trials and the workers they run on.

Trials run in child processes of the workers, so Dask's own pages (task
stream, workers) show them as one long task or not at all. People who live
in the Dask dashboard get a page of their own here, served by the
scheduler's Bokeh server like every dashboard page:

* The Dask driver publishes a small :func:`snapshot` of its experiment to the
  scheduler (``Client.set_metadata(["nbtune", <topic>], ...)``) at most once
  a second, from the thread that owns the engine: no other thread ever reads
  live engine state.
* The page (:func:`nbtune_doc`) reads the newest snapshot from the
  scheduler's memory once a second and replaces whole column sets (never a
  partial patch), so every view, opened at any time, shows the same.

Where it appears: ``/individual-nbtune`` on the dashboard, listed in its
"More..." menu as "Nbtune". Dask builds its page list when a scheduler
starts, so the page must be registered before: the clusters nbtune starts
itself (``runtime="auto"``, ``DaskRuntime()``) have it; for a scheduler
started elsewhere run ``dask scheduler --preload nbtune.runtimes.dask.dask_page``
(or call :func:`register` before making your ``LocalCluster``). Without the
page the snapshots are still published, for a page registered later.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

__all__ = ["ROUTE", "METADATA_KEY", "register", "snapshot", "Publisher", "nbtune_doc",
           "latest", "page_link", "dask_setup"]

log = logging.getLogger(__name__)

ROUTE = "/individual-nbtune"
METADATA_KEY = "nbtune"
#: trials and allocation segments a snapshot carries (the newest ones): a page, not a store
MAX_TRIALS = 500
MAX_SEGMENTS = 2000


def snapshot(engine: Any, inventory: Any, topic: str, now: float) -> dict[str, Any]:
    """What the page shows of one experiment, as plain data (msgpack-able).

    Called on the engine's own thread. Lanes are named by worker: a GPU id is
    nbtune's, a worker name is what the Dask dashboard shows. A worker's GPUs are
    named ``GPU k``; a CPU worker standing in for GPUs with several slots names
    them ``slot k`` (GPUs only on GPUs).
    """
    slots = getattr(inventory, "slots", {}) or {}

    def lane(gpu: int) -> str:
        s = slots.get(gpu)
        if s is None:  # its worker is gone: nothing says what it was
            return f"lane {gpu}"
        name = (getattr(inventory, "workers", {}).get(s.worker) or {}).get("name", s.worker)
        if s.kind != "cpu":
            return f"worker {name} GPU {s.index}"
        return f"worker {name}" + (f" slot {s.index}" if s.index else "")

    trials = sorted(engine.trials.values(), key=lambda t: t.trial_id)[-MAX_TRIALS:]
    counts: dict[str, int] = {}
    for t in engine.trials.values():
        counts[t.state.value] = counts.get(t.state.value, 0) + 1
    running = dict(engine.running)
    rows = {
        "trial": [t.trial_id for t in trials],
        "state": [t.state.value for t in trials],
        "budget": [float(t.budget_used) for t in trials],
        "target": [float(t.target_budget) for t in trials],
        "best": [float("nan") if t.best is None else float(t.best) for t in trials],
        "where": [", ".join(lane(g) for g, _ in running.get(t.trial_id, ())) for t in trials],
        "error": [(t.error or "").strip().splitlines()[-1][:200] if t.error else ""
                  for t in trials],
    }
    segs = engine.ledger.log[-MAX_SEGMENTS:]
    lanes = {
        "lane": [lane(r.gpu_id) for r in segs],
        "trial": [r.trial_id for r in segs],
        "start": [float(r.start) for r in segs],
        "end": [float(now if r.end is None else r.end) for r in segs],
        "share": [float(r.share) for r in segs],
    }
    return {"topic": topic, "metric": engine.metric, "mode": engine.mode, "now": float(now),
            "published": time.time(), "counts": counts, "total": len(engine.trials),
            "trials": rows, "lanes": lanes}


class Publisher:
    """Sends a snapshot to the scheduler when the engine changed, at most every ``interval`` s."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = float(interval)
        self._last = -float("inf")
        self._seen = -1

    def tick(self, client: Any, engine: Any, inventory: Any, topic: str, now: float,
             *, force: bool = False) -> bool:
        """Publish if due; never raises (a page must not take an experiment down)."""
        if client is None or engine is None:
            return False
        mono = time.monotonic()
        if not force and (mono - self._last < self.interval
                          or engine.events_handled == self._seen):
            return False
        self._last, self._seen = mono, engine.events_handled
        try:
            client.set_metadata([METADATA_KEY, topic], snapshot(engine, inventory, topic, now))
        except Exception:  # a closing scheduler, a lost connection: the run goes on
            log.debug("nbtune: could not publish the dashboard snapshot", exc_info=True)
            return False
        return True


def latest(scheduler: Any) -> dict[str, Any] | None:
    """The most recently published experiment snapshot the scheduler holds, or None."""
    try:
        store = scheduler.get_metadata([METADATA_KEY], default=None)
    except Exception:
        return None
    if not isinstance(store, dict) or not store:
        return None
    return max(store.values(), key=lambda s: s.get("published", 0.0))


def _title(snap: dict[str, Any] | None) -> str:
    if snap is None:
        return "<b>nbtune</b>: no experiment has run on this cluster yet"
    c = snap["counts"]
    ended = sum(v for k, v in c.items() if k in ("completed", "stopped", "error"))
    best = [b for b in snap["trials"]["best"] if b == b]
    pick = (min if snap["mode"] == "min" else max)(best) if best else None
    head = (f"<b>nbtune</b> {snap['topic']}: {ended}/{snap['total']} ended, "
            f"{c.get('running', 0)} running, {c.get('error', 0)} in error")
    if pick is not None:
        head += f"; best {snap['metric']} ({snap['mode']}) {pick:.4g}"
    return head


def nbtune_doc(scheduler: Any, extra: dict[str, Any], doc: Any) -> None:
    """The Bokeh document of the page: a header, the trial table and the workers' lanes."""
    from bokeh.layouts import column
    from bokeh.models import ColumnDataSource, DataTable, Div, NumberFormatter, TableColumn
    from bokeh.palettes import Category20_20
    from bokeh.plotting import figure

    trials = ColumnDataSource({k: [] for k in ("trial", "state", "budget", "target", "best",
                                               "where", "error")})
    segs = ColumnDataSource({k: [] for k in ("lane", "trial", "start", "end", "share",
                                             "color")})
    head = Div(text=_title(None))
    num = NumberFormatter(format="0.[0000]")
    table = DataTable(source=trials, sizing_mode="stretch_width", height=320, columns=[
        TableColumn(field=f, title=t, **({"formatter": num} if f == "best" else {}))
        for f, t in (("trial", "trial"), ("state", "state"), ("budget", "budget"),
                     ("target", "target"), ("best", "best"), ("where", "worker"),
                     ("error", "error"))])
    lanes = figure(title="trials on workers over time (s)", height=260,
                   sizing_mode="stretch_width", y_range=[], x_axis_label="seconds",
                   tools="xpan,xwheel_zoom,reset,hover",
                   tooltips=[("trial", "@trial"), ("share", "@share")])
    lanes.hbar(y="lane", left="start", right="end", height=0.8, source=segs, alpha=0.7,
               color="color", line_color="white")

    def update() -> None:
        snap = latest(scheduler)
        head.text = _title(snap)
        if snap is None:
            return
        trials.data = dict(snap["trials"])  # whole column sets: never inconsistent lengths
        lanes_data = dict(snap["lanes"])
        lanes_data["color"] = [Category20_20[t % 20] for t in lanes_data["trial"]]
        segs.data = lanes_data
        lanes.y_range.factors = sorted(set(snap["lanes"]["lane"]))

    update()
    doc.add_periodic_callback(update, 1000)
    doc.title = "Dask: nbtune"
    doc.add_root(column(head, table, lanes, sizing_mode="stretch_width"))
    with contextlib.suppress(ImportError):  # the dashboard's look
        from distributed.dashboard.components.scheduler import BOKEH_THEME

        doc.theme = BOKEH_THEME


def page_link(client: Any) -> str | None:
    """The page's address on ``client``'s Dask dashboard, if that scheduler serves it."""
    link = getattr(client, "dashboard_link", None)
    if not link:
        return None
    try:
        served = client.run_on_scheduler(_serves_page)
    except Exception:  # a scheduler without nbtune installed, a closed connection
        return None
    return link.rsplit("/", 1)[0] + ROUTE if served else None


def _serves_page(dask_scheduler: Any = None) -> bool:
    try:
        from distributed.dashboard import scheduler as dash
    except ImportError:
        return False
    return ROUTE in dash.applications


def register() -> bool:
    """Add the page to the dashboards of schedulers started from now on in this process."""
    try:
        from distributed.dashboard import scheduler as dash
    except ImportError:  # no bokeh: Dask has no dashboard either
        return False
    dash.applications.setdefault(ROUTE, nbtune_doc)
    return True


def dask_setup(scheduler: Any) -> None:
    """``dask scheduler --preload nbtune.runtimes.dask.dask_page`` entry point."""
    register()

