"""Schema versions of a store and the steps between them, run when a store is opened.

A store written by an older nbtune is brought up to :data:`SCHEMA_VERSION`
by idempotent steps, the new version recorded last (a crash mid-way leaves a
store that the next open upgrades again), so an upgrade never strands a
user's experiments; one written by a newer nbtune is
refused with what to do, rather than read wrongly. Version 1 is every store
made before ``schema_info`` existed (its tables say which it is).

To change a table: bump ``SCHEMA_VERSION`` in :mod:`.schema`, change the ORM
class, and add the step ``MIGRATIONS[old_version]`` that alters an existing
database the same way (``create_all`` only ever adds missing tables).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Engine, delete, insert, inspect, select, text
from sqlalchemy.engine import Connection

from nbtune.store.batch import now_utc
from nbtune.store.schema import SCHEMA_VERSION, Base, SchemaInfoRow, TrialRow

__all__ = ["MIGRATIONS", "StoreVersionError", "migrate", "stored_version"]


class StoreVersionError(RuntimeError):
    """The store was written by a newer nbtune than this one."""


def _v1_to_v2(conn: Connection) -> None:
    """Version 2 added ``schema_info`` (made by ``create_all``) and an index on trials' states."""
    for index in TrialRow.__table__.indexes:
        index.create(conn, checkfirst=True)


def _v2_to_v3(conn: Connection) -> None:
    """Version 3 added ``trials.unit``: the fused unit a trial ran in (``fusion=F``)."""
    if "unit" not in {c["name"] for c in inspect(conn).get_columns("trials")}:
        conn.execute(text("ALTER TABLE trials ADD COLUMN unit INTEGER"))


def _v3_to_v4(conn: Connection) -> None:
    """Version 4 added ``experiments.fusion`` (the ``fusion=`` settings resume fuses with)
    and ``experiments.run_options`` (``tune(scaling=S)``, for resume)."""
    have = {c["name"] for c in inspect(conn).get_columns("experiments")}
    for col in ("fusion", "run_options"):
        if col not in have:
            conn.execute(text(f"ALTER TABLE experiments ADD COLUMN {col} JSON"))


#: ``MIGRATIONS[v](conn)`` turns a version-``v`` database into version ``v + 1``
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1_to_v2, 2: _v2_to_v3,
                                                       3: _v3_to_v4}


def stored_version(conn: Connection) -> int | None:
    """The database's schema version; None for an empty database (a new store)."""
    tables = set(inspect(conn).get_table_names())
    if "schema_info" in tables:
        version = conn.scalar(select(SchemaInfoRow.version).where(SchemaInfoRow.id == 1))
        if version is not None:
            return int(version)
    return 1 if "experiments" in tables else None


def migrate(engine: Engine) -> int:
    """Create a new store's tables, or upgrade an old one's; return the version it had.

    One transaction where the database allows DDL in one (PostgreSQL); on
    SQLite the steps are idempotent (``checkfirst``) and the version row is
    written last, so a kill mid-upgrade is finished by the next open.
    """
    with engine.connect() as conn:  # the usual open: up to date, nothing to lock
        found = stored_version(conn)
    if found == SCHEMA_VERSION:
        return found
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            # pysqlite runs DDL outside any transaction: two processes opening a new
            # store at once (a notebook and the lab extension) would both see no tables
            # and the second CREATE TABLE fail. A write lock taken first serializes the
            # check with the creation; the other opener waits (busy_timeout), then finds
            # the tables made.
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        found = stored_version(conn)
        if found is not None and found > SCHEMA_VERSION:
            raise StoreVersionError(
                f"the store {engine.url.render_as_string()!r} has schema version {found}, "
                f"written by a newer nbtune; this one reads up to version {SCHEMA_VERSION}: "
                "upgrade nbtune (pip install -U nbtune) to open it")
        Base.metadata.create_all(conn)  # new tables (and a new store's everything)
        for v in range(found or SCHEMA_VERSION, SCHEMA_VERSION):
            MIGRATIONS[v](conn)
        if found != SCHEMA_VERSION:
            conn.execute(delete(SchemaInfoRow))
            conn.execute(insert(SchemaInfoRow).values(id=1, version=SCHEMA_VERSION,
                                                      updated=now_utc()))
    return SCHEMA_VERSION if found is None else found
