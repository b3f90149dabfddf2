"""The ``nbtune`` command line.

``nbtune demo`` runs a real tuning job on a local Dask cluster (a small CNN
on scikit-learn's digits, ASHA, water-filling; see :mod:`nbtune.demo`);
``nbtune demo --sim`` tunes a simulated job with Hyperband on the
discrete-event simulator instead; ``nbtune ls``, ``nbtune show`` and
``nbtune resume`` read and continue the experiments of a store
(:mod:`nbtune.cli_store`); ``nbtune version`` prints the version.
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
        help="run a real tuning job on a local Dask cluster (--sim: on the simulator)",
        description="Tune a small CNN on scikit-learn's digits with ASHA and the water-filling "
        "allocator on a local Dask cluster: live progress, results in SQLite, an HTML report. "
        "With --sim, run a simulated Hyperband job on the discrete-event simulator instead.",
    )
    demo.add_argument("--sim", action="store_true",
                      help="run the simulated job on the discrete-event simulator")
    demo.add_argument("--gpus", type=int, default=None,
                      help="GPUs: local Dask workers (default 2) or simulated GPUs (default 4)")
    demo.add_argument("--algorithm", default=None,
                      help="tuning algorithm (default: asha; with --sim hyperband)")
    demo.add_argument("--allocator", default=None,
                      help="GPU allocator (default: waterfill; with --sim fifo)")
    demo.add_argument("--max-budget", type=_number, default=None,
                      help="budget of a fully trained trial (default: 27 epochs, as with --sim)")
    demo.add_argument("--trials", type=int, default=None,
                      help="number of trials (default: 48; with --sim the algorithm's own)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    demo.add_argument("--store", default=None,
                      help="SQLite file or folder for the results (default: ./nbtune-store/nbtune.db)")
    demo.add_argument("--report", default=None,
                      help="HTML report path (default: <store folder>/<experiment>.html)")
    demo.set_defaults(func=_cmd_demo)

    from nbtune.cli_store import add_parsers  # the store commands; no heavy import at load

    add_parsers(sub)

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


def _utilization_row(exp: Any, kind: str) -> tuple[str, str]:
    """The summary's utilization row: per simulated GPU, or measured on the Dask workers."""
    if kind != "sim":
        return ("utilization", f"mean {exp.mean_utilization():.1%} (measured CPU of the workers)")
    util = _per_gpu_utilization(exp)
    mean_util = sum(util.values()) / len(util) if util else 0.0
    if len(util) <= 8:
        spread = "per GPU " + " ".join(f"{g}:{u:.0%}" for g, u in sorted(util.items()))
    else:
        spread = f"min {min(util.values()):.0%}, max {max(util.values()):.0%}"
    return ("GPU utilization", f"mean {mean_util:.1%}; {spread}")


def _outcome_rows(exp: Any) -> list[tuple[str, str]]:
    """The rows both demos print: trials by state, the best result and its config."""
    df = exp.results()
    states = df["state"].value_counts().to_dict() if not df.empty else {}
    rows = [("trials", f"{len(df)} ("
             + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) + ")")]
    best = exp.best
    if best is None:
        return rows + [(f"best {exp.metric}", "none (no trial reported)")]
    return rows + [
        (f"best {exp.metric}",
         f"{best[exp.metric]:.4f} (trial {best['trial_id']}, budget {best['budget_used']:g})"),
        ("best config", ", ".join(f"{k}={_fmt_value(v)}" for k, v in best["config"].items())),
    ]


def _table(rows: Sequence[tuple[str, str]], out: TextIO) -> None:
    width = max(len(k) for k, _ in rows)
    rule = "-" * min(78, width + 2 + max(len(v) for _, v in rows))
    print(rule, file=out)
    for k, v in rows:
        print(f"{k:<{width}}  {v}", file=out)
    print(rule, file=out)


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.sim:
        args.gpus = 4 if args.gpus is None else args.gpus
        args.algorithm = args.algorithm or "hyperband"
        args.allocator = args.allocator or "fifo"
        args.max_budget = 27 if args.max_budget is None else args.max_budget
        return _cmd_demo_sim(args)
    for opt in ("store", "report"):
        if getattr(args, opt) is not None and not str(getattr(args, opt)).strip():
            print(f"nbtune demo: error: --{opt} must not be empty", file=sys.stderr)
            return 2
    return _cmd_demo_real(args)


def _cmd_demo_real(args: argparse.Namespace) -> int:
    from nbtune.demo import run_demo  # lazy: Dask and torch only when the demo runs

    try:
        res = run_demo(
            trials=48 if args.trials is None else args.trials,
            max_budget=27 if args.max_budget is None else args.max_budget,
            workers=2 if args.gpus is None else args.gpus,
            algorithm=args.algorithm or "asha", allocator=args.allocator or "waterfill",
            seed=args.seed, store=args.store, report=args.report, out=sys.stdout,
        )
    except ValueError as exc:  # a bad option (unknown algorithm or allocator, bad budget)
        print(f"nbtune demo: error: {exc}", file=sys.stderr)
        return 2
    exp = res.experiment
    best = exp.best
    rows = [("job", f"{exp.engine.algorithm.name} on digits (CNN), "
                    f"{exp.engine.cluster.n_gpus} local Dask workers, "
                    f"allocator {exp.engine.allocator.name}"),
            *_outcome_rows(exp)]
    rows += [
        ("makespan", f"{exp.makespan:,.1f} s measured"),
        _utilization_row(exp, "dask"),
        ("store", f"{res.store_path} (experiment {exp.name!r})"),
        ("report", str(res.report_path)),
        ("wall time", f"{res.wall:.1f} s (cluster start-up included)"),
    ]
    print("nbtune demo: a real tuning job on a local Dask cluster")
    _table(rows, sys.stdout)
    return 0 if best is not None else 1


def _cmd_demo_sim(args: argparse.Namespace) -> int:
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

    rows = [("job", f"simulated {args.algorithm}, {args.gpus} GPUs, allocator {args.allocator}"),
            *_outcome_rows(exp)]
    rows += [
        ("makespan", f"{exp.makespan:,.1f} s simulated"),
        _utilization_row(exp, "sim"),
        ("wall time", f"{wall:.2f} s"),
    ]
    print("nbtune demo: a simulated tuning job on the discrete-event simulator (no GPU needed)")
    _table(rows, sys.stdout)
    return 0
