"""The ``nbtune`` command line.

``nbtune demo`` tunes a simulated job with Hyperband on the discrete-event
simulator and prints a summary; ``nbtune version`` prints the version.
Heavy imports (pandas, the engine) happen inside the commands, so ``--help``
and ``version`` stay fast.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

__all__ = ["main", "build_parser"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nbtune")
    except PackageNotFoundError:  # running from a checkout that is not installed
        from nbtune import __version__

        return __version__


def _number(text: str) -> int | float:
    """A budget: kept an int when it is one (rung arithmetic rounds integral budgets)."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return int(value) if value.is_integer() else value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nbtune",
        description="Resource-aware hyperparameter tuning: water-filling and knapsack GPU "
        "scheduling on Dask, with a discrete-event simulator.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="tune a simulated job on the simulator and print a summary",
        description="Run a simulated Hyperband job through nbtune.tune() on the "
        "discrete-event simulator (no GPU needed) and print a summary table.",
    )
    demo.add_argument("--gpus", type=int, default=4, help="simulated GPUs (default: 4)")
    demo.add_argument("--algorithm", default="hyperband", help="tuning algorithm (default: hyperband)")
    demo.add_argument("--allocator", default="fifo", help="GPU allocator (default: fifo)")
    demo.add_argument(
        "--max-budget", type=_number, default=27, help="budget of a fully trained trial (default: 27)"
    )
    demo.add_argument(
        "--trials", type=int, default=None, help="number of trials (default: the algorithm's own)"
    )
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    demo.set_defaults(func=_cmd_demo)

    ver = sub.add_parser("version", help="print nbtune's version")
    ver.set_defaults(func=_cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nbtune`` script and ``python -m nbtune``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


# --------------------------------------------------------------------- version
def _cmd_version(args: argparse.Namespace) -> int:
    print(f"nbtune {_version()} (Python {sys.version.split()[0]})")
    return 0


# ------------------------------------------------------------------------ demo
def demo_workload(seed: int = 0, max_budget: float = 27) -> tuple[Any, dict[str, Any]]:
    """The simulated job ``nbtune demo`` tunes: a small CNN-like model.

    Bigger batches take longer per budget unit but use more of a GPU; small
    ones leave most of a whole GPU idle, which is what packing recovers.
    """
    from nbtune import choice, loguniform, uniform
    from nbtune.core.resources import Demand
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


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _per_gpu_utilization(exp: Any) -> dict[int, float]:
    """Time-weighted utilization of each GPU over the makespan (0 for GPUs never used)."""
    span = float(exp.makespan)
    ids = [g.gpu_id for g in exp.engine.cluster.gpus]
    out = {g: 0.0 for g in ids}
    u = exp.utilization()
    if span <= 0 or u.empty:
        return out
    for g, rows in u.groupby("gpu_id"):
        times = [float(t) for t in rows["time"]] + [span]
        vals = [float(v) for v in rows["util"]]
        busy = sum(
            v * max(min(times[i + 1], span) - min(times[i], span), 0.0) for i, v in enumerate(vals)
        )
        out[int(g)] = busy / span
    return out


def _table(rows: Sequence[tuple[str, str]], out: TextIO) -> None:
    width = max(len(k) for k, _ in rows)
    rule = "-" * min(78, width + 2 + max(len(v) for _, v in rows))
    print(rule, file=out)
    for k, v in rows:
        print(f"{k:<{width}}  {v}", file=out)
    print(rule, file=out)


def _cmd_demo(args: argparse.Namespace) -> int:
    import nbtune  # lazy: keeps `nbtune --help` and `nbtune version` fast
    from nbtune.runtimes import SimRuntime

    workload, space = demo_workload(seed=args.seed, max_budget=args.max_budget)
    wall = time.perf_counter()
    try:
        exp = nbtune.tune(
            workload, space,
            algorithm=args.algorithm, metric="loss", mode="min",
            max_budget=args.max_budget, num_trials=args.trials,
            allocator=args.allocator, runtime=SimRuntime(cluster=args.gpus),
            name="demo", seed=args.seed,
        )
    except ValueError as exc:  # a bad option (unknown algorithm or allocator, bad budget)
        print(f"nbtune demo: error: {exc}", file=sys.stderr)
        return 2
    exp.wait()
    wall = time.perf_counter() - wall

    df = exp.results()
    states = df["state"].value_counts().to_dict() if not df.empty else {}
    best = exp.best
    util = _per_gpu_utilization(exp)
    mean_util = sum(util.values()) / len(util) if util else 0.0

    rows: list[tuple[str, str]] = [
        ("job", f"simulated {args.algorithm}, {args.gpus} GPUs, allocator {args.allocator}"),
        ("trials", f"{len(df)} (" + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) + ")"),
    ]
    if best is not None:
        rows += [
            (f"best {exp.metric}",
             f"{best[exp.metric]:.4f} (trial {best['trial_id']}, budget {best['budget_used']:g})"),
            ("best config", ", ".join(f"{k}={_fmt_value(v)}" for k, v in best["config"].items())),
        ]
    else:
        rows.append((f"best {exp.metric}", "none (no trial reported)"))
    if len(util) <= 8:
        spread = "per GPU " + " ".join(f"{g}:{u:.0%}" for g, u in sorted(util.items()))
    else:
        spread = f"min {min(util.values()):.0%}, max {max(util.values()):.0%}"
    rows += [
        ("makespan", f"{exp.makespan:,.1f} s simulated"),
        ("GPU utilization", f"mean {mean_util:.1%}; {spread}"),
        ("wall time", f"{wall:.2f} s"),
    ]
    print("nbtune demo: a simulated tuning job on the discrete-event simulator (no GPU needed)")
    _table(rows, sys.stdout)
    return 0
