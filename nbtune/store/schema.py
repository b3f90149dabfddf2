"""The store's tables (SQLAlchemy 2.0 ORM), the same on SQLite and PostgreSQL.

``events`` is the source of truth: every batch of events the engine handled,
in order, so :mod:`nbtune.store.resume` can replay an experiment exactly.
``trials``, ``metrics``, ``allocations`` and ``utilization`` are views of the
same history kept for reading results without replaying (dashboards, another
kernel, ``nbtune.Store(...).results(name)``). Checkpoints are *references*
(a path under the store directory or an fsspec URL), never the bytes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Base",
    "ExperimentRow",
    "EventRow",
    "TrialRow",
    "MetricRow",
    "CheckpointRow",
    "UtilizationRow",
    "AllocationRow",
    "ProfileRow",
    "SchemaInfoRow",
    "SCHEMA_VERSION",
]

#: bumped when a table changes shape (with a step in :mod:`nbtune.store.migrations`); the
#: store's version is in ``schema_info``, each experiment's in ``experiments.schema_version``
SCHEMA_VERSION = 4


class Base(DeclarativeBase):
    pass


def _fk() -> Any:
    return ForeignKey("experiments.id", ondelete="CASCADE")


class ExperimentRow(Base):
    """One tuning job and everything needed to rebuild its algorithm and allocator."""

    __tablename__ = "experiments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True, nullable=False)
    algorithm: Mapped[str] = mapped_column(String(200), nullable=False)
    #: constructor options; NULL when the user passed an instance (resume needs ``algorithm=``)
    algorithm_options: Mapped[Any | None] = mapped_column(JSON, nullable=True)
    allocator: Mapped[str] = mapped_column(String(200), nullable=False)
    allocator_options: Mapped[Any | None] = mapped_column(JSON, nullable=True)
    metric: Mapped[str] = mapped_column(String(200), nullable=False)
    mode: Mapped[str] = mapped_column(String(8), nullable=False)
    max_budget: Mapped[float] = mapped_column(Float, nullable=False)
    min_budget: Mapped[float] = mapped_column(Float, nullable=False, default=1.0)
    num_trials: Mapped[int | None] = mapped_column(Integer, nullable=True)
    seed: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_failures: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    space: Mapped[Any] = mapped_column(JSON, nullable=False)
    #: "module:qualname" of an importable training function, so resume can find it
    trainable: Mapped[str | None] = mapped_column(String(500), nullable=True)
    runtime: Mapped[str] = mapped_column(String(100), nullable=False, default="")
    #: ``tune(..., fusion=...)``'s settings (:meth:`FusionBinder.settings`), so a resumed run
    #: fuses as the first one did; NULL when fusion was off (version 4)
    fusion: Mapped[Any | None] = mapped_column(JSON, nullable=True)
    #: what ``tune`` wrapped round the algorithm, so resume wraps it again: Hydro's
    #: ``{"scaling": S, "eager_fraction": f}``; NULL for a plain run
    run_options: Mapped[Any | None] = mapped_column(JSON, nullable=True)
    #: running | done
    state: Mapped[str] = mapped_column(String(20), nullable=False, default="running")
    restarts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    time: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    schema_version: Mapped[int] = mapped_column(Integer, nullable=False, default=SCHEMA_VERSION)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    updated: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class EventRow(Base):
    """One event the engine handled; ``batch`` groups the events of one ``handle`` call."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_exp_seq", "experiment_id", "seq", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[int] = mapped_column(_fk(), nullable=False)
    seq: Mapped[int] = mapped_column(Integer, nullable=False)
    batch: Mapped[int] = mapped_column(Integer, nullable=False)
    time: Mapped[float] = mapped_column(Float, nullable=False)
    kind: Mapped[str] = mapped_column(String(64), nullable=False)
    payload: Mapped[Any] = mapped_column(JSON, nullable=False)


class SchemaInfoRow(Base):
    """The one row saying which schema version the store's tables have (since version 2)."""

    __tablename__ = "schema_info"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    updated: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class TrialRow(Base):
    """A trial's latest state (what ``Experiment.results()`` shows)."""

    __tablename__ = "trials"
    #: version 2: dashboards list an experiment's running trials without a scan
    __table_args__ = (Index("ix_trials_exp_state", "experiment_id", "state"),)

    experiment_id: Mapped[int] = mapped_column(_fk(), primary_key=True)
    trial_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    config: Mapped[Any] = mapped_column(JSON, nullable=False)
    state: Mapped[str] = mapped_column(String(20), nullable=False)
    best: Mapped[float | None] = mapped_column(Float, nullable=True)
    last: Mapped[float | None] = mapped_column(Float, nullable=True)
    budget_used: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    target_budget: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    gpu_seconds: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    start: Mapped[float | None] = mapped_column(Float, nullable=True)
    end: Mapped[float | None] = mapped_column(Float, nullable=True)
    failures: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    group_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: the fused unit it last ran in (``tune(..., fusion=F)``), shown as ``group``
    unit: Mapped[int | None] = mapped_column(Integer, nullable=True)
    checkpoint: Mapped[str | None] = mapped_column(Text, nullable=True)


class MetricRow(Base):
    """One report: a trial measured ``metrics`` after ``budget`` units at ``time``."""

    __tablename__ = "metrics"
    __table_args__ = (Index("ix_metrics_exp_trial", "experiment_id", "trial_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[int] = mapped_column(_fk(), nullable=False)
    trial_id: Mapped[int] = mapped_column(Integer, nullable=False)
    time: Mapped[float] = mapped_column(Float, nullable=False)
    budget: Mapped[float] = mapped_column(Float, nullable=False)
    metrics: Mapped[Any] = mapped_column(JSON, nullable=False)


class CheckpointRow(Base):
    """Where a trial's checkpoint at ``budget`` lives (a path or fsspec URL)."""

    __tablename__ = "checkpoints"
    __table_args__ = (Index("ix_ckpt_exp_trial", "experiment_id", "trial_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[int] = mapped_column(_fk(), nullable=False)
    trial_id: Mapped[int] = mapped_column(Integer, nullable=False)
    budget: Mapped[float] = mapped_column(Float, nullable=False)
    uri: Mapped[str] = mapped_column(Text, nullable=False)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class UtilizationRow(Base):
    __tablename__ = "utilization"
    __table_args__ = (Index("ix_util_exp", "experiment_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[int] = mapped_column(_fk(), nullable=False)
    time: Mapped[float] = mapped_column(Float, nullable=False)
    gpu_id: Mapped[int] = mapped_column(Integer, nullable=False)
    util: Mapped[float] = mapped_column(Float, nullable=False)
    memory_gb: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)


class AllocationRow(Base):
    """``engine.ledger.log[idx]``: a trial held ``share`` of a GPU from ``start`` to ``end``."""

    __tablename__ = "allocations"

    experiment_id: Mapped[int] = mapped_column(_fk(), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(Integer, nullable=False)
    gpu_id: Mapped[int] = mapped_column(Integer, nullable=False)
    share: Mapped[float] = mapped_column(Float, nullable=False)
    start: Mapped[float] = mapped_column(Float, nullable=False)
    end: Mapped[float | None] = mapped_column(Float, nullable=True)


class ProfileRow(Base):
    """A profiling job's result, keyed by the workload signature it measured."""

    __tablename__ = "profiles"

    signature: Mapped[str] = mapped_column(String(500), primary_key=True)
    profile: Mapped[Any] = mapped_column(JSON, nullable=False)
    updated: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
