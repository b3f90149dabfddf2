"""store_overhead: what recording into the SQLite store costs a run, and how fast resume replays.

Run: ``python benchmarks/store_overhead.py`` (``--trials`` / ``--gpus`` to vary).
The same simulated Hyperband job runs without a store and with one (a SQLite
file, background writer); the simulator is the worst case for the recorder,
since it produces events thousands of times faster than a real cluster.
Then the job is crashed halfway (``SimRuntime(max_events=...)``) and resumed:
``replay_cpu_s`` is the CPU time to rebuild the engine from the stored event log.
CPU time (all threads) is compared rather than wall time, which on a shared
machine measures the neighbours. Goals: recording costs at most 150 us of CPU
per event (a real cluster sends a few hundred events per second at most, so
that is a few percent of one core), every report is in the store when
``tune`` returns, and replay rebuilds the engine at >= 10,000 events/s of CPU
(a day-long experiment of 100,000 events resumes in about 10 s).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

from _results import record  # benchmarks/_results.py: notes the load at start

import nbtune
from nbtune import SimRuntime, SyntheticWorkload, loguniform, uniform
from nbtune.runtimes.sim import SimulationError
from nbtune.store import RestartableEngine, Store, replay
from nbtune.store.resume import rebuild_algorithm, rebuild_allocator

# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/store/", "nbtune/runtimes/sim.py", "nbtune/engine/", "nbtune/runtimes/profiler.py",
    "nbtune/runtimes/profile_samples.py", "nbtune/runtimes/model_key.py", "nbtune/core/",
    "nbtune/workloads/", "nbtune/allocators/profiling.py",
    "nbtune/allocators/profile_summary.py",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--gpus", type=int, default=64)
    p.add_argument("--max-budget", type=float, default=27)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)

    space = {"lr": loguniform(1e-4, 1e-1), "wd": uniform(0, 0.1), "dropout": uniform(0, 0.5)}
    wl = SyntheticWorkload(space, unit_time=lambda c: 20.0 + 200.0 * c["dropout"],
                           launch_overhead=5.0, max_budget_hint=a.max_budget, seed=a.seed)
    kw = dict(algorithm="hyperband", metric="loss", max_budget=a.max_budget,
              num_trials=a.trials, seed=a.seed)

    t0, c0 = time.perf_counter(), time.process_time()
    plain = nbtune.tune(wl, runtime=SimRuntime(cluster=a.gpus), **kw)
    wall_plain, cpu_plain = time.perf_counter() - t0, time.process_time() - c0
    events = plain.runtime.events_processed

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.db"
        t0, c0 = time.perf_counter(), time.process_time()
        rec = nbtune.tune(wl, runtime=SimRuntime(cluster=a.gpus), store=path, name="full", **kw)
        wall_store, cpu_store = time.perf_counter() - t0, time.process_time() - c0
        st = Store(path)
        stored_reports = len(st.learning_curves("full"))
        reports = len(rec.learning_curves())

        half = events // 2
        with contextlib.suppress(SimulationError):
            nbtune.tune(wl, runtime=SimRuntime(cluster=a.gpus, max_events=half), store=path,
                        name="crashed", **kw)
        log = st.event_log("crashed")
        row = st.experiment("crashed")
        c0 = time.process_time()  # CPU time: on a shared machine wall time measures neighbours
        eng = RestartableEngine(rebuild_algorithm(row), rebuild_allocator(row),
                                hints={"workload": wl})
        n_events = sum(len(e) for e, _ in log)
        replay(eng, log)
        replay_s = time.process_time() - c0
        t0 = time.perf_counter()
        resumed = nbtune.resume("crashed", store=st, trainable=wl,
                                runtime=SimRuntime(cluster=a.gpus))
        resume_s = time.perf_counter() - t0
        db_mb = path.stat().st_size / 1e6

    same_best = resumed.best["loss"] == rec.best["loss"]
    figures = {
        "trials": int(len(plain.results())),
        "gpus": a.gpus,
        "events": events,
        "wall_no_store_s": round(wall_plain, 3),
        "wall_store_s": round(wall_store, 3),
        "cpu_no_store_s": round(cpu_plain, 3),
        "cpu_store_s": round(cpu_store, 3),
        "cpu_overhead": round(cpu_store / cpu_plain - 1, 3),
        "recorder_cpu_us_per_event": round((cpu_store - cpu_plain) / events * 1e6, 1),
        "reports": reports,
        "reports_stored": stored_reports,
        "commits": rec.recorder.commits,
        "db_mb": round(db_mb, 2),
        "replayed_events": n_events,
        "replay_cpu_s": round(replay_s, 3),
        "replay_events_per_s": round(n_events / replay_s),
        "resume_total_s": round(resume_s, 3),
        "resumed_same_best": bool(same_best),
    }
    for k, v in figures.items():
        print(f"{k:>22}: {v}")
    goal = {"recorder_cpu_us_per_event_max": 150, "reports_stored": "all",
            "replay_events_per_s_min": 10_000}
    met = (figures["recorder_cpu_us_per_event"] <= 150 and stored_reports == reports
           and figures["replay_events_per_s"] >= 10_000)
    out = {"name": "store_overhead", "figures": figures, "goal": goal, "met": bool(met)}
    record(out)
    return out


if __name__ == "__main__":
    main()
