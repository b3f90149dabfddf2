"""engine_overhead: the Dask runtime's cost per trial, on trials that do almost nothing.

1,000 trials of 0.1 s of work (one budget unit: sleep 0.1 s, report once)
with random search and the FIFO allocator on a real 2-worker LocalCluster.
The ideal makespan is 1,000 x 0.1 s / 2 workers = 50 s; the goal is at most
5 % over it. The per-trial overhead is what each trial costs its worker
beyond its 0.1 s: launch (task submit, warm process hand-off), report,
finish (exit, process returned to the pool) and the engine's own handling.

Run: ``.venv/bin/python benchmarks/engine_overhead.py [--trials 1000] [--work 0.1]``.
"""

from __future__ import annotations

import argparse
import time

from _results import record  # benchmarks/_results.py: notes the load at start

# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/runtimes/dask/", "nbtune/engine/", "nbtune/algorithms/random_search.py",
    "nbtune/allocators/fifo.py",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine


def work(config, trial):  # noqa: ANN001 - a training function, pickled by value
    import time as _t

    for step in trial.steps():
        _t.sleep(config["work"])
        trial.report(step=step, loss=config["x"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--work", type=float, default=0.1)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    import nbtune
    from nbtune.core.space import choice, uniform
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(n_workers=args.workers, gpus=False, dashboard_address=None, preload=(),
                     warm_processes=1, sample_interval=1.0)
    rt.connect()
    space = {"x": uniform(0.0, 1.0), "work": choice([args.work])}
    wall = time.perf_counter()
    exp = nbtune.tune(work, space, algorithm="random", metric="loss", max_budget=1,
                      num_trials=args.trials, allocator="fifo", runtime=rt, seed=0)
    exp.wait()
    wall = time.perf_counter() - wall
    rt.close()
    df = exp.results()
    done = int((df["state"] == "completed").sum())
    ideal = args.trials * args.work / args.workers
    span = float(exp.makespan)
    over = span / ideal - 1.0
    per_trial_ms = (span * args.workers - args.trials * args.work) / args.trials * 1e3
    print(f"{done}/{args.trials} trials completed on {args.workers} workers")
    print(f"makespan {span:.2f} s (wall {wall:.2f} s), ideal {ideal:.2f} s: {over:+.1%}")
    print(f"per-trial overhead {per_trial_ms:.1f} ms per worker slot")
    record({
        "name": "engine_overhead",
        "figures": {"trials": args.trials, "completed": done, "work_s": args.work,
                    "workers": args.workers, "makespan_s": round(span, 2),
                    "wall_s": round(wall, 2), "ideal_s": round(ideal, 2),
                    "overhead_pct": round(100 * over, 2),
                    "per_trial_overhead_ms": round(per_trial_ms, 2)},
        "goal": {"overhead_pct_max": 5.0},
        "met": bool(done == args.trials and over <= 0.05),
    })


if __name__ == "__main__":
    main()
