"""A notebook kernel's own file: the experiments it runs, kept current while they run.

:func:`track` is called by :func:`nbtune.build.build_experiment` for every
experiment; inside a Jupyter kernel (or with ``NBTUNE_KERNEL_FILE=1``) it adds
the experiment to this process's :class:`KernelFile` and subscribes to its
engine. The subscriber runs on the engine's own thread right after a
``handle`` (the engine's state is whole then, and no other thread ever reads
it), at most every :data:`INTERVAL` seconds (less often when a write costs
more than :data:`MAX_SHARE` of the time between writes) and at once when the
experiment ends; between handles nothing changes, and a live Dask run has a
handle at least every utilization sample (1 s). An experiment recorded in a
store is listed by name and store only: the server reads the store itself.
One kept in memory only carries its summary and detail (trial rows, curves
thinned to :data:`MAX_POINTS` per trial, the newest :data:`MAX_TRIALS`
trials, the allocation timeline of the newest :data:`MAX_PLACEMENTS`
placements), built by :mod:`nbtune.core.listing` exactly as the server builds a
store's.

The file is removed at the kernel's exit (``atexit``); a kernel that dies
without exit hooks leaves it to the server, which removes the files of dead
processes.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
import weakref
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nbtune.core.handles import ExperimentView
from nbtune.core.listing import (
    allocation_timeline,
    curves,
    experiment_summary,
    json_number,
    trial_rows,
)
from nbtune.core.resources import device_of
from nbtune.kernels.files import (
    VERSION,
    kernel_file,
    process_started,
    process_started_since_boot,
    write_json,
)

__all__ = ["KernelFile", "track", "untrack", "in_kernel", "current", "ENV", "INTERVAL",
           "MAX_POINTS", "MAX_TRIALS", "MAX_PLACEMENTS", "MAX_SHARE", "memory_listing", "store_location"]

log = logging.getLogger(__name__)

#: ``1`` writes the kernel file outside a Jupyter kernel too (tests), ``0`` never writes it
ENV = "NBTUNE_KERNEL_FILE"
#: seconds between writes while an experiment runs (it is also written when one ends)
INTERVAL = 1.0
#: learning-curve points per trial and trials a memory-only experiment's detail carries
MAX_POINTS = 100
MAX_TRIALS = 500
#: the newest placements a memory experiment's allocation timeline keeps
MAX_PLACEMENTS = 2000
#: the largest share of the engine thread's time the file may take (it then writes less often)
MAX_SHARE = 0.02


def in_kernel() -> bool:
    """This process is a Jupyter (ipykernel) kernel, or :data:`ENV` says to act as one."""
    flag = os.environ.get(ENV)
    if flag is not None and flag.strip():
        return flag.strip().lower() not in ("0", "false", "no", "off")
    app = sys.modules.get("ipykernel.kernelapp")  # never imported here: only if it runs us
    return app is not None and bool(app.IPKernelApp.initialized())


def store_location(store: Any) -> str | None:
    """Where the server can read ``store`` (a :class:`nbtune.store.Store`), or None.

    A SQLite file as its absolute path (the server then never re-creates a
    deleted file), a database server's URL with its password; an in-memory
    SQLite store cannot be read from another process: None, as for no store.
    """
    if store is None:
        return None
    path = getattr(store, "path", None)
    if path is not None:
        return str(Path(path).resolve())
    url = store.url
    if url.get_backend_name() == "sqlite":
        return None
    return str(url.render_as_string(hide_password=False))


def _json_value(v: Any) -> Any:
    """A configuration value as JSON holds it: numbers (NaN as None), text, else its repr."""
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int | float):
        return json_number(v) if isinstance(v, float) else int(v)
    try:
        return _json_value(v.item())  # a numpy scalar
    except (AttributeError, ValueError):
        return repr(v)


def memory_listing(exp: ExperimentView) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(summary, detail)`` of an experiment from its engine; call on the engine's thread."""
    engine = exp.engine
    metric = engine.metric
    trials = sorted(engine.trials.values(), key=lambda t: t.trial_id)
    ids = [t.trial_id for t in trials]
    states = [t.state.value for t in trials]
    values = [t.best for t in trials]
    budgets = [t.budget_used for t in trials]
    gpus = {g for placement in engine.running.values() for g, _ in placement}
    algo = engine.algorithm
    summary = experiment_summary(
        name=exp.name, state=exp.state, metric=metric, mode=engine.mode,
        algorithm=str(getattr(algo, "name", type(algo).__name__.lower())),
        trial_ids=ids, states=states, values=values, budgets=budgets,
        planned=getattr(algo, "num_trials", None), gpus_in_use=len(gpus),
        device=device_of(engine.ledger.cluster), updated=datetime.now(UTC).isoformat())
    shown = trials[-MAX_TRIALS:]
    if summary["best_trial"] is not None and shown and shown[0].trial_id > summary["best_trial"]:
        shown = [engine.trials[summary["best_trial"]], *shown[1:]]  # the best always shows
    rows = trial_rows([t.trial_id for t in shown], [t.state.value for t in shown],
                      [t.best for t in shown], [t.budget_used for t in shown],
                      [t.error for t in shown])
    for row, t in zip(rows, shown, strict=True):  # what the panel's grid and views show
        row["last"] = json_number(t.last)
        row["config"] = {str(k): _json_value(v) for k, v in t.config.items()}
    points = ((t.trial_id, b, m[metric]) for t in shown for _, b, m in list(t.results)
              if metric in m)
    cluster = engine.ledger.cluster
    timeline = allocation_timeline(
        ((r.trial_id, r.gpu_id, r.share, r.start, r.end)
         for r in engine.ledger.log[-MAX_PLACEMENTS:]),
        [] if cluster is None else [g.gpu_id for g in cluster.gpus], summary["device"],
        engine.time)
    return summary, {"summary": summary, "trials": rows, "curves": curves(points, MAX_POINTS),
                     "allocations": timeline}


class _Entry:
    """One experiment in the file; its engine subscriber (engine thread only)."""

    def __init__(self, owner: KernelFile, exp: ExperimentView) -> None:
        self.owner = owner
        self.name: str = exp.name
        self.store = store_location(getattr(exp, "store", None))
        self.summary: dict[str, Any] | None = None
        self.detail: dict[str, Any] | None = None
        self._exp = weakref.ref(exp)
        # held while it runs (a running experiment is listed even if the user drops it),
        # weakly once it ended: the file never keeps a finished experiment in memory
        self._hold = None if exp.engine.done else exp
        self._last = -float("inf")
        self._wait = owner.interval
        self.unsubscribe = exp.engine.subscribe(self)

    def tracks(self, exp: ExperimentView) -> bool:
        """This entry lists ``exp`` (still alive)."""
        return self._exp() is exp

    def refresh(self) -> bool:
        """Copy what the file shows of the experiment; False once it is gone."""
        exp = self._exp()
        if exp is None:
            return False
        if self.store is None:
            self.summary, self.detail = memory_listing(exp)
        return True

    def __call__(self, events: Any, commands: Any) -> None:
        exp = self._exp()
        if exp is None:
            return
        mono = time.monotonic()
        if not exp.engine.done and mono - self._last < self._wait:
            return
        self._last = mono
        if exp.engine.done:
            self._hold = None
        try:
            self.refresh()
            self.owner.write()
        except Exception:  # a full disk must not take the experiment down
            log.debug("nbtune: could not write the kernel file", exc_info=True)
        # a big experiment's listing costs more: write less often, never over MAX_SHARE
        self._wait = max(self.owner.interval, (time.monotonic() - mono) / MAX_SHARE)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "store": self.store, "summary": self.summary,
                "detail": self.detail}


class KernelFile:
    """This process's kernel file (:mod:`nbtune.kernels.files`) and what it lists."""

    def __init__(self, path: Path | None = None, *, interval: float = INTERVAL) -> None:
        self.pid = os.getpid()
        self.path = path if path is not None else kernel_file(self.pid)
        self.interval = float(interval)
        self.started = process_started(self.pid)
        self.started_since_boot = process_started_since_boot(self.pid)
        #: by (name, store): a name may be in memory and in a store at once
        self._entries: dict[tuple[str, str | None], _Entry] = {}
        self._lock = threading.Lock()  # the entries
        self._write_lock = threading.Lock()

    def track(self, exp: ExperimentView) -> None:
        """List ``exp`` (an :class:`~nbtune.experiment.Experiment` not yet started, or idle)."""
        entry = _Entry(self, exp)
        entry.refresh()  # nothing drives the engine yet: this thread may read it
        key = (entry.name, entry.store)
        with self._lock:
            old = self._entries.pop(key, None)  # a re-run under the same name replaces it
            self._entries[key] = entry
        if old is not None:
            old.unsubscribe()
        self.write()

    def untrack(self, exp: ExperimentView) -> None:
        with self._lock:
            key = next((k for k, e in self._entries.items() if e.tracks(exp)), None)
            if key is None:
                return
            entry = self._entries.pop(key)
        entry.unsubscribe()
        self.write()

    def names(self) -> list[tuple[str, str | None]]:
        """``(name, store location or None)`` of every experiment listed."""
        with self._lock:
            return list(self._entries)

    def as_json(self) -> dict[str, Any]:
        with self._lock:
            entries = [e.as_json() for e in self._entries.values()]
        return {
            "version": VERSION, "pid": self.pid, "started": self.started,
            "started_since_boot": self.started_since_boot,
            "notebook": os.environ.get("JPY_SESSION_NAME") or None,
            "kernel": _kernel_name(), "updated": time.time(),
            "stores": list(dict.fromkeys(e["store"] for e in entries if e["store"])),
            "experiments": entries,
        }

    def write(self) -> None:
        if os.getpid() != self.pid:  # a forked child: the file is its parent's
            return
        with self._write_lock:  # experiments on two engine threads write one after the other
            write_json(self.path, self.as_json())

    def close(self) -> None:
        """Remove the file (at the kernel's exit)."""
        if os.getpid() == self.pid:
            with contextlib.suppress(OSError):
                self.path.unlink()


def _kernel_name() -> str | None:
    """``kernel-<id>`` from the kernel's connection file, when ipykernel runs us."""
    connect = sys.modules.get("ipykernel.connect")
    try:
        return Path(connect.get_connection_file()).stem if connect is not None else None
    except Exception:
        return None


_current: KernelFile | None = None
_current_lock = threading.Lock()


def current() -> KernelFile | None:
    """This process's kernel file, if an experiment made one."""
    return _current


def track(exp: ExperimentView) -> None:
    """List ``exp`` in this kernel's file; nothing outside a kernel (see :func:`in_kernel`).

    Never raises: the sidebar is a view, it must not stop a run from starting.
    """
    global _current
    if not in_kernel():
        return
    try:
        with _current_lock:
            if _current is None or _current.pid != os.getpid():
                _current = KernelFile()
                atexit.register(_current.close)
        _current.track(exp)
    except Exception:
        log.debug("nbtune: could not list the experiment in the kernel file", exc_info=True)


def untrack(exp: ExperimentView) -> None:
    """Drop ``exp`` from the file (it never started)."""
    if _current is not None:
        with contextlib.suppress(Exception):
            _current.untrack(exp)
