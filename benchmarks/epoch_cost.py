"""epoch_cost: one epoch inside an nbtune trial process against the same code in-process.

The goal: the per-epoch cost inside a trial process within 10 % of
the same code run in-process. The workload is ``vs_peers``' CNN on digits (one torch
thread, ``PASSES`` passes per epoch), four fixed configurations, ``--epochs`` epochs each:

* *in-process*: the training loop called directly in this process, one configuration
  after another, each epoch timed with ``perf_counter``;
* *nbtune*: the same loop through ``nbtune.tune`` on a kept ``DaskRuntime`` with one
  worker (so one trial at a time, as in-process), grid search, ``fifo``. Two figures per
  epoch: the epoch as the loop times it inside the trial process (``epoch_s``, reported
  with the accuracy), and the interval between two reports as the engine received them
  (the epoch plus the report's round trip: what a user's wall clock pays).

The first epoch of each configuration is left out on both sides (the model's first
step sets up torch's kernels). The two sides alternate for ``--rounds`` rounds; the
runtime's start-up happens before the first nbtune round and is not counted (the
``startup`` benchmark measures it). Goal: the median report interval <= 1.10x the
in-process median epoch. Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/epoch_cost.py``.
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _results import record  # benchmarks/_results.py: notes the load at start

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vs_peers  # noqa: E402  (the workload: data, make, epoch)

CONFIGS = [
    {"lr": 0.05, "momentum": 0.9, "channels": 8, "batch_size": 32, "weight_decay": 1e-4},
    {"lr": 0.01, "momentum": 0.8, "channels": 16, "batch_size": 64, "weight_decay": 1e-5},
    {"lr": 0.1, "momentum": 0.5, "channels": 4, "batch_size": 16, "weight_decay": 1e-3},
    {"lr": 0.02, "momentum": 0.95, "channels": 8, "batch_size": 64, "weight_decay": 1e-6},
]


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = ("nbtune/runtimes/dask/", "nbtune/engine/", "benchmarks/vs_peers.py")
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine


def loop(config: dict[str, Any], epochs: int, report: Any) -> None:
    """The loop both sides run: train, time the epoch, report it."""
    model, opt = vs_peers.make(config)
    for e in range(1, epochs + 1):
        t0 = time.perf_counter()
        acc = vs_peers.epoch(model, opt, config, e)
        report(e, acc, time.perf_counter() - t0)


def in_process(epochs: int) -> list[float]:
    vs_peers.data()  # read once, as a trial process's first epoch does not count either
    out: list[float] = []
    for c in CONFIGS:
        loop(c, epochs, lambda e, acc, dt: out.append(dt) if e > 1 else None)
    return out


def through_nbtune(rt: Any, epochs: int) -> tuple[list[float], list[float]]:
    import nbtune

    def fn(config: dict[str, Any], trial: Any) -> None:  # an Optuna-style report(step, ...)
        loop(CONFIGS[config["i"]], epochs,
             lambda e, acc, dt: trial.report(e, val_acc=acc, epoch_s=dt))

    exp = nbtune.tune(fn, {"i": nbtune.grid(list(range(len(CONFIGS))))}, algorithm="grid",
                      allocator="fifo", metric="val_acc", mode="max", max_budget=epochs,
                      runtime=rt, seed=0)
    exp.wait()
    inside, interval = [], []
    for t in exp.engine.trials.values():
        assert t.error is None, t.error
        res = sorted(t.results, key=lambda r: r[1])
        for (t_prev, _, _), (t_now, _, m) in zip(res, res[1:], strict=False):
            inside.append(float(m["epoch_s"]))
            interval.append(t_now - t_prev)
        assert len(res) == epochs, res
    return inside, interval


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=6)
    args = ap.parse_args()
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(n_workers=1, warm_processes=1, keep=True, dashboard_address=None)
    through_nbtune(rt, 2)  # start-up and the first process's imports: not counted
    rows = []
    for r in range(args.rounds):
        order = ("in-process", "nbtune") if r % 2 == 0 else ("nbtune", "in-process")
        row: dict[str, float] = {}
        for side in order:
            if side == "in-process":
                row["in_process"] = statistics.median(in_process(args.epochs))
            else:
                inside, interval = through_nbtune(rt, args.epochs)
                row["inside"] = statistics.median(inside)
                row["interval"] = statistics.median(interval)
        rows.append(row)
        print(f"round {r + 1}: in-process {row['in_process'] * 1e3:.1f} ms/epoch, inside a trial"
              f" process {row['inside'] * 1e3:.1f} ms, report interval {row['interval'] * 1e3:.1f}"
              f" ms", flush=True)
    rt.close()
    med = {k: statistics.median(r[k] for r in rows) for k in ("in_process", "inside", "interval")}
    ratio_inside = med["inside"] / med["in_process"]
    ratio_interval = med["interval"] / med["in_process"]
    print(f"medians: in-process {med['in_process'] * 1e3:.1f} ms, inside {med['inside'] * 1e3:.1f}"
          f" ms ({ratio_inside:.3f}x), interval {med['interval'] * 1e3:.1f} ms"
          f" ({ratio_interval:.3f}x)")
    record({"name": "epoch_cost",
            "figures": {"in_process_s": med["in_process"], "inside_s": med["inside"],
                        "interval_s": med["interval"], "inside_ratio": ratio_inside,
                        "interval_ratio": ratio_interval, "rounds": args.rounds},
            "goal": {"interval_ratio_max": 1.10},
            "met": ratio_interval <= 1.10})


if __name__ == "__main__":
    main()
