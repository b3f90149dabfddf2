"""``nbtune ls`` and ``nbtune show``: a store's experiments from the command line.

``resume`` runs in :mod:`nbtune.cli.resume_command`; the parsers are built in
:mod:`nbtune.cli`, the printing done by :mod:`nbtune.cli.format`.

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
import math
import sys
from pathlib import Path
from typing import Any

from nbtune.cli.format import (
    cluster_text,
    columns,
    config_text,
    local_time,
    options_text,
    space_text,
    store_flag,
    store_label,
    table,
)
from nbtune.cli.usage import UsageError, find_experiment, open_existing_store

__all__ = ["cmd_ls", "cmd_show", "stored_best"]


def stored_best(df: Any, metric: str, mode: str) -> Any:
    """The best stored trial (a results row) by :mod:`nbtune.core.best`'s rule, or None."""
    from nbtune.core.best import best_index

    if df.empty or metric not in df:
        return None
    i = best_index(zip(df[metric], df["budget_used"], strict=True), mode)
    return None if i is None else df.iloc[i]


def _trial_counts(df: Any, row: Any) -> str:
    """``ended/total``; ``+`` marks a total still growing (no num_trials, not finished)."""
    from nbtune.core.trial import ended_of_total

    return ended_of_total([] if df.empty else df["state"], row.num_trials, row.state == "done")


def cmd_ls(args: argparse.Namespace) -> int:
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
                         row.allocator, local_time(row.created)])
        print(f"{len(names)} experiment{'s' if len(names) != 1 else ''} in {store_label(st)}")
        columns(rows, {2}, sys.stdout)
        if unfinished:
            print("running = not finished: still running, or interrupted (continue it with "
                  f"nbtune resume NAME{store_flag(st, args.store)})")
        return 0
    finally:
        st.close()


def cmd_show(args: argparse.Namespace) -> int:
    csv = None if args.csv in (None, "-") else Path(args.csv).expanduser()
    if csv is not None and not csv.parent.is_dir():  # fail before printing anything
        raise UsageError(f"--csv {args.csv}: the folder {csv.parent} does not exist")
    st = open_existing_store(args.store)
    try:
        row = find_experiment(st, args.name)
        df = st.results(args.name)
        cluster = st.cluster(args.name)
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
        ("algorithm", row.algorithm + options_text(row.algorithm_options)),
        ("allocator", row.allocator + options_text(row.allocator_options)),
        ("metric", f"{metric} ({'lower' if row.mode == 'min' else 'higher'} is better)"),
        ("budget", f"max {row.max_budget:g}, min {row.min_budget:g}"),
        ("trials", f"{len(df)}{total} (" + ", ".join(f"{n} {s}" for s, n in
                                                     sorted(states.items())) + ")"),
        ("seed", "none" if row.seed is None else str(row.seed)),
        ("space", space_text(row.space)),
        ("trainable", row.trainable or "not importable by name (resume needs --trainable)"),
        ("runtime", f"{row.runtime or '?'}; experiment clock {row.time:,.1f} s"),
        ("runs on", cluster_text(cluster)),
        ("created", f"{local_time(row.created)}; last write {local_time(row.updated)}"),
    ]
    print(f"experiment {args.name!r} in {store_label(st)}")
    table(settings, sys.stdout)
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
                         config_text(r, cfg)])
        columns(rows, {0, 2, 3}, sys.stdout)
        best = stored_best(df, metric, row.mode)
        if best is None:
            print(f"best trial: none (no trial reported {metric})")
        else:
            print(f"best trial {int(best['trial_id'])}: {metric} {float(best[metric]):.4f} at "
                  f"budget {best['budget_used']:g} ({best['state']}); {config_text(best, cfg)}")
    if csv is not None:
        try:
            df.to_csv(csv, index=False)
        except OSError as exc:
            raise UsageError(f"--csv {args.csv}: cannot write it ({exc.strerror})") from None
        print(f"wrote {len(df)} trials to {csv}")
    return 0
