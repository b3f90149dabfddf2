"""What the recorder hands the store in one go, and how one such batch is committed.

Kept apart from :mod:`nbtune.store.store` because it is the hot path: the
statements are built once (building an ORM insert costs more than a small
write) and an upsert uses the dialect's ``ON CONFLICT`` where there is one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.engine import Connection

from nbtune.store.schema import (
    AllocationRow,
    CheckpointRow,
    EventRow,
    MetricRow,
    TrialRow,
    UtilizationRow,
)

__all__ = ["WriteBatch", "commit_batch", "upsert", "now_utc"]


def now_utc() -> datetime:
    return datetime.now(UTC)


@dataclass
class WriteBatch:
    """Rows the recorder hands over; :meth:`Store.write` commits them in one transaction."""

    events: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    utilization: list[dict[str, Any]] = field(default_factory=list)
    trials: dict[int, dict[str, Any]] = field(default_factory=dict)
    allocations: dict[int, dict[str, Any]] = field(default_factory=dict)
    experiment: dict[str, Any] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.events or self.metrics or self.utilization or self.trials
                    or self.allocations or self.experiment or self.checkpoints)

    def rows(self) -> int:
        return len(self.events) + len(self.metrics) + len(self.utilization)

    def extend(self, newer: WriteBatch) -> None:
        """Append ``newer`` in place (its trial and allocation snapshots win)."""
        self.events.extend(newer.events)
        self.metrics.extend(newer.metrics)
        self.utilization.extend(newer.utilization)
        self.trials.update(newer.trials)
        self.allocations.update(newer.allocations)
        self.experiment.update(newer.experiment)
        self.checkpoints.extend(newer.checkpoints)


# Core statements built once (an ORM-level insert per write costs more than the write)
_INSERT_EVENTS = insert(EventRow.__table__)
_INSERT_METRICS = insert(MetricRow.__table__)
_INSERT_UTIL = insert(UtilizationRow.__table__)
_INSERT_CKPT = insert(CheckpointRow.__table__)
_UPSERTS: dict[tuple[str, str, tuple[str, ...]], Any] = {}


def upsert(conn: Connection, table: Any, rows: list[dict[str, Any]], keys: list[str]) -> None:
    """Insert or update ``rows`` by primary key, with the dialect's ON CONFLICT when it has one."""
    if not rows:
        return
    shapes: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in rows:  # executemany needs one set of columns per statement
        shapes.setdefault(tuple(r), []).append(r)
    if len(shapes) > 1:
        for group in shapes.values():
            upsert(conn, table, group, keys)
        return
    name = conn.dialect.name
    if name in ("sqlite", "postgresql"):
        shape = (name, table.name, tuple(rows[0]))
        stmt = _UPSERTS.get(shape)
        if stmt is None:  # built once per shape: building it is most of a small write's cost
            if name == "sqlite":
                from sqlalchemy.dialects.sqlite import insert as dialect_insert
            else:
                from sqlalchemy.dialects.postgresql import insert as dialect_insert
            ins = dialect_insert(table)
            cols = [c for c in rows[0] if c not in keys]
            stmt = _UPSERTS[shape] = ins.on_conflict_do_update(
                index_elements=keys, set_={c: ins.excluded[c] for c in cols})
        conn.execute(stmt, rows)
        return
    for r in rows:  # portable fallback: update, insert when nothing matched
        cond = [table.c[k] == r[k] for k in keys]
        res = conn.execute(update(table).where(*cond).values(**r))
        if res.rowcount == 0:
            conn.execute(insert(table).values(**r))


def commit_batch(conn: Connection, experiment_id: int, batch: WriteBatch) -> None:
    """Write ``batch``'s rows inside the caller's transaction."""
    if batch.events:
        conn.execute(_INSERT_EVENTS, batch.events)
    if batch.metrics:
        conn.execute(_INSERT_METRICS, batch.metrics)
    if batch.utilization:
        conn.execute(_INSERT_UTIL, batch.utilization)
    if batch.checkpoints:
        t = now_utc()
        conn.execute(_INSERT_CKPT, [{**c, "created": t} for c in batch.checkpoints])
    upsert(conn, TrialRow.__table__, list(batch.trials.values()), ["experiment_id", "trial_id"])
    upsert(conn, AllocationRow.__table__, list(batch.allocations.values()),
           ["experiment_id", "idx"])
