"""``nbtune resume NAME``: continue an interrupted experiment from the command line.

:func:`nbtune.resumption.prepare_resume` rebuilds and replays the experiment first,
so every mistake (a finished experiment, a trainable that cannot be imported or
does not fit the runtime, an algorithm that replays differently) is reported
before a cluster starts; then a :class:`nbtune.console.ProgressPrinter`
subscribes to the replayed engine *before* the runtime starts, since the
simulator runs the whole rest of the experiment inside ``start``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from nbtune.cli.format import (
    cluster_text,
    outcome_rows,
    store_flag,
    store_label,
    table,
    utilization_row,
)
from nbtune.cli.usage import UsageError, find_experiment, open_existing_store

if TYPE_CHECKING:
    from nbtune.experiment import Experiment
    from nbtune.store.schema import ExperimentRow
    from nbtune.store.store import Store

__all__ = ["cmd_resume"]


def _import(ref: str, what: str) -> Any:
    from nbtune.store.serialize import import_ref

    try:
        return import_ref(ref)
    except ValueError as exc:
        raise UsageError(f"{what} {exc}") from None
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot import {what} {ref!r} ({exc}); pass --trainable "
                         "MODULE:NAME importable from here (check PYTHONPATH)") from None


def _trainable(row: ExperimentRow, given: str | None) -> Any:
    if given is not None:
        return _import(given, "--trainable")
    if row.trainable is None:
        raise UsageError(
            f"experiment {row.name!r} was tuned with a trainable that cannot be found by name "
            "(a workload model, or a function defined in a notebook or script): pass "
            "--trainable MODULE:NAME")
    return _import(row.trainable, "the recorded trainable")


def _make_runtime(kind: str, workers: int | None, plan: Any) -> Any:
    """The runtime to continue on; by default as many GPUs (or workers) as the engine last had."""
    from nbtune.build import make_runtime

    cluster = plan.engine.ledger.cluster
    if kind == "sim":
        default = cluster if cluster is not None else 4
        return make_runtime("sim", cluster=workers if workers is not None else default)
    n = workers if workers is not None else (cluster.n_gpus if cluster is not None else None)
    return make_runtime("dask", n_workers=n, threads_per_worker=1, dashboard_address=None,
                        warm_processes=1, sample_interval=0.5)


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}{'' if k == 1 else 's'}"


def cmd_resume(args: argparse.Namespace) -> int:
    """Run ``nbtune resume``; a :class:`UsageError` means exit code 2 (see :func:`nbtune.cli.usage.guard`)."""
    st = open_existing_store(args.store)
    try:
        return _resume(args, st)
    finally:
        st.close()


def _resume(args: argparse.Namespace, st: Store) -> int:
    from nbtune.build import check_trainable, ran_on, runtime_class
    from nbtune.console import ProgressPrinter
    from nbtune.core.trial import TrialState
    from nbtune.resumption import prepare_resume
    from nbtune.store import ExperimentFinishedError, ResumeError

    row = find_experiment(st, args.name)
    read = f"nbtune show {args.name}{store_flag(st, args.store)}"
    if row.state == "done":
        raise UsageError(f"experiment {args.name!r} already finished; read its results with "
                         f"{read} (--csv FILE for all of them)")
    trainable = _trainable(row, args.trainable)
    # the runtime it ran on, as nbtune.resume picks it
    kind = args.runtime or ran_on(row.runtime, trainable)
    try:
        check_trainable(trainable, runtime_class(kind))  # before a cluster starts
    except TypeError as exc:
        raise UsageError(str(exc)) from None
    wall = time.perf_counter()
    try:
        plan = prepare_resume(args.name, st, trainable)
    except ExperimentFinishedError:
        raise UsageError(f"experiment {args.name!r} had finished (its last events say so); "
                         f"read its results with {read}") from None
    except ResumeError as exc:
        raise UsageError(str(exc)) from None
    eng = plan.engine
    trials = eng.trials.values()
    ended = sum(t.state.is_terminal for t in trials)
    paused = sum(t.state is TrialState.PAUSED for t in trials)
    print(f"nbtune resume: experiment {args.name!r} from {store_label(st)}: replayed "
          f"{plan.batches} event batches to t={eng.time:,.1f} s; {_n(ended, 'trial')} ended, "
          f"{paused} paused, {len(eng.running)} were running and continue from their last "
          "recorded budget", flush=True)
    try:
        rt = _make_runtime(kind, args.workers, plan)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    progress = exp = None
    try:
        if rt.live_workers:
            rt.connect()  # the cluster's start-up is not the experiment's time
            print(f"cluster up after {time.perf_counter() - wall:.1f} s", flush=True)
        # subscribed before the runtime starts (the simulator runs it all inside start);
        # simulated runs print the simulator's clock (a wall clock would read 0.0 s throughout)
        progress = ProgressPrinter(eng, total=row.num_trials, catch_up=False,
                                   clock=(lambda: eng.time) if rt.virtual_clock else None)
        exp = plan.start(rt)
        exp.wait()
    except KeyboardInterrupt:
        print(f"nbtune resume: interrupted; the store keeps everything so far: run "
              f"nbtune resume {args.name}{store_flag(st, args.store)} again to continue",
              file=sys.stderr)
        return 130
    finally:
        if progress is not None:
            progress.close()
        if rt.live_workers:
            rt.close()
        if exp is not None and exp.recorder is not None:
            exp.recorder.close()  # flush: the store is complete when the summary prints
    wall = time.perf_counter() - wall
    _summary(exp, row, kind, st, wall)
    return 0 if exp.done else 1


def _summary(exp: Experiment, row: ExperimentRow, kind: str, st: Store, wall: float) -> None:
    where = cluster_text(exp.engine.cluster, kind)
    rows = [("job", f"{row.algorithm} resumed on {where}, allocator {row.allocator}"),
            *outcome_rows(exp)]
    rows += [
        ("makespan", f"{exp.makespan:,.1f} s " + ("simulated" if kind == "sim" else
                                                  "(measured, restarts included)")),
        utilization_row(exp, kind),
        ("store", f"{store_label(st)} (experiment {exp.name!r}, restart "
                  f"{exp.engine.restarts})"),
        ("wall time", f"{wall:.2f} s"),
    ]
    print(f"nbtune resume: experiment {exp.name!r} "
          + ("finished" if exp.done else "stopped before it finished"))
    table(rows, sys.stdout)
