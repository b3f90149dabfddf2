"""sim_scale: how the simulator's cost per event grows with the cluster, per allocator.

Run: ``python benchmarks/sim_scale.py`` (``--gpus`` / ``--allocators`` / ``--trials-per-gpu``
/ ``--max-events`` / ``--rounds``).

ASHA with 10 trials per GPU on 64, 512 and 4,096 simulated GPUs (8 per node), under FIFO,
DynamicFluid (``"waterfill"``) and ``"fluid+knapsack"``; the ``sim_speed`` workload with
the cifar10 row's α, β, c, d, ε (``sim_speed_fluid.py``). For each allocator and size: the
events simulated, events per second and wall time per event (the median of ``--rounds``
runs). Goal: wall time per event at 4,096 GPUs at most twice that at 64, per allocator (a
what-if at thousands of GPUs costs what one at tens does, per event).

The water-filling allocators look at every running trial on every decision, so their full
runs at 4,096 GPUs (40,960 trials) take a long time; ``--max-events N`` stops each run after
N events and times those (the figure then says ``partial``: an early stretch of the run,
mostly launches and first reports, not the whole of it), and no growth is computed from a
partial row (its ``growth`` is null and ``met`` false).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _results import record  # benchmarks/_results.py: notes the load at start
from sim_speed import workload
from sim_speed_fluid import FLUID

import nbtune
from nbtune import SimRuntime
from nbtune.core.resources import ClusterSpec
from nbtune.runtimes.sim import SimulationError

GROWTH_MAX = 2.0  # wall time per event at the largest size / at the smallest, per allocator
SIZES = (64, 512, 4096)
ALLOCATORS = ("fifo", "waterfill", "fluid+knapsack")

# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/runtimes/sim.py", "nbtune/engine/", "nbtune/algorithms/asha.py",
    "nbtune/allocators/", "nbtune/runtimes/profiler.py", "nbtune/runtimes/profile_samples.py",
    "nbtune/runtimes/model_key.py", "nbtune/core/", "nbtune/workloads/",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine
KEY_FIGURES = ("growth/fifo", "growth/waterfill", "growth/fluid+knapsack")


def scale_run(allocator: str, gpus: int, trials: int, max_events: int | None,
              max_budget: float = 81, seed: int = 0) -> dict[str, Any]:
    """One simulated ASHA run: events, wall and CPU time (to ``max_events`` if given)."""
    space, wl = workload(max_budget, seed, alpha=FLUID["alpha"], beta=FLUID["beta"])
    sim = SimRuntime(cluster=ClusterSpec.homogeneous(gpus, gpus_per_node=8),
                     resize_overhead=FLUID["eps"])
    if max_events is not None:
        sim.max_events = max_events
    options = {} if allocator == "fifo" else {
        "c": FLUID["c"], "d": FLUID["d"], "resize_overhead": FLUID["eps"]}
    partial = False
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        nbtune.tune(wl, space, algorithm="asha", metric="loss", mode="min",
                    max_budget=max_budget, num_trials=trials, runtime=sim, seed=seed,
                    allocator=allocator, allocator_options=options)
    except SimulationError:  # stopped at max_events: the events so far are timed
        partial = True
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = sim.events_processed
    return {"events": n, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "events_per_s": round(n / wall) if wall > 0 else None,
            "us_per_event": round(1e6 * wall / n, 1) if n else None,
            "cpu_us_per_event": round(1e6 * cpu / n, 1) if n else None, "partial": partial}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--gpus", default=",".join(map(str, SIZES)),
                   help="cluster sizes, comma-separated (default 64,512,4096)")
    p.add_argument("--allocators", default=",".join(ALLOCATORS))
    p.add_argument("--trials-per-gpu", type=int, default=10)
    p.add_argument("--max-events", type=int, default=None,
                   help="stop each run after this many events (its figures say partial)")
    p.add_argument("--rounds", type=int, default=1)
    a = p.parse_args(argv)
    sizes = sorted(int(x) for x in a.gpus.split(","))
    allocators = a.allocators.split(",")

    for name in allocators:  # imports and first calls out of the timed runs
        scale_run(name, 8, 16, a.max_events)
    figures: dict[str, Any] = {"trials_per_gpu": a.trials_per_gpu, "gpus": sizes,
                               "max_events": a.max_events}
    met = sizes[0] <= 64 and sizes[-1] >= 4096 and a.trials_per_gpu >= 10
    for name in allocators:
        rows: dict[str, Any] = {}
        for g in sizes:
            runs = [scale_run(name, g, g * a.trials_per_gpu, a.max_events)
                    for _ in range(a.rounds)]
            r = dict(sorted(runs, key=lambda x: x["wall_s"])[len(runs) // 2])  # the median run
            if a.rounds > 1:
                r["rounds_us_per_event"] = [x["us_per_event"] for x in runs]
            rows[str(g)] = r
            print(f"{name:>16} {g:>6} GPUs: {r['events']:>9} events, {r['wall_s']:>9.2f} s, "
                  f"{r['events_per_s']:>7} events/s, {r['us_per_event']:>8} us/event"
                  + (" (partial)" if r["partial"] else ""), flush=True)
        first, last = rows[str(sizes[0])], rows[str(sizes[-1])]
        # a partial run times its first stretch only (at 4,096 GPUs the first thousands of
        # events are the launch burst's starts, handed over 512 at a time): no growth from it
        whole = not (first["partial"] or last["partial"])
        growth = (last["us_per_event"] / first["us_per_event"]
                  if whole and first["us_per_event"] and last["us_per_event"] else None)
        figures[name] = rows
        figures.setdefault("growth", {})[name] = None if growth is None else round(growth, 2)
        met = met and growth is not None and growth <= GROWTH_MAX
    goal: dict[str, Any] = {"growth_max": GROWTH_MAX, "gpus": [64, 4096], "trials_per_gpu": 10,
                            "allocators": list(ALLOCATORS)}
    met = met and set(ALLOCATORS) <= set(allocators)
    print(f"{'growth (us/event largest / smallest)':>40}: {figures['growth']}")
    out = {"name": "sim_scale", "figures": figures, "goal": goal, "met": bool(met)}
    record(out)
    return out


if __name__ == "__main__":
    main()
