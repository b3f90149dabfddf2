"""sim_fidelity: does the simulator predict a real run's makespan, and make its decisions?

A real 32-trial ASHA run (``nbtune demo``'s job: a CNN on scikit-learn's
digits, 9 epochs max, eta 3, water-filling with c = 2, 2 local Dask workers)
is replayed on the simulator with the timings it measured
(:meth:`TraceWorkload.from_experiment`: each trial's unit time, each
launch's cost) and the same algorithm, seed, space and allocator
(:func:`nbtune.replay.replay_in_simulator`). Reported per round: measured
and predicted makespan, and whether the two runs made the same decisions
(configs, promotions, final states, winner). Goal: the median over ``--rounds``
(3) real runs of the prediction's absolute error within 5 %.

Run: ``.venv/bin/python benchmarks/sim_fidelity.py [--trials 32] [--max-budget 9] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
from pathlib import Path

from _results import record  # benchmarks/_results.py: notes the load at start

# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/runtimes/sim.py", "nbtune/replay.py", "nbtune/demo.py", "nbtune/runtimes/dask/",
    "nbtune/runtimes/profiler.py", "nbtune/runtimes/profile_samples.py",
    "nbtune/runtimes/model_key.py", "nbtune/engine/", "nbtune/core/", "nbtune/workloads/",
    "nbtune/allocators/profiling.py", "nbtune/allocators/profile_summary.py",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine
KEY_FIGURES = ("median_abs_error_pct", "decisions_agree")
ERROR_MAX_PCT = 5.0  # the median over the rounds of |predicted / measured - 1|, in %


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--max-budget", type=float, default=9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rounds = []
    for i in range(args.rounds):
        print(f"--- round {i + 1}/{args.rounds} (load average {os.getloadavg()[0]:.2f})",
              flush=True)
        rounds.append(one_round(args.trials, args.max_budget, args.seed))
    median = statistics.median(abs(r["error_pct"]) for r in rounds)
    agree = all(r["decisions_agree"] for r in rounds)
    print(f"median |error| {median:.2f} % over {len(rounds)} rounds; decisions "
          + ("agree in every round" if agree else "differ in some round"))
    record({
        "name": "sim_fidelity",
        "figures": {"trials": args.trials, "rounds": len(rounds),
                    "median_abs_error_pct": round(median, 2), "decisions_agree": agree,
                    "per_round": rounds},
        "goal": {"median_abs_error_pct_max": ERROR_MAX_PCT},
        "met": bool(median <= ERROR_MAX_PCT),
    })


def one_round(trials: int, max_budget: float, seed: int) -> dict:
    """One real demo run and its replay on the simulator: the figures of that round."""
    from nbtune.demo import run_demo
    from nbtune.replay import decisions, replay_in_simulator
    from nbtune.workloads import TraceWorkload

    with tempfile.TemporaryDirectory() as tmp:
        res = run_demo(trials=trials, max_budget=max_budget, seed=seed,
                       store=Path(tmp) / "store", report=Path(tmp) / "r.html", out=io.StringIO())
    real = res.experiment
    trace = TraceWorkload.from_experiment(real)
    sim = replay_in_simulator(real, algorithm="asha", seed=seed, max_budget=max_budget,
                              num_trials=trials, allocator="waterfill",
                              allocator_options={"c": 2}, trace=trace)
    measured, predicted = float(real.makespan), float(sim.makespan)
    err = predicted / measured - 1.0
    diffs = decisions(real).differences(decisions(sim))
    cold = max((t for tr in trace.trials.values() for t in tr.launches.values()), default=0.0)
    print(f"real run: {len(real.engine.trials)} trials, makespan {measured:.2f} s "
          f"(wall {res.wall:.1f} s with cluster start)")
    print(f"trace: median launch {trace.launch_overhead * 1e3:.0f} ms, slowest launch {cold:.2f} s")
    print(f"simulator: makespan {predicted:.2f} s ({err:+.1%}); decisions "
          + ("agree" if not diffs else f"differ in {len(diffs)} places: {diffs[:6]}"), flush=True)
    return {"measured_makespan_s": round(measured, 2), "predicted_makespan_s": round(predicted, 2),
            "error_pct": round(100 * err, 2), "decisions_agree": not diffs,
            "decision_differences": len(diffs),
            "median_launch_s": round(trace.launch_overhead, 3), "slowest_launch_s": round(cold, 2)}


if __name__ == "__main__":
    main()
