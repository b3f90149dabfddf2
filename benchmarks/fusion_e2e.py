"""fusion_e2e: a 64-trial random search on digits through ``nbtune.tune``, fusion off vs on.

Both sides are the same call on the Dask runtime (one real 2-worker ``LocalCluster``, one
``DaskRuntime`` whose warm trial processes serve every experiment) with the same seed, so
the same 64 configurations: ``fusion=False`` runs each trial alone (one per worker at a
time); ``fusion=F`` lets the engine coalesce pending trials into fused units of up to F
members (``nbtune.engine.fusion_units``), one process per unit, every member still an
ordinary trial. A warm-up experiment runs first (unmeasured), then the sides alternate
(off, on, off, on, ...) so load on the shared machine hits both alike; the figure is the
ratio of the median makespans (``Experiment.makespan``: first launch to last trial end,
on the experiment's clock), and each trial's final loss must agree across the sides.

Goal: makespan ratio >= 3x, identical per-trial final metrics within 1e-4.

Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/fusion_e2e.py [--trials 64] [--reps 2]
[--fusion 32|true]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _results import record  # benchmarks/_results.py: notes the load at start

# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/fusion/", "nbtune/engine/", "nbtune/runtimes/dask/",
    "nbtune/examples/fusion_digits.py",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fusion", type=lambda v: True if v == "true" else int(v), default=32,
                    help="F, or 'true': F_max from measured memory (probes at F = 1, 2)")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()

    import distributed

    import nbtune
    from nbtune.core.space import choice, loguniform
    from nbtune.examples.fusion_digits import train
    from nbtune.runtimes.dask import DaskRuntime

    space = {"lr": loguniform(1e-3, 0.3), "momentum": choice([0.0, 0.5, 0.9]),
             "seed": choice([0, 1, 2, 3])}
    cluster = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1,
                                       processes=True, host="127.0.0.1",
                                       dashboard_address=None, resources={"GPU": 1})
    client = distributed.Client(cluster, set_as_default=False)
    rt = DaskRuntime(client, preload=("torch",), warm_processes=1, dashboard_address=None)

    def run(fusion: int | bool, trials: int) -> tuple[float, float, object]:
        t0 = time.perf_counter()
        exp = nbtune.tune(train, space, algorithm="random", metric="loss", mode="min",
                          max_budget=args.epochs, num_trials=trials, runtime=rt, seed=0,
                          fusion=fusion)
        exp.wait()
        return exp.makespan, time.perf_counter() - t0, exp.results()

    spans: dict[bool, list[float]] = {False: [], True: []}
    walls: dict[bool, list[float]] = {False: [], True: []}
    last: dict[bool, object] = {}
    try:
        run(False, args.workers)  # warm-up: the workers' trial processes import torch
        run(args.fusion, args.workers)
        for rep in range(args.reps):
            for fused in (False, True):
                span, wall, df = run(args.fusion if fused else False, args.trials)
                spans[fused].append(span)
                walls[fused].append(wall)
                last[fused] = df
                print(f"rep {rep} fusion={args.fusion if fused else 'off'}: makespan "
                      f"{span:.2f} s (wall {wall:.2f} s)", flush=True)
    finally:
        rt.close()
        client.close()
        cluster.close()
    off_df, on_df = last[False], last[True]
    same_configs = ([c for c in off_df.columns if c.startswith("config/")]
                    and (off_df.filter(like="config/") == on_df.filter(like="config/")).all().all())
    diff = float((off_df["last"] - on_df["last"]).abs().max())
    completed = [int((d["state"] == "completed").sum()) for d in (off_df, on_df)]
    units = int(on_df["group"].nunique())
    off, on = statistics.median(spans[False]), statistics.median(spans[True])
    ratio = off / on
    print(f"{args.trials} trials x {args.epochs} epochs through nbtune.tune, {args.workers} "
          f"workers: fusion off {off:.2f} s, fusion={args.fusion} ({units} fused units) "
          f"{on:.2f} s (median makespans of {args.reps}), ratio {ratio:.2f}x; "
          f"max |final loss fused - unfused| {diff:.1e}; completed {completed}")
    goal = {"makespan_ratio": 3.0, "max_metric_diff": 1e-4}
    figures = {"unfused_makespan_s": round(off, 3), "fused_makespan_s": round(on, 3),
               "unfused_makespans_s": [round(x, 3) for x in spans[False]],
               "fused_makespans_s": [round(x, 3) for x in spans[True]],
               "unfused_wall_s": [round(x, 2) for x in walls[False]],
               "fused_wall_s": [round(x, 2) for x in walls[True]],
               "makespan_ratio": round(ratio, 3), "max_metric_diff": diff,
               "fused_units": units, "completed": completed,
               "same_configs": bool(same_configs), "fused_through_tune": True}
    met = (ratio >= 3.0 and diff <= 1e-4 and bool(same_configs)
           and completed == [args.trials, args.trials])
    record({"name": "fusion_e2e", "figures": figures, "goal": goal, "met": met})


if __name__ == "__main__":
    main()
