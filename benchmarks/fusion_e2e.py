"""fusion_e2e: a 64-trial random search on digits, unfused through nbtune.tune vs fused groups.

Fusion off: ``nbtune.tune(train, ..., algorithm="random", num_trials=64)`` on the Dask
runtime (a real 2-worker LocalCluster, one trial per worker at a time). Fusion on: the
*same configurations* and the same ``train`` function, planned by the Trial Planner
(:func:`nbtune.fusion.planner.plan_fusion`, F_max 32) into fused groups that run as Dask
tasks on the same cluster through :func:`nbtune.fusion.trial.run_group`.

``nbtune.tune(..., fusion=True)`` is not wired into the engine yet, so the fused side does
not go through ``tune`` (no engine, no per-trial launches): the JSON line says so
(``fused_through_tune: false``) and ``met`` requires it, i.e. this benchmark cannot be met
until that integration lands. The figures still show what fusion buys on this job.

Goal (issue 10): makespan ratio >= 3x, identical per-trial final metrics within 1e-4.

Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/fusion_e2e.py [--trials 64]``.
"""

from __future__ import annotations

import argparse
import json
import time


class Last:
    """A member sink keeping the last metrics."""

    def __init__(self) -> None:
        self.metrics: dict = {}

    def report(self, step, **metrics):  # noqa: ANN001
        self.metrics = metrics


def run_unit(configs, budget):  # noqa: ANN001, ANN201 — one fused group, on a worker
    from nbtune.examples.fusion_digits import train
    from nbtune.fusion.trial import run_group

    sinks = [Last() for _ in configs]
    run_group(train, configs, sinks, budget)
    return [s.metrics for s in sinks]


def warm() -> None:
    """Import what a fused group needs in the worker process (the unfused side's trial
    processes are preloaded the same way: ``preload=("torch",)``, warm processes)."""
    import nbtune.fusion.trial  # noqa: F401
    from nbtune.examples.digits import load_data

    load_data()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--f-max", type=int, default=32)
    args = ap.parse_args()

    import distributed

    import nbtune
    from nbtune.core.space import choice, loguniform
    from nbtune.examples.fusion_digits import train
    from nbtune.fusion.planner import plan_fusion
    from nbtune.runtimes.dask import DaskRuntime

    space = {"lr": loguniform(1e-3, 0.3), "momentum": choice([0.0, 0.5, 0.9]),
             "seed": choice([0, 1, 2, 3])}
    cluster = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1,
                                       processes=True, host="127.0.0.1",
                                       dashboard_address=None, resources={"GPU": 1})
    client = distributed.Client(cluster, set_as_default=False)
    try:
        rt = DaskRuntime(client, preload=("torch",), warm_processes=1, dashboard_address=None)
        t0 = time.perf_counter()
        exp = nbtune.tune(train, space, algorithm="random", metric="loss", mode="min",
                          max_budget=args.epochs, num_trials=args.trials, runtime=rt, seed=0)
        exp.wait()
        off = time.perf_counter() - t0
        rt.close()
        df = exp.results()
        configs = [{k.split("/", 1)[1]: v for k, v in r.items() if k.startswith("config/")}
                   for r in df.to_dict("records")]
        plan = plan_fusion(configs, [], workers=args.workers, f_max=args.f_max, batch_key=None)
        client.run(warm)
        t0 = time.perf_counter()
        futures = [client.submit(run_unit, [configs[i] for i in u.trials], args.epochs,
                                 pure=False) for u in plan.units]
        results = client.gather(futures)
        on = time.perf_counter() - t0
    finally:
        client.close()
        cluster.close()
    fused_last = {}
    for u, res in zip(plan.units, results, strict=True):
        for i, m in zip(u.trials, res, strict=True):
            fused_last[i] = m["loss"]
    diff = max(abs(fused_last[i] - float(df["last"][i])) for i in range(len(configs)))
    completed = int((df["state"] == "completed").sum())
    ratio = off / on
    print(f"{args.trials} trials x {args.epochs} epochs: unfused through nbtune.tune "
          f"{off:.1f} s ({completed} completed), fused ({len(plan.units)} groups) {on:.1f} s, "
          f"ratio {ratio:.2f}x; max |final loss fused - unfused| {diff:.1e}")
    goal = {"makespan_ratio": 3.0, "max_metric_diff": 1e-4, "fused_through_tune": True}
    figures = {"unfused_makespan_s": round(off, 2), "fused_makespan_s": round(on, 2),
               "makespan_ratio": round(ratio, 3), "max_metric_diff": diff,
               "fused_groups": len(plan.units), "completed_unfused": completed,
               "fused_through_tune": False}
    met = ratio >= 3.0 and diff <= 1e-4 and figures["fused_through_tune"]
    print(json.dumps({"name": "fusion_e2e", "figures": figures, "goal": goal, "met": met}))


if __name__ == "__main__":
    main()
