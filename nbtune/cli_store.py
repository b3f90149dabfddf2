"""``nbtune ls``, ``nbtune show`` and ``nbtune resume``: the store from the command line.

This module holds the parsers, ``ls`` and ``show``; ``resume`` runs in
:mod:`nbtune.cli_resume`.

What ``optuna studies``/``optuna trials``/``optuna best-trial`` give Optuna users
and restoring a run gives Ray Tune users: list a store's experiments, read one
experiment's settings and trials without a notebook, and continue one after a
crash (:func:`nbtune.store.prepare_resume`) with the live progress lines of
``nbtune demo``. Mistakes a user can fix (no store there, an unknown name, a
finished experiment, a trainable that cannot be imported) fail before anything
runs, with exit code 2 and one line saying what to do. Heavy imports
(SQLAlchemy, pandas, the engine) happen inside the commands.
"""

from __future__ import annotations

import argparse
import functools
import math
import shlex
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["add_parsers", "UsageError", "open_existing_store", "find_experiment", "store_label",
           "store_flag", "stored_best"]

_STORE_HELP = ("the store: a SQLite file, its folder or an SQLAlchemy URL "
               "(default: ./nbtune-store/nbtune.db, where nbtune.tune(store=True) writes)")


class UsageError(Exception):
    """A mistake the user can fix: printed as ``nbtune CMD: error: ...``, exit code 2."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _count(text: str) -> int:
    """``--top``: 0 (all) or more."""
    return 0 if text.strip() == "0" else _positive_int(text)


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn a :class:`UsageError` into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except UsageError as exc:
            print(f"nbtune {args.command}: error: {exc}", file=sys.stderr)
            return 2

    return run


def add_parsers(sub: Any) -> None:
    """Register ``ls``, ``show`` and ``resume`` on the ``nbtune`` sub-parser set."""
    ls = sub.add_parser(
        "ls", help="list the experiments in a store",
        description="One line per experiment: name, state, trials ended/total, best metric "
        "value, algorithm, allocator and when it was created.")
    ls.add_argument("--store", default=None, help=_STORE_HELP)
    ls.set_defaults(func=_guard(_cmd_ls))

    show = sub.add_parser(
        "show", help="an experiment's settings, its best trials and its best trial",
        description="The experiment's settings, its trials sorted by the metric (best "
        "first) and the best trial; --csv writes every trial's results.")
    show.add_argument("name", help="the experiment's name (nbtune ls lists them)")
    show.add_argument("--store", default=None, help=_STORE_HELP)
    show.add_argument("--top", type=_count, default=10, metavar="K",
                      help="how many trials to list, best first (default 10; 0 lists all)")
    show.add_argument("--csv", default=None, metavar="FILE",
                      help="write every trial's results (config, state, metric, budget, "
                      "times) as CSV to FILE ('-': only the CSV, to standard output)")
    show.set_defaults(func=_guard(_cmd_show))

    res = sub.add_parser(
        "resume", help="continue an experiment that was interrupted (crash, dead kernel)",
        description="Replay the experiment's stored events, then continue it: completed "
        "trials are not rerun, trials that were running continue from their last "
        "checkpoint. Prints live progress and the outcome.")
    res.add_argument("name", help="the experiment's name (nbtune ls lists them)")
    res.add_argument("--store", default=None, help=_STORE_HELP)
    res.add_argument("--runtime", choices=("sim", "dask"), default=None,
                     help="where to run the rest (default: the runtime it ran on)")
    res.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                     help="simulated GPUs or local Dask workers (default: as many GPUs as "
                     "the experiment had)")
    res.add_argument("--trainable", default=None, metavar="MODULE:NAME",
                     help="the training function (dask) or workload model (sim) to import, "
                     "when the one it recorded cannot be found by name")
    res.set_defaults(func=_guard(_cmd_resume))


def _cmd_resume(args: argparse.Namespace) -> int:
    from nbtune.cli_resume import cmd_resume

    return cmd_resume(args)


# ---------------------------------------------------------------------- reading
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


def find_experiment(st: Any, name: str) -> Any:
    from nbtune.store import UnknownExperimentError

    try:
        return st.experiment(name)
    except UnknownExperimentError:
        known = st.names()
        raise UsageError(
            f"no experiment named {name!r} in {store_label(st)}; "
            + (f"known experiments: {', '.join(known)}" if known else "the store is empty")
        ) from None


def store_label(st: Any) -> str:
    return str(st.path) if st.path is not None else st.url.render_as_string(hide_password=True)


def store_flag(st: Any, spec: str | None) -> str:
    """The ``--store`` argument a user would type again ('' for the default store)."""
    return "" if spec is None else f" --store {shlex.quote(spec)}"


def stored_best(df: Any, metric: str, mode: str) -> Any:
    """The best stored trial (a results row) by :attr:`nbtune.Experiment.best`'s rule, or None.

    Only trials trained the furthest compete: a loss at budget 1 is not
    comparable to one at 81, so ``ls``, ``show`` and the live experiment agree.
    """
    if df.empty or metric not in df:
        return None
    scored = df[df[metric].notna()]
    if scored.empty:
        return None
    top = scored["budget_used"].max()
    full = scored[scored["budget_used"] >= top - 1e-9]
    pos = full[metric].idxmin() if mode == "min" else full[metric].idxmax()
    return full.loc[pos]


def _local_time(t: datetime | None) -> str:
    if t is None:
        return "-"
    if t.tzinfo is None:  # SQLite hands back the stored UTC time without its zone
        t = t.replace(tzinfo=UTC)
    return t.astimezone().strftime("%Y-%m-%d %H:%M")


def _trial_counts(df: Any, row: Any) -> str:
    """``ended/total``; ``+`` marks a total still growing (no num_trials, not finished)."""
    from nbtune.core.trial import TrialState

    ended = sum(TrialState(s).is_terminal for s in df["state"]) if not df.empty else 0
    if row.num_trials is not None:
        return f"{ended}/{row.num_trials}"
    return f"{ended}/{len(df)}" + ("" if row.state == "done" else "+")


def _columns(rows: list[list[str]], right: set[int], out: Any) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        print("  ".join(cells).rstrip(), file=out)


def _cmd_ls(args: argparse.Namespace) -> int:
    st = open_existing_store(args.store)
    try:
        names = st.names()
        if not names:
            print(f"no experiments in {store_label(st)}")
            return 0
        rows = [["NAME", "STATE", "TRIALS", "BEST", "ALGORITHM", "ALLOCATOR", "CREATED"]]
        unfinished = False
        for name in names:
            row = st.experiment(name)
            df = st.results(name)
            best = stored_best(df, row.metric, row.mode)
            shown = "-" if best is None else f"{row.metric} {float(best[row.metric]):.4f}"
            unfinished = unfinished or row.state != "done"
            rows.append([name, row.state, _trial_counts(df, row), shown, row.algorithm,
                         row.allocator, _local_time(row.created)])
        print(f"{len(names)} experiment{'s' if len(names) != 1 else ''} in {store_label(st)}")
        _columns(rows, {2}, sys.stdout)
        if unfinished:
            print("running = not finished: still running, or interrupted (continue it with "
                  f"nbtune resume NAME{store_flag(st, args.store)})")
        return 0
    finally:
        st.close()


def _options(opts: Any) -> str:
    from nbtune.store.serialize import from_jsonable

    if opts is None:
        return " (an instance: options not stored)"
    opts = from_jsonable(opts)
    if not opts:
        return ""
    return " (" + ", ".join(f"{k}={_fmt(v)}" for k, v in opts.items()) + ")"


def _fmt(v: Any) -> str:
    from nbtune.cli import _fmt_value

    return _fmt_value(v)


def _space(space: dict[str, Any]) -> str:
    parts = []
    for name, d in space.items():
        kind = d.get("type")
        if kind in ("choice", "grid"):
            parts.append(f"{name}={kind}({', '.join(_fmt(o) for o in d['options'])})")
        elif kind == "const":
            parts.append(f"{name}={_fmt(d['value'])}")
        else:
            params = ", ".join(_fmt(v) for k, v in d.items() if k != "type")
            parts.append(f"{name}={kind}({params})")
    return "; ".join(parts)


def _config(r: Any, cols: list[str]) -> str:
    return ", ".join(f"{c.removeprefix('config/')}={_fmt(r[c])}" for c in cols
                     if not (isinstance(r[c], float) and math.isnan(r[c])))


def _cmd_show(args: argparse.Namespace) -> int:
    from nbtune.cli import _table

    csv = None if args.csv in (None, "-") else Path(args.csv).expanduser()
    if csv is not None and not csv.parent.is_dir():  # fail before printing anything
        raise UsageError(f"--csv {args.csv}: the folder {csv.parent} does not exist")
    st = open_existing_store(args.store)
    try:
        row = find_experiment(st, args.name)
        df = st.results(args.name)
    finally:
        st.close()
    if args.csv == "-":  # only the CSV, so it pipes into other tools
        df.to_csv(sys.stdout, index=False)
        return 0
    metric = row.metric
    states = df["state"].value_counts().to_dict() if not df.empty else {}
    state = row.state + (f" ({row.restarts} restart{'s' if row.restarts != 1 else ''})"
                         if row.restarts else "")
    total = "" if row.num_trials is None else f" of {row.num_trials}"
    settings = [
        ("state", state),
        ("algorithm", row.algorithm + _options(row.algorithm_options)),
        ("allocator", row.allocator + _options(row.allocator_options)),
        ("metric", f"{metric} ({'lower' if row.mode == 'min' else 'higher'} is better)"),
        ("budget", f"max {row.max_budget:g}, min {row.min_budget:g}"),
        ("trials", f"{len(df)}{total} (" + ", ".join(f"{n} {s}" for s, n in
                                                     sorted(states.items())) + ")"),
        ("seed", "none" if row.seed is None else str(row.seed)),
        ("space", _space(row.space)),
        ("trainable", row.trainable or "not importable by name (resume needs --trainable)"),
        ("runtime", f"{row.runtime or '?'}; experiment clock {row.time:,.1f} s"),
        ("created", f"{_local_time(row.created)}; last write {_local_time(row.updated)}"),
    ]
    print(f"experiment {args.name!r} in {store_label(st)}")
    _table(settings, sys.stdout)
    if df.empty:
        print("no trials yet")
    else:
        cfg = [c for c in df.columns if c.startswith("config/")]
        ranked = df.sort_values([metric, "trial_id"], ascending=[row.mode == "min", True],
                                na_position="last", kind="stable")
        shown = ranked if args.top == 0 else ranked.head(args.top)
        head = "all" if len(shown) == len(df) else f"top {len(shown)} of {len(df)}"
        print(f"trials by {metric}, best first ({head}):")
        rows = [["TRIAL", "STATE", "BUDGET", metric.upper(), "CONFIG"]]
        for _, r in shown.iterrows():
            value = r[metric]
            rows.append([str(int(r["trial_id"])), str(r["state"]), f"{r['budget_used']:g}",
                         "-" if value is None or math.isnan(value) else f"{value:.4f}",
                         _config(r, cfg)])
        _columns(rows, {0, 2, 3}, sys.stdout)
        best = stored_best(df, metric, row.mode)
        if best is None:
            print(f"best trial: none (no trial reported {metric})")
        else:
            print(f"best trial {int(best['trial_id'])}: {metric} {float(best[metric]):.4f} at "
                  f"budget {best['budget_used']:g} ({best['state']}); {_config(best, cfg)}")
    if csv is not None:
        try:
            df.to_csv(csv, index=False)
        except OSError as exc:
            raise UsageError(f"--csv {args.csv}: cannot write it ({exc.strerror})") from None
        print(f"wrote {len(df)} trials to {csv}")
    return 0
