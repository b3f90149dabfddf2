"""Tiny trials: process vs thread vs auto execution on a real 2-worker LocalCluster.

Where a trial's steps take milliseconds, a trial process's boundary (the job
down a pipe, each report up it, each verdict down it through the relay
thread) costs more than the work; ``DaskRuntime(execution="thread")`` runs
the function in a thread of its worker instead, and ``"auto"`` (the default)
picks threads when the measured overhead per report is at least a quarter of
the measured work per report (:mod:`nbtune.runtimes.dask.driver_side.execution_mode`).

Part 1, per-report overhead: :func:`nbtune.runtimes.dask.worker_side.overhead.measure_overhead`
on one worker: probe trials that report and wait for a verdict after each
report, run in a trial process and in a thread, alternating.

Part 2, wall time of whole experiments, the three modes in rotating order, each on
its own kept runtime (a notebook's), ``--rounds`` rounds, medians. The
allocator is ``fifo`` (one trial per worker), so that only the execution path
differs: the default ``allocator="auto"`` packs tiny thread trials two to a
worker (their workers wait on the driver more than they compute), which
changes what is measured here from run to run.

* tiny: a Ray-style loop (report every epoch, no checkpoint, return when told)
  with a pure-Python step of ``TINY_N`` squares (5-20 ms here), 64 trials,
  ASHA eta=3, 1-9 epochs;
* normal: the same loop with a step of ``NORMAL_N`` squares (~0.3 s), 8
  trials, 1-9 epochs: auto must keep processes and not be slower.

Goals: tiny, busy worker ms per epoch: thread >= 1.2x and auto >= 1.1x
cheaper than process; normal: auto's wall <= 1.05x process's.
Run: ``PYTHONPATH=$PWD python benchmarks/tiny_trials.py --rounds 3``. Prints figures, ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import cloudpickle
from _results import record  # benchmarks/_results.py: notes the load at start

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TINY_N = 30_000  # squares per tiny step
NORMAL_N = 2_500_000  # squares per normal step (~0.3 s on a quiet machine)
MODES = ("process", "thread", "auto")


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = ("nbtune/runtimes/dask/", "nbtune/engine/", "nbtune/algorithms/asha.py")
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine
# the figures summary.py shows (paths into figures)
KEY_FIGURES = ("tiny_thread_speedup", "tiny_auto_speedup", "normal_auto_over_process", "errors")


def make_loop(n: int, epochs: int = 9):
    def train(config):
        from nbtune import report

        loss = 1.0
        for epoch in range(1, epochs + 1):
            s = sum(i * i for i in range(n))  # the step: pure Python, holds the GIL
            loss = config["lr"] + 1.0 / epoch + (s % 7) * 1e-12
            report({"loss": loss})

    return train


def experiment(rt, fn, trials: int, seed: int) -> tuple[float, float, dict, int, float]:
    """(wall s, busy worker ms per epoch, launches by mode, trials in error, best loss) of one
    ASHA experiment. Busy time per epoch is the per-epoch cost: the trials' slot-seconds
    over the epochs they trained, which does not depend on how many epochs ASHA let run."""
    import nbtune
    from nbtune.core.space import uniform

    t0 = time.perf_counter()
    exp = nbtune.tune(fn, {"lr": uniform(0.0, 1.0)}, algorithm="asha", metric="loss",
                      max_budget=9, num_trials=trials, runtime=rt, seed=seed, eta=3,
                      allocator="fifo")
    assert exp.wait(600)
    wall = time.perf_counter() - t0
    ts = exp.engine.trials.values()
    errs = sum(t.state.value == "error" for t in ts)
    best = min((t.best for t in ts if t.best is not None), default=float("nan"))
    per_epoch = sum(t.gpu_seconds for t in ts) / max(sum(t.budget_used for t in ts), 1) * 1e3
    return wall, per_epoch, dict(rt._driver.settings.execution.launched), errs, best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tiny-trials", type=int, default=64)
    ap.add_argument("--normal-trials", type=int, default=8)
    args = ap.parse_args()

    from nbtune.runtimes.dask import DaskRuntime
    from nbtune.runtimes.dask.worker_side.overhead import measure_overhead
    from tests.dask_cluster import local_client

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with local_client() as client:
        runtimes = {m: DaskRuntime(client, preload=(), warm_processes=2, execution=m)
                    for m in MODES}
        for rt in runtimes.values():
            rt.connect()
        worker = sorted(client.scheduler_info()["workers"])[0]
        probes = [client.run(measure_overhead, workers=[worker])[worker] for _ in range(3)]
        per_report = {m: statistics.median(t for p in probes for t in p[m]) / 4 * 1e3
                      for m in ("process", "thread")}
        print(f"per-report overhead (report + verdict, launch spread over 4 reports), ms: "
              f"process {per_report['process']:.2f}, thread {per_report['thread']:.2f}")
        walls: dict[str, dict[str, list[float]]] = {"tiny": {}, "normal": {}}
        costs: dict[str, dict[str, list[float]]] = {"tiny": {}, "normal": {}}
        auto_threads = {"tiny": 0, "normal": 0}
        errors = 0
        for r in range(args.rounds):
            order = MODES[r % 3:] + MODES[:r % 3]  # each mode in each position in turn
            for kind, n, trials in (("tiny", TINY_N, args.tiny_trials),
                                    ("normal", NORMAL_N, args.normal_trials)):
                for m in order:
                    wall, cost, launched, errs, best = experiment(
                        runtimes[m], make_loop(n), trials, seed=r)
                    errors += errs
                    walls[kind].setdefault(m, []).append(wall)
                    costs[kind].setdefault(m, []).append(cost)
                    if m == "auto":
                        auto_threads[kind] += launched["thread"]
                    print(f"round {r} {kind:6s} {m:7s} {wall:6.2f} s  {cost:7.1f} ms/epoch  "
                          f"launches {launched}  errors {errs}  best {best:.4f}", flush=True)
        overhead_auto = runtimes["auto"].process_overhead
        for rt in runtimes.values():
            rt.close()
    med = {k: {m: statistics.median(v) for m, v in d.items()} for k, d in walls.items()}
    cost = {k: {m: statistics.median(v) for m, v in d.items()} for k, d in costs.items()}
    tiny_thread = cost["tiny"]["process"] / cost["tiny"]["thread"]
    tiny_auto = cost["tiny"]["process"] / cost["tiny"]["auto"]
    normal_auto = med["normal"]["auto"] / med["normal"]["process"]
    print(f"median wall, s: {json.dumps(med)}")
    print(f"median busy ms per epoch: {json.dumps(cost)}")
    print(f"tiny, per epoch: thread {tiny_thread:.2f}x, auto {tiny_auto:.2f}x cheaper than "
          f"process; normal: auto/process wall {normal_auto:.3f}, auto's thread launches "
          f"{auto_threads['normal']}")
    figures = {
        "per_report_ms": {k: round(v, 3) for k, v in per_report.items()},
        "auto_measured_overhead_ms": None if overhead_auto is None else round(
            overhead_auto * 1e3, 3),
        "median_wall_s": {k: {m: round(x, 3) for m, x in d.items()} for k, d in med.items()},
        "median_busy_ms_per_epoch": {k: {m: round(x, 2) for m, x in d.items()}
                                     for k, d in cost.items()},
        "auto_thread_launches": auto_threads,
        "tiny_thread_speedup": round(tiny_thread, 3), "tiny_auto_speedup": round(tiny_auto, 3),
        "normal_auto_over_process": round(normal_auto, 3), "errors": errors,
        "rounds": args.rounds,
    }
    goal = ("tiny, busy ms per epoch: thread >= 1.2x and auto >= 1.1x cheaper than process; "
            "normal: auto's wall <= 1.05x process's; 0 errors")
    met = tiny_thread >= 1.2 and tiny_auto >= 1.1 and normal_auto <= 1.05 and errors == 0
    record({"name": "tiny_trials", "figures": figures, "goal": goal, "met": met})


if __name__ == "__main__":
    main()
