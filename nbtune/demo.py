"""``nbtune demo``: a real tuning job on a local Dask cluster, end to end.

It tunes :func:`nbtune.examples.digits.train` (a small CNN on scikit-learn's
digits, no download) with ASHA and the water-filling allocator on a
``LocalCluster`` whose workers stand for GPUs, prints one line per trial event
while it runs, records everything in the SQLite store and writes the Bokeh
report (utilization, learning curves, allocation strips) as one offline HTML
file. The simulated job (``nbtune demo --sim``) stays in :mod:`nbtune.cli.demo_command`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from nbtune.experiment import Experiment

__all__ = ["DemoOptionError", "DemoResult", "run_demo"]

#: modules the warm trial processes import before the first trial (so no trial pays them)
PRELOAD = ("torch", "sklearn.datasets", "sklearn.model_selection", "nbtune.examples.digits")


class DemoOptionError(ValueError):
    """A bad :func:`run_demo` argument: a ValueError naming the parameter (``option``,
    as :func:`run_demo` spells it) and what is wrong with its value (``problem``)."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option} {problem}")
        self.option, self.problem = option, problem


@dataclass
class DemoResult:
    experiment: Experiment
    store_path: Path
    report_path: Path
    wall: float
    progress_lines: int


def run_demo(*, trials: int = 48, max_budget: float = 27, workers: int = 2,
             algorithm: str = "asha", allocator: str = "waterfill", seed: int = 0,
             store: str | Path | None = None, report: str | Path | None = None,
             out: TextIO) -> DemoResult:
    """Run the real demo and return its experiment, where it was stored and the report's path.

    ``store`` defaults to ``./nbtune-store/nbtune.db``; the experiment is named
    ``demo-<k>``, the first free name there. ``report`` defaults to
    ``<store folder>/<name>.html``. A bad value raises :class:`DemoOptionError` (a
    ValueError) before a cluster starts; the command line checks its own flags first,
    so that its messages name them (:mod:`nbtune.cli.demo_command`).
    """
    from nbtune.algorithms import ALGORITHMS
    from nbtune.allocators import ALLOCATORS
    from nbtune.api import tune
    from nbtune.build import make_runtime
    from nbtune.console import ProgressPrinter
    from nbtune.examples.digits import SPACE, train
    from nbtune.store import DEFAULT_DIR, DEFAULT_FILE, open_store

    # bad options fail here, before a cluster starts
    if workers < 1:
        raise DemoOptionError("workers", f"must be >= 1, got {workers}")
    if trials < 1:
        raise DemoOptionError("trials", f"must be >= 1, got {trials}")
    if algorithm not in ALGORITHMS:
        raise DemoOptionError("algorithm", f"{algorithm!r} is unknown; choose one of "
                                           f"{sorted(ALGORITHMS)}")
    if allocator not in ALLOCATORS:
        raise DemoOptionError("allocator", f"{allocator!r} is unknown; choose one of "
                                           f"{sorted(ALLOCATORS)}")
    store_path = Path(store) if store is not None else Path.cwd() / DEFAULT_DIR / DEFAULT_FILE
    if not store_path.is_file() and store_path.suffix not in (".db", ".sqlite", ".sqlite3"):
        store_path = store_path / DEFAULT_FILE  # a folder: the default file inside it
    store_path.parent.mkdir(parents=True, exist_ok=True)
    st = open_store(str(store_path))
    name = st.free_name("demo")
    report_path = Path(report) if report is not None else store_path.parent / f"{name}.html"
    if report_path.suffix.lower() not in (".html", ".htm"):
        raise DemoOptionError("report", f"must name an .html file, got {str(report_path)!r}")
    report_path.parent.mkdir(parents=True, exist_ok=True)

    wall = time.perf_counter()
    print(f"nbtune demo: {algorithm} on {trials} configs of a CNN for scikit-learn's digits, "
          f"{workers} local Dask workers (one 'GPU' slot each), allocator {allocator}",
          file=out, flush=True)
    rt = make_runtime("dask", n_workers=workers, threads_per_worker=1, gpus=False,
                      dashboard_address=None, preload=PRELOAD, warm_processes=1,
                      sample_interval=0.5)
    rt.connect()  # start the cluster before the clock: its start-up is not the job's time
    print(f"cluster up after {time.perf_counter() - wall:.1f} s; store {store_path} "
          f"(experiment {name!r})", file=out, flush=True)
    try:
        exp = tune(train, SPACE, algorithm=algorithm, metric="accuracy", mode="max",
                   max_budget=max_budget, num_trials=trials, allocator=allocator,
                   allocator_options=_allocator_options(allocator),
                   runtime=rt, store=st, name=name, seed=seed)
    except BaseException:
        rt.close()
        raise
    progress = ProgressPrinter(exp.engine, total=trials, out=out)
    try:
        exp.wait()
    finally:
        progress.close()
        rt.close()
    if exp.recorder is not None:
        exp.recorder.close()  # flush: the store is complete when the summary prints
    exp.report(report_path)
    return DemoResult(exp, store_path, report_path, time.perf_counter() - wall, progress.lines)


def _allocator_options(allocator: str) -> dict[str, Any]:
    """Water-filling on CPU workers packs at most 2 trials per worker (``c=2``).

    A "GPU" here is one CPU core: Fluid's default of 4 trials per GPU would
    start 4 processes per core, each paying its own start-up at once.
    """
    return {"c": 2} if allocator in ("waterfill", "waterfill-static") else {}
