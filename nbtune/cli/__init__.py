"""The ``nbtune`` command line.

``nbtune demo`` runs a real tuning job on a local Dask cluster (a small CNN
on scikit-learn's digits, ASHA, water-filling; see :mod:`nbtune.demo`);
``nbtune demo --sim`` tunes a simulated job with Hyperband on the
discrete-event simulator instead; ``nbtune ls``, ``nbtune show`` and
``nbtune resume`` read and continue the experiments of a store
(:mod:`nbtune.cli.store_commands`, :mod:`nbtune.cli.resume_command`); ``nbtune version`` prints the version.
Each command lives in its own module; all of them print through
:mod:`nbtune.cli.format`. Heavy imports (pandas, the engine) happen inside the
commands, so ``--help`` and ``version`` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nbtune.cli.demo_command import cmd_demo
from nbtune.cli.resume_command import cmd_resume
from nbtune.cli.store_commands import cmd_ls, cmd_show
from nbtune.cli.usage import STORE_HELP, count, guard, number, positive_int

__all__ = ["main", "build_parser"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nbtune")
    except PackageNotFoundError:  # running from a checkout that is not installed
        from nbtune.version import __version__

        return __version__


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
    demo.add_argument("--max-budget", type=number, default=None,
                      help="budget of a fully trained trial (default: 27 epochs, as with --sim)")
    demo.add_argument("--trials", type=int, default=None,
                      help="number of trials (default: 48; with --sim the algorithm's own)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    demo.add_argument("--store", default=None,
                      help="SQLite file or folder for the results (default: ./nbtune-store/nbtune.db)")
    demo.add_argument("--report", default=None,
                      help="HTML report path (default: <store folder>/<experiment>.html)")
    demo.set_defaults(func=cmd_demo)

    ls = sub.add_parser(
        "ls", help="list the experiments in a store",
        description="One line per experiment: name, state, trials ended/total, best metric "
        "value, algorithm, allocator and when it was created.")
    ls.add_argument("--store", default=None, help=STORE_HELP)
    ls.set_defaults(func=guard(cmd_ls))

    show = sub.add_parser(
        "show", help="an experiment's settings, its best trials and its best trial",
        description="The experiment's settings, its trials sorted by the metric (best "
        "first) and the best trial; --csv writes every trial's results.")
    show.add_argument("name", help="the experiment's name (nbtune ls lists them)")
    show.add_argument("--store", default=None, help=STORE_HELP)
    show.add_argument("--top", type=count, default=10, metavar="K",
                      help="how many trials to list, best first (default 10; 0 lists all)")
    show.add_argument("--csv", default=None, metavar="FILE",
                      help="write every trial's results (config, state, metric, budget, "
                      "times) as CSV to FILE ('-': only the CSV, to standard output)")
    show.set_defaults(func=guard(cmd_show))

    res = sub.add_parser(
        "resume", help="continue an experiment that was interrupted (crash, dead kernel)",
        description="Replay the experiment's stored events, then continue it: completed "
        "trials are not rerun, trials that were running continue from their last "
        "checkpoint. Prints live progress and the outcome.")
    res.add_argument("name", help="the experiment's name (nbtune ls lists them)")
    res.add_argument("--store", default=None, help=STORE_HELP)
    res.add_argument("--runtime", choices=("sim", "dask"), default=None,
                     help="where to run the rest (default: the runtime it ran on)")
    res.add_argument("--workers", type=positive_int, default=None, metavar="N",
                     help="simulated GPUs or local Dask workers (default: as many GPUs as "
                     "the experiment had)")
    res.add_argument("--trainable", default=None, metavar="MODULE:NAME",
                     help="the training function (dask) or workload model (sim) to import, "
                     "when the one it recorded cannot be found by name")
    res.set_defaults(func=guard(cmd_resume))

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
