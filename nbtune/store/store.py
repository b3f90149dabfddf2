"""The persistent store: experiments, their event log and result tables, in any SQLAlchemy DB.

SQLite is the default (one file, WAL mode so a dashboard in another kernel can
read while the recorder writes, a busy timeout so the two never fail on a
lock); any SQLAlchemy URL (``postgresql+psycopg://...``) works for a store
shared by several machines. Where a store lives, from ``tune(store=...)``:

* ``None`` / ``False``: nothing is persisted (the experiment lives in memory);
* ``True``: ``./nbtune-store/nbtune.db`` under the current directory;
* a directory (existing, or a path without a suffix): ``<dir>/nbtune.db``;
* a file path (``runs.db``) or a URL containing ``://``: exactly that;
* a :class:`Store` object: itself.

Checkpoints are stored by reference: files under ``<store dir>/checkpoints``
(or ``checkpoint_root``, any fsspec URL), their paths in the ``checkpoints`` table.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import Engine as SqlEngine
from sqlalchemy import create_engine, delete, event, func, insert, select, update
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from nbtune.core import events as ev
from nbtune.core.commands import Command
from nbtune.core.resources import ClusterSpec
from nbtune.core.roles import role
from nbtune.core.tolerance import EPS
from nbtune.store.batch import WriteBatch, commit_batch, now_utc
from nbtune.store.migrations import migrate
from nbtune.store.schema import (
    AllocationRow,
    CheckpointRow,
    EventRow,
    ExperimentRow,
    MetricRow,
    TrialRow,
    UtilizationRow,
)
from nbtune.store.serialize import (
    field_names,
    from_jsonable,
    load_cluster,
    load_event,
    to_jsonable,
)

__all__ = ["Store", "WriteBatch", "open_store", "command_payload", "UnknownExperimentError",
           "ExperimentExistsError", "StoreOpenError", "DEFAULT_DIR", "DEFAULT_FILE", "COMMAND_PREFIX",
           "EMPTY_BATCH"]

DEFAULT_DIR = "nbtune-store"
DEFAULT_FILE = "nbtune.db"
#: events whose kind starts with this are the commands the engine answered with
COMMAND_PREFIX = "cmd."
#: marks a ``handle()`` call without events, so replay calls it too
EMPTY_BATCH = "batch.empty"


class UnknownExperimentError(LookupError):
    """No experiment of that name in the store; the message lists the ones there are."""


class StoreOpenError(RuntimeError):
    """The store's URL or path cannot be opened; the message says what to pass instead."""


class ExperimentExistsError(ValueError):
    """A new experiment would reuse a stored name; the message says how to resume it."""


def _sqlite_pragmas(memory: bool) -> Any:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        if not memory:
            # readers never block the recorder. A new file's switch to WAL fails at once, busy
            # wait or not, while another opener holds its write lock: 30 s of retries (a
            # loaded machine can hold that lock for seconds)
            for attempt in range(600):
                try:
                    cur.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or attempt == 599:
                        raise
                    time.sleep(0.05)
            cur.execute("PRAGMA synchronous=NORMAL")  # safe under WAL against process crashes
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return on_connect


class Store:
    """A handle on one database of experiments. Thread-safe: the recorder writes from a thread.

    ``url`` follows ``tune(store=...)``'s rules: a SQLAlchemy URL, a SQLite file,
    or a directory (``<dir>/nbtune.db``).
    """

    def __init__(self, url: str | os.PathLike[str], *, checkpoint_root: str | None = None,
                 echo: bool = False) -> None:
        try:
            self._open(os.fspath(url), checkpoint_root, echo)
        except (OSError, SQLAlchemyError) as exc:  # StoreVersionError passes: its own message  # a clear cause instead of a driver's trace
            shown = make_url(str(url)).render_as_string() if "://" in str(url) else str(url)
            raise StoreOpenError(
                f"cannot open the store {shown!r}: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0]}. Pass a writable directory or SQLite file "
                "(store='runs.db'), or the URL of a database server that is running "
                "(store='postgresql+psycopg://user@host/db')") from exc

    def _open(self, text: str, checkpoint_root: str | None, echo: bool) -> None:
        if "://" not in text:
            path = Path(text).expanduser()
            if path.is_dir() or (not path.exists() and path.suffix == ""):
                path = path / DEFAULT_FILE  # a directory, as for tune(store=...)
            path = path.resolve()
            path.parent.mkdir(parents=True, exist_ok=True)
            text = f"sqlite:///{path}"
        self.url = make_url(text)
        kw: dict[str, Any] = {"echo": echo}
        self._lock: Any = nullcontext()
        self.path: Path | None = None
        if self.url.get_backend_name() == "sqlite":
            memory = self.url.database in (None, "", ":memory:")
            kw["connect_args"] = {"check_same_thread": False, "timeout": 30}
            if memory:
                kw["poolclass"] = StaticPool  # one shared connection: serialize its use
                self._lock = threading.RLock()
            else:
                self.path = Path(str(self.url.database))
        self.engine: SqlEngine = create_engine(self.url, **kw)
        if self.url.get_backend_name() == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas(self.path is None))
        self.checkpoint_root = checkpoint_root or (
            str(self.path.parent / "checkpoints") if self.path is not None else None
        )
        #: the schema version the database had when opened (older ones are upgraded)
        self.opened_version = migrate(self.engine)
        self._ids: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"Store({self.url.render_as_string(hide_password=True)!r})"

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A transaction on the store's database, under its lock (for every table's writer,
        the profiles' included)."""
        with self._lock, self.engine.begin() as conn:
            yield conn

    @contextmanager
    def session(self) -> Iterator[Session]:
        """An ORM session on the store's database, under its lock (for every table's reader)."""
        with self._lock, Session(self.engine, expire_on_commit=False) as s:
            yield s

    # ------------------------------------------------------------ experiments
    def names(self) -> list[str]:
        with self.session() as s:
            return list(s.scalars(select(ExperimentRow.name).order_by(ExperimentRow.id)))

    def experiments(self) -> pd.DataFrame:
        """One row per stored experiment: name, algorithm, metric, state, trials, times."""
        cols = ["name", "algorithm", "allocator", "metric", "mode", "state", "restarts",
                "num_trials", "time", "created", "updated"]
        with self.session() as s:
            rows = s.scalars(select(ExperimentRow).order_by(ExperimentRow.id)).all()
        return pd.DataFrame([{c: getattr(r, c) for c in cols} for r in rows], columns=cols)

    def experiment(self, name: str) -> ExperimentRow:
        """The stored row of ``name``; :class:`UnknownExperimentError` lists the known names."""
        with self.session() as s:
            row = s.scalars(select(ExperimentRow).where(ExperimentRow.name == name)).first()
        if row is None:
            known = self.names()
            raise UnknownExperimentError(
                f"no experiment named {name!r} in {self!r}; "
                + (f"known experiments: {known}" if known else "the store is empty")
            )
        self._ids[name] = row.id
        return row

    def experiment_id(self, name: str) -> int:
        if name not in self._ids:
            self.experiment(name)
        return self._ids[name]

    def ensure_new(self, name: str) -> None:
        """Raise :class:`ExperimentExistsError` (with the resume hint) if ``name`` is taken."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"experiment name must be a non-empty string, got {name!r}")
        if name in self.names():
            raise ExperimentExistsError(
                f"an experiment named {name!r} already exists in {self!r}: continue it with "
                f"nbtune.resume({name!r}, store=...), or pick another name="
            )

    def create_experiment(self, name: str, **fields: Any) -> int:
        """Add a new experiment row; a stored name raises :class:`ExperimentExistsError`."""
        self.ensure_new(name)
        t = now_utc()
        try:
            with self.begin() as conn:
                res = conn.execute(insert(ExperimentRow).values(name=name, created=t, updated=t,
                                                                **fields))
                eid = int(res.inserted_primary_key[0])
        except IntegrityError:
            if name in self.names():  # another process took the name a moment ago
                self.ensure_new(name)
            raise
        self._ids[name] = eid
        return eid

    def free_name(self, prefix: str = "experiment", start: int = 1) -> str:
        """The first ``f"{prefix}-{k}"`` (k >= start) not in the store."""
        taken, k = set(self.names()), start
        while f"{prefix}-{k}" in taken:
            k += 1
        return f"{prefix}-{k}"

    def mark_restart(self, name: str) -> None:
        eid = self.experiment_id(name)
        with self.begin() as conn:
            conn.execute(update(ExperimentRow).where(ExperimentRow.id == eid).values(
                restarts=ExperimentRow.restarts + 1, state="running", updated=now_utc()))

    def delete(self, name: str) -> None:
        """Remove an experiment and every row that belongs to it (not its checkpoint files)."""
        eid = self.experiment_id(name)
        with self.begin() as conn:
            for table in (EventRow, TrialRow, MetricRow, CheckpointRow, UtilizationRow,
                          AllocationRow):
                conn.execute(delete(table).where(table.experiment_id == eid))
            conn.execute(delete(ExperimentRow).where(ExperimentRow.id == eid))
        self._ids.pop(name, None)

    # --------------------------------------------------------------- writing
    def write(self, experiment_id: int, batch: WriteBatch) -> None:
        """Commit everything in ``batch`` atomically (all of it or, on a crash, none)."""
        with self.begin() as conn:
            commit_batch(conn, experiment_id, batch)
            if batch.experiment:
                conn.execute(update(ExperimentRow).where(ExperimentRow.id == experiment_id)
                             .values(updated=now_utc(), **batch.experiment))

    def last_seq(self, name: str) -> tuple[int, int]:
        """``(seq, batch)`` of the last stored event (``(-1, -1)`` if none)."""
        eid = self.experiment_id(name)
        with self.session() as s:
            row = s.execute(select(func.max(EventRow.seq), func.max(EventRow.batch))
                            .where(EventRow.experiment_id == eid)).one()
        return (-1 if row[0] is None else int(row[0]), -1 if row[1] is None else int(row[1]))

    # --------------------------------------------------------------- reading
    def event_log(self, name: str) -> list[tuple[list[ev.Event], list[tuple[str, Any]]]]:
        """Every batch the engine handled: its events and the commands it answered (as JSON)."""
        eid = self.experiment_id(name)
        with self.session() as s:
            rows = s.execute(select(EventRow.batch, EventRow.kind, EventRow.payload)
                             .where(EventRow.experiment_id == eid).order_by(EventRow.seq)).all()
        out: list[tuple[list[ev.Event], list[tuple[str, Any]]]] = []
        last = None
        for batch, kind, payload in rows:
            if batch != last:
                out.append(([], []))
                last = batch
            if kind == EMPTY_BATCH:
                continue
            if kind.startswith(COMMAND_PREFIX):
                out[-1][1].append((kind[len(COMMAND_PREFIX):], payload))
            else:
                out[-1][0].append(load_event(kind, payload))
        return out

    def cluster(self, name: str) -> ClusterSpec | None:
        """The cluster the experiment last ran on (its last ``ExperimentStarted`` or
        ``ResourcesChanged``), or None before it started: what tells GPUs from the CPU
        workers that stand in for them, for the words a reader of the store shows."""
        eid = self.experiment_id(name)
        kinds = (ev.ExperimentStarted.__name__, ev.ResourcesChanged.__name__)
        with self.session() as s:
            payload = s.scalars(select(EventRow.payload)
                                .where(EventRow.experiment_id == eid, EventRow.kind.in_(kinds))
                                .order_by(EventRow.seq.desc()).limit(1)).first()
        if not isinstance(payload, dict) or not isinstance(payload.get("cluster"), dict):
            return None
        return load_cluster(payload["cluster"])

    def results(self, name: str) -> pd.DataFrame:
        """The stored twin of :meth:`nbtune.Experiment.results`, without replaying anything."""
        exp = self.experiment(name)
        with self.session() as s:
            rows = s.scalars(select(TrialRow).where(TrialRow.experiment_id == exp.id)
                             .order_by(TrialRow.trial_id)).all()
        cols = ["trial_id", "state", exp.metric, "last", "budget_used", "gpu_seconds", "start",
                "end", "failures", "error"]
        if not rows:
            return pd.DataFrame(columns=cols)
        fused = any(r.unit is not None for r in rows)  # tune(fusion=F): the fused unit
        df = pd.DataFrame([{
            "trial_id": r.trial_id,
            **{f"config/{k}": v for k, v in from_jsonable(r.config).items()},
            "state": r.state, exp.metric: r.best, "last": r.last, "budget_used": r.budget_used,
            "gpu_seconds": r.gpu_seconds, "start": r.start, "end": r.end,
            "failures": r.failures, "error": r.error,
            **({"group": r.unit} if fused else {}), "role": role(from_jsonable(r.config)),
        } for r in rows])
        return df if df["role"].any() else df.drop(columns="role")  # tune(scaling=S)

    def learning_curves(self, name: str) -> pd.DataFrame:
        """Every stored report, trial by trial: trial_id, time, budget and the metrics."""
        eid = self.experiment_id(name)
        with self.session() as s:
            rows = s.execute(select(MetricRow.trial_id, MetricRow.time, MetricRow.budget,
                                    MetricRow.metrics).where(MetricRow.experiment_id == eid)
                             .order_by(MetricRow.trial_id, MetricRow.id)).all()
        data = [{"trial_id": t, "time": time, "budget": b, **from_jsonable(m)}
                for t, time, b, m in rows]
        return pd.DataFrame(data, columns=None if data else ["trial_id", "time", "budget"])

    def allocations(self, name: str) -> pd.DataFrame:
        eid = self.experiment_id(name)
        with self.session() as s:
            rows = s.execute(select(AllocationRow.trial_id, AllocationRow.gpu_id,
                                    AllocationRow.share, AllocationRow.start, AllocationRow.end)
                             .where(AllocationRow.experiment_id == eid)
                             .order_by(AllocationRow.idx)).all()
        return pd.DataFrame([tuple(r) for r in rows],
                            columns=["trial_id", "gpu_id", "share", "start", "end"])

    def utilization(self, name: str) -> pd.DataFrame:
        eid = self.experiment_id(name)
        with self.session() as s:
            rows = s.execute(select(UtilizationRow.time, UtilizationRow.gpu_id,
                                    UtilizationRow.util, UtilizationRow.memory_gb)
                             .where(UtilizationRow.experiment_id == eid)
                             .order_by(UtilizationRow.id)).all()
        return pd.DataFrame([tuple(r) for r in rows],
                            columns=["time", "gpu_id", "util", "memory_gb"])

    # ----------------------------------------------------------- checkpoints
    def local_checkpoint_dir(self, name: str) -> Path | None:
        """:meth:`checkpoint_dir` as a local path, or None when it is a remote URL."""
        if self.checkpoint_root is None or "://" in self.checkpoint_root:
            return None
        return Path(self.checkpoint_dir(name))

    def checkpoint_dir(self, name: str) -> str:
        """Where a runtime should write ``name``'s checkpoints (a path or fsspec URL).

        The Dask runtime lays files out below it as ``trial-<id>/budget-<b>.pt``
        and reports each with :meth:`record_checkpoint`.
        """
        if self.checkpoint_root is None:
            raise ValueError(
                f"{self!r} is not a SQLite file, so it has no directory for checkpoints: "
                "pass Store(url, checkpoint_root='s3://bucket/nbtune') (any fsspec URL)"
            )
        return f"{self.checkpoint_root.rstrip('/')}/{name}"

    def record_checkpoint(self, name: str, trial_id: int, budget: float, uri: str) -> None:
        """A runtime saved ``trial_id``'s state at ``budget`` to ``uri``: remember where."""
        eid = self.experiment_id(name)
        with self.begin() as conn:
            conn.execute(insert(CheckpointRow).values(
                experiment_id=eid, trial_id=int(trial_id), budget=float(budget), uri=str(uri),
                created=now_utc()))
            conn.execute(update(TrialRow).where(TrialRow.experiment_id == eid,
                                                TrialRow.trial_id == int(trial_id))
                         .values(checkpoint=str(uri)))

    def checkpoint(self, name: str, trial_id: int, budget: float | None = None) -> str | None:
        """The latest checkpoint of ``trial_id`` at or below ``budget`` (any budget if None).

        A resumed trial starts from the budget of its last *recorded* report, so the
        runtime asks for the checkpoint at that budget, not a later one the crash orphaned.
        """
        eid = self.experiment_id(name)
        q = select(CheckpointRow.uri).where(CheckpointRow.experiment_id == eid,
                                            CheckpointRow.trial_id == int(trial_id))
        if budget is not None:
            q = q.where(CheckpointRow.budget <= float(budget) + EPS)
        with self.session() as s:
            return s.scalars(q.order_by(CheckpointRow.budget.desc(), CheckpointRow.id.desc())
                             .limit(1)).first()


def open_store(spec: Any) -> Store | None:
    """Turn ``tune(store=...)``'s argument into a :class:`Store` (``None`` keeps it in memory)."""
    if spec is None or spec is False:
        return None
    if isinstance(spec, Store):
        return spec
    if spec is True:
        return Store(Path.cwd() / DEFAULT_DIR / DEFAULT_FILE)
    if isinstance(spec, str | os.PathLike):
        return Store(spec)
    raise TypeError(
        f"store= takes None, True, a path, an SQLAlchemy URL or a nbtune Store, got "
        f"{type(spec).__name__}"
    )


def command_payload(cmd: Command) -> tuple[str, dict[str, Any]]:
    """A command as ``(kind, JSON)``, so replay can check it answers the same."""
    return type(cmd).__name__, {n: to_jsonable(getattr(cmd, n)) for n in field_names(cmd)}
