"""Load: 10,000 trials in one experiment and 20 experiments in one store.

On the simulator (the engine, the recorder and the store are what is
measured; the Dask runtime's per-trial costs are in dask_runtime_latency and
chaos): one experiment of 10,000 trials recorded into a SQLite store, then 19
more experiments of 500 trials into the same store. Figures: the engine's
wall time per 1,000 trials, the store's size, and what a dashboard reads:
the Jupyter extension's summary of every experiment (cold, and a poll with
its cache), one experiment's results frame, its learning curves. Goal: every
read a dashboard makes stays under 2 s with 20 experiments and 10,000 trials
(responsive), the 10,000-trial run records at >= 500 trials/s. Ends with one
JSON line.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from _results import record  # benchmarks/_results.py: notes the load at start

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/engine/", "nbtune/store/", "nbtune/server/summary.py", "nbtune/runtimes/sim.py",
    "nbtune/runtimes/profiler.py", "nbtune/runtimes/profile_samples.py",
    "nbtune/runtimes/model_key.py", "nbtune/core/", "nbtune/workloads/",
    "nbtune/allocators/profiling.py", "nbtune/allocators/profile_summary.py",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    import nbtune
    from nbtune import SimRuntime, SyntheticWorkload, loguniform, uniform
    from nbtune.server.summary import summarize
    from nbtune.store import Store

    wl = SyntheticWorkload({"lr": loguniform(1e-4, 1e-1), "m": uniform(0, 1)}, unit_time=5.0)
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "nbtune.db")
        big, t_big = timed(lambda: nbtune.tune(
            wl, algorithm="asha", metric="loss", max_budget=9, num_trials=10_000, seed=0,
            store=store, name="big", runtime=SimRuntime(cluster=256)).wait())
        big.recorder.close()
        t_rest = 0.0
        for i in range(19):
            exp, t = timed(lambda i=i: nbtune.tune(
                wl, algorithm="asha", metric="loss", max_budget=9, num_trials=500, seed=i,
                store=store, name=f"exp-{i:02d}", runtime=SimRuntime(cluster=16)).wait())
            exp.recorder.close()
            t_rest += t
        reader = Store(Path(d) / "nbtune.db")  # a second kernel, or the lab extension
        cache: dict = {}
        summary, t_summary = timed(lambda: summarize(reader, d, cache))
        _, t_poll = timed(lambda: summarize(reader, d, cache))
        res, t_results = timed(lambda: reader.results("big"))
        _, t_curves = timed(lambda: reader.learning_curves("big"))
        _, t_names = timed(reader.names)
        size_mb = (Path(d) / "nbtune.db").stat().st_size / 2**20
    figures = {
        "big_trials": len(res), "big_wall_s": round(t_big, 2),
        "big_trials_per_s": round(len(res) / t_big, 1),
        "experiments": len(summary["experiments"]), "other_19_wall_s": round(t_rest, 2),
        "store_mb": round(size_mb, 1),
        "summary_cold_s": round(t_summary, 3), "summary_poll_s": round(t_poll, 3),
        "results_10k_s": round(t_results, 3), "curves_10k_s": round(t_curves, 3),
        "names_s": round(t_names, 4),
    }
    for k, v in figures.items():
        print(f"{k:>18}: {v}")
    goal = {"reads_under_s": 2.0, "big_trials_per_s": 500}
    reads = [t_summary, t_poll, t_results, t_curves, t_names]
    met = max(reads) < 2.0 and figures["big_trials_per_s"] >= 500 and len(res) == 10_000 \
        and figures["experiments"] == 20
    record({"name": "load", "figures": figures, "goal": goal, "met": met})


if __name__ == "__main__":
    main()
