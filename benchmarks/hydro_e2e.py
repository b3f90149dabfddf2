"""hydro_e2e: a 50-trial random search, nbtune plain vs nbtune with Hydro's surrogates.

Hydro §6.3 (Table 2, case I): a single-fidelity 50-trial job took 1419 s with Hydro and
3962 s on plain Ray Tune (2.8x) with the same best configuration. Here both sides are
``nbtune.tune`` on the same Dask runtime (one real 2-worker ``LocalCluster``, one
``DaskRuntime`` whose warm trial processes serve every experiment), with the same seed,
so the same 50 configurations of the Hydro artifact's search space (lr, momentum, batch
size, StepLR gamma: :data:`nbtune.surrogate.example_digits.SPACE`), on a real model: an
MLP 64 -> 256 -> 256 -> 10 on scikit-learn's digits, SGD, one budget unit = one epoch.

* **plain**: every trial trains the full model, alone, one per worker at a time.
* **hydro**: ``scaling=S, fusion=F``: every trial trains a µP surrogate of width 256 / S,
  fused with others of its batch size into units of up to F members (one process per
  unit), and eager transfer (§4.3) trains the best surrogate configuration on the full
  model (the target trial), starting when half the surrogates have ended.

Figures: the makespan, i.e. the time (on the experiment's clock, from its first launch)
until the best configuration has been trained on the target model: for plain, the end
of the run (the best is known only when every trial has ended); for hydro, the end of
the completed target trial of the final best configuration. And the validation accuracy
of the configuration each side chose (lowest validation loss), trained on the full
model: plain, that trial's last-epoch accuracy; hydro, the target trial's. A warm-up
runs first (unmeasured), then the sides alternate (plain, hydro, plain, hydro, ...) so
load on the shared machine hits both alike; the medians are compared.

Goal: makespan >= 2.8x shorter, target accuracy within 0.5 points (not worse
than plain's by more than 0.005).

Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/hydro_e2e.py [--rounds 2] [--epochs 6]
[--scaling 4] [--fusion 16]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from _results import record  # benchmarks/_results.py: notes the load at start

# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = ("nbtune/surrogate/", "nbtune/fusion/", "nbtune/engine/", "nbtune/runtimes/dask/")
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine


def _chosen(df: Any, curves: Any, metric: str) -> dict[str, Any]:
    """The side's chosen full-model trial: its id, config, last accuracy and end time."""
    full = df[df.get("role", "") == "target"] if "role" in df else df
    if "role" in df:  # hydro: the last completed target (it trained the final best)
        full = full[full["state"] == "completed"].sort_values("end")
        row = full.iloc[-1]
    else:
        row = df.loc[df[metric].idxmin()]
    last = curves[curves["trial_id"] == row["trial_id"]].sort_values("budget").iloc[-1]
    cfg = {k.split("/", 1)[1]: row[k] for k in df.columns
           if k.startswith("config/") and k.split("/", 1)[1] in ("lr", "momentum", "batch_size",
                                                                  "gamma")}
    return {"trial_id": int(row["trial_id"]), "config": cfg, "accuracy": float(last["accuracy"]),
            "width": int(last["width"]), "end": float(row["end"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scaling", type=int, default=4)
    ap.add_argument("--fusion", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import distributed

    import nbtune
    from nbtune.runtimes.dask import DaskRuntime
    from nbtune.surrogate.example_digits import SPACE, train

    cluster = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1,
                                       processes=True, host="127.0.0.1",
                                       dashboard_address=None, resources={"GPU": 1})
    client = distributed.Client(cluster, set_as_default=False)
    rt = DaskRuntime(client, preload=("torch",), warm_processes=1, dashboard_address=None)

    def run(hydro: bool, trials: int) -> dict[str, Any]:
        extra = {"scaling": args.scaling, "fusion": args.fusion} if hydro else {}
        t0 = time.perf_counter()
        exp = nbtune.tune(train, SPACE, algorithm="random", metric="loss", mode="min",
                          max_budget=args.epochs, num_trials=trials, runtime=rt,
                          seed=args.seed, **extra)
        exp.wait()
        wall = time.perf_counter() - t0
        df, curves = exp.results(), exp.learning_curves()
        chosen = _chosen(df, curves, "loss")
        span = chosen["end"] if hydro else exp.makespan
        errors = int(df["error"].notna().sum())
        return {"makespan": span, "run_makespan": exp.makespan, "wall": wall, "errors": errors,
                "targets": int((df.get("role", "") == "target").sum()) if hydro else 0,
                "units": int(df["group"].nunique()) if "group" in df else 0,
                "max_accuracy": float(curves.groupby("trial_id")["accuracy"].last().max()),
                **chosen}

    sides: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    try:
        run(False, args.workers)  # warm-up: the workers' trial processes import torch
        run(True, args.workers)
        for rnd in range(args.rounds):
            for hydro in (False, True):
                r = run(hydro, args.trials)
                sides[hydro].append(r)
                print(f"round {rnd} {'hydro' if hydro else 'plain'}: makespan "
                      f"{r['makespan']:.2f} s (wall {r['wall']:.2f} s), chosen "
                      f"{r['config']} acc {r['accuracy']:.4f} at width {r['width']}, "
                      f"{r['units']} units, {r['targets']} target trials, "
                      f"{r['errors']} errors", flush=True)
    finally:
        rt.close()
        client.close()
        cluster.close()
    plain, hydro = sides[False], sides[True]
    off = statistics.median(r["makespan"] for r in plain)
    on = statistics.median(r["makespan"] for r in hydro)
    acc_off = statistics.median(r["accuracy"] for r in plain)
    acc_on = statistics.median(r["accuracy"] for r in hydro)
    ratio = off / on
    same = [p["config"] == h["config"] for p, h in zip(plain, hydro, strict=True)]
    errors = sum(r["errors"] for r in plain + hydro)
    print(f"{args.trials} trials x {args.epochs} epochs, {args.workers} workers: plain "
          f"{off:.2f} s, hydro (S={args.scaling}, F={args.fusion}) {on:.2f} s (medians of "
          f"{args.rounds}), {ratio:.2f}x; chosen accuracy plain {acc_off:.4f}, hydro target "
          f"{acc_on:.4f} (diff {acc_on - acc_off:+.4f}); same configuration chosen: {same}; "
          f"errors {errors}")
    goal = {"makespan_ratio": 2.8, "max_accuracy_drop": 0.005}
    figures = {"plain_makespan_s": round(off, 3), "hydro_makespan_s": round(on, 3),
               "plain_makespans_s": [round(r["makespan"], 3) for r in plain],
               "hydro_makespans_s": [round(r["makespan"], 3) for r in hydro],
               "plain_wall_s": [round(r["wall"], 2) for r in plain],
               "hydro_wall_s": [round(r["wall"], 2) for r in hydro],
               "makespan_ratio": round(ratio, 3),
               "plain_accuracy": round(acc_off, 4), "hydro_target_accuracy": round(acc_on, 4),
               "accuracy_diff": round(acc_on - acc_off, 4),
               "plain_max_accuracy": [round(r["max_accuracy"], 4) for r in plain],
               "same_config_chosen": same,
               "hydro_units": [r["units"] for r in hydro],
               "hydro_target_trials": [r["targets"] for r in hydro],
               "errors": errors, "scaling": args.scaling, "fusion": args.fusion,
               "trials": args.trials, "epochs": args.epochs}
    met = ratio >= 2.8 and acc_on >= acc_off - 0.005 and errors == 0
    record({"name": "hydro_e2e", "figures": figures, "goal": goal, "met": met})


if __name__ == "__main__":
    main()
