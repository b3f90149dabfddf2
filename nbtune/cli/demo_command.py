"""``nbtune demo``: a real tuning job on a local Dask cluster, or (``--sim``) a simulated one.

The real job is :func:`nbtune.demo.run_demo`; the simulated one tunes
:func:`demo_workload` with Hyperband on the discrete-event simulator. The real job's
flags are checked here, before anything starts, so that an error names the flag as the
user typed it; the library function takes plain arguments and checks them by their own
names.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbtune.cli.format import cluster_text, outcome_rows, table, utilization_row

__all__ = ["cmd_demo", "demo_workload"]


def demo_workload(seed: int = 0, max_budget: float = 27) -> tuple[Any, dict[str, Any]]:
    """The simulated job ``nbtune demo`` tunes: a small CNN-like model.

    Bigger batches take longer per budget unit but use more of a GPU; small
    ones leave most of a whole GPU idle, which is what packing recovers.
    """
    from nbtune.core.resources import Demand
    from nbtune.core.space import choice, loguniform, uniform
    from nbtune.workloads import SyntheticWorkload

    space = {
        "lr": loguniform(1e-4, 1e-1),
        "batch_size": choice([32, 64, 128, 256]),
        "dropout": uniform(0.0, 0.5),
    }

    def unit_time(cfg: Mapping[str, Any]) -> float:
        return 2.0 + cfg["batch_size"] / 32.0

    def demand(cfg: Mapping[str, Any]) -> Demand:
        return Demand(compute=min(1.0, 0.2 + cfg["batch_size"] / 320.0),
                      memory_gb=1.0 + cfg["batch_size"] / 64.0, cpus=2.0)

    workload = SyntheticWorkload(
        space, metric="loss", unit_time=unit_time, alpha=1.1, beta=1.1, demand=demand,
        launch_overhead=5.0, max_budget_hint=max_budget, seed=seed,
    )
    return workload, space


def cmd_demo(args: argparse.Namespace) -> int:
    if args.sim:
        args.gpus = 4 if args.gpus is None else args.gpus
        args.algorithm = args.algorithm or "hyperband"
        args.allocator = args.allocator or "fifo"
        args.max_budget = 27 if args.max_budget is None else args.max_budget
        return _cmd_demo_sim(args)
    return _cmd_demo_real(args)


def _real_demo_options(args: argparse.Namespace) -> dict[str, Any]:
    """``run_demo``'s arguments from the command line's flags, with the real demo's defaults."""
    return {
        "trials": 48 if args.trials is None else args.trials,
        "max_budget": 27 if args.max_budget is None else args.max_budget,
        "workers": 2 if args.gpus is None else args.gpus,
        "algorithm": args.algorithm or "asha", "allocator": args.allocator or "waterfill",
        "seed": args.seed, "store": args.store, "report": args.report,
    }


def _real_demo_flag_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the real demo's flags, named as the user wrote them, or None.

    Checked before anything starts (no store is opened, no cluster started), so a typo
    costs nothing; :func:`nbtune.demo.run_demo` checks the same values again by its
    own parameter names, for callers that are not the command line.
    """
    from nbtune.algorithms import ALGORITHMS
    from nbtune.allocators import ALLOCATORS

    for flag in ("store", "report"):
        value = getattr(args, flag)
        if value is not None and not str(value).strip():
            return f"--{flag} must not be empty"
    opts = _real_demo_options(args)
    if opts["workers"] < 1:
        return f"--gpus (local workers) must be >= 1, got {opts['workers']}"
    if opts["trials"] < 1:
        return f"--trials must be >= 1, got {opts['trials']}"
    if opts["algorithm"] not in ALGORITHMS:
        return (f"--algorithm {opts['algorithm']!r} is unknown; choose one of "
                f"{sorted(ALGORITHMS)}")
    if opts["allocator"] not in ALLOCATORS:
        return (f"--allocator {opts['allocator']!r} is unknown; choose one of "
                f"{sorted(ALLOCATORS)}")
    if args.report is not None and Path(args.report).suffix.lower() not in (".html", ".htm"):
        return f"--report must name an .html file, got {str(Path(args.report))!r}"
    return None


def _cmd_demo_real(args: argparse.Namespace) -> int:
    problem = _real_demo_flag_error(args)
    if problem is not None:
        print(f"nbtune demo: error: {problem}", file=sys.stderr)
        return 2
    from nbtune.demo import run_demo  # lazy: Dask and torch when it runs

    try:
        res = run_demo(**_real_demo_options(args), out=sys.stdout)
    except ValueError as exc:  # a bad option tune() refuses (a bad budget)
        print(f"nbtune demo: error: {exc}", file=sys.stderr)
        return 2
    exp = res.experiment
    best = exp.best
    rows = [("job", f"{exp.engine.algorithm.name} on digits (CNN), "
                    f"{cluster_text(exp.engine.cluster, 'dask')}, "
                    f"allocator {exp.engine.allocator.name}"),
            *outcome_rows(exp)]
    rows += [
        ("makespan", f"{exp.makespan:,.1f} s measured"),
        utilization_row(exp, "dask"),
        ("store", f"{res.store_path} (experiment {exp.name!r})"),
        ("report", str(res.report_path)),
        ("wall time", f"{res.wall:.1f} s (cluster start-up included)"),
    ]
    print("nbtune demo: a real tuning job on a local Dask cluster")
    table(rows, sys.stdout)
    return 0 if best is not None else 1


def _cmd_demo_sim(args: argparse.Namespace) -> int:
    from nbtune.api import tune  # lazy: keeps `nbtune --help` and `nbtune version` fast
    from nbtune.build import make_runtime

    workload, space = demo_workload(seed=args.seed, max_budget=args.max_budget)
    wall = time.perf_counter()
    try:
        exp = tune(
            workload, space,
            algorithm=args.algorithm, metric="loss", mode="min",
            max_budget=args.max_budget, num_trials=args.trials,
            allocator=args.allocator, runtime=make_runtime("sim", cluster=args.gpus),
            name="demo", seed=args.seed,
        )
    except ValueError as exc:  # a bad option (unknown algorithm or allocator, bad budget)
        print(f"nbtune demo: error: {exc}", file=sys.stderr)
        return 2
    exp.wait()
    wall = time.perf_counter() - wall

    rows = [("job", f"simulated {args.algorithm}, {args.gpus} GPUs, allocator {args.allocator}"),
            *outcome_rows(exp)]
    rows += [
        ("makespan", f"{exp.makespan:,.1f} s simulated"),
        utilization_row(exp, "sim"),
        ("wall time", f"{wall:.2f} s"),
    ]
    print("nbtune demo: a simulated tuning job on the discrete-event simulator (no GPU needed)")
    table(rows, sys.stdout)
    return 0
