"""Mistakes a user can fix: argument types, the one-line error guard, a store that must exist.

A :class:`UsageError` fails a command before anything runs, with exit code 2
and one line saying what to do.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbtune.cli.format import store_label

if TYPE_CHECKING:
    from nbtune.store.schema import ExperimentRow
    from nbtune.store.store import Store

__all__ = ["UsageError", "guard", "positive_int", "count", "number", "STORE_HELP",
           "open_existing_store", "find_experiment"]

STORE_HELP = ("the store: a SQLite file, its folder or an SQLAlchemy URL "
              "(default: ./nbtune-store/nbtune.db, where nbtune.tune(store=True) writes)")


class UsageError(Exception):
    """A mistake the user can fix: printed as ``nbtune CMD: error: ...``, exit code 2."""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def count(text: str) -> int:
    """``--top``: 0 (all) or more."""
    return 0 if text.strip() == "0" else positive_int(text)


def guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn a :class:`UsageError` into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except UsageError as exc:
            print(f"nbtune {args.command}: error: {exc}", file=sys.stderr)
            return 2

    return run


def number(text: str) -> int | float:
    """A budget: kept an int when it is one (rung arithmetic rounds integral budgets)."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return int(value) if value.is_integer() else value


def open_existing_store(spec: str | None) -> Any:
    """The :class:`nbtune.store.Store` at ``spec``, which must exist and hold nbtune's tables.

    ``Store(...)`` creates whatever is missing, which is right for ``tune`` but
    would leave an empty database behind a typo here: so the file must exist
    and have an ``experiments`` table before it is opened.
    """
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from nbtune.store import DEFAULT_DIR, DEFAULT_FILE, Store

    if spec is not None and not spec.strip():
        raise UsageError("--store must not be empty")
    text = spec if spec is not None else str(Path.cwd() / DEFAULT_DIR / DEFAULT_FILE)
    hint = "" if spec is not None else " (the default store; pass --store PATH|URL)"
    if "://" in text:
        try:
            url = make_url(text)
        except ArgumentError as exc:
            raise UsageError(f"--store {text!r} is not a valid SQLAlchemy URL: {exc}") from None
        shown = url.render_as_string(hide_password=True)
        if url.get_backend_name() == "sqlite":
            if url.database in (None, "", ":memory:"):
                raise UsageError("an in-memory SQLite database keeps nothing between processes: "
                                 "pass the store's file")
            if not Path(url.database).expanduser().is_file():
                raise UsageError(f"no nbtune store at {url.database}: no such file")
    else:
        path = Path(text).expanduser()
        if path.is_dir():
            path = path / DEFAULT_FILE
        if not path.is_file():
            raise UsageError(f"no nbtune store at {path}{hint}: no such file; "
                             "nbtune.tune(..., store=...) creates one")
        text = shown = str(path)
        url = make_url(f"sqlite:///{path.resolve()}")
    try:
        probe = create_engine(url)
        try:
            found = inspect(probe).has_table("experiments")
        finally:
            probe.dispose()
    except (SQLAlchemyError, ImportError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot open the store {shown}: {first}") from None
    if not found:
        raise UsageError(f"{shown} is not an nbtune store (it has no experiments table)")
    return Store(text)


def find_experiment(st: Store, name: str) -> ExperimentRow:
    from nbtune.store import UnknownExperimentError

    try:
        return st.experiment(name)
    except UnknownExperimentError:
        known = st.names()
        raise UsageError(
            f"no experiment named {name!r} in {store_label(st)}; "
            + (f"known experiments: {', '.join(known)}" if known else "the store is empty")
        ) from None
