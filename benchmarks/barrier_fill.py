"""Barrier filling on the real Dask runtime: SyncBOHB one bracket at a time, with and without.

A synchronous algorithm hands out a rung and waits for its last straggler;
every worker whose trial finished early idles meanwhile (Fluid §2.2). With
``fill_barriers=True`` the engine continues the rung's likely promotions on
those workers speculatively (``nbtune.engine.barrier_fill``): their reports
are kept from the algorithm until the rung closes, so every trial's results
are those of the run without filling; only when the work runs changes.

Workload: a real PyTorch MLP on scikit-learn's breast-cancer data, one epoch
per budget unit, checkpointing every epoch. Its ``batch`` hyperparameter sets
how long an epoch takes, so epoch times differ up to 8x between
configurations: the stragglers that make barriers. ``NBTUNE_BENCH_WORK=io``
(default): one pass of training (8 → 57 optimizer steps, 64 → 8) after a
wait for the epoch's data of 0.25 s × 8/batch, so the stragglers' time is
off the CPU and the machine's other load barely moves the makespan;
``NBTUNE_BENCH_WORK=cpu``: 16 passes, no wait (all CPU: on a shared 2-core
machine the makespan then follows the other sessions' load).
SyncBOHB (η = 3, budgets 1–9, ``pipeline_brackets=False``: Fluid's §6.2
setting), its first two brackets (14 configurations), on a real 2-worker
LocalCluster (one thread each, each worker one CPU "GPU"), FIFO placement.
Off and on run alternately, every run with the same seed (so the same
configurations); figures are medians over the rounds. Filling here is both
kinds the engine does: speculative continuation of a rung's likely
promotions, and the next bracket started in the last rung's tail.

Goal: makespan reduction > 0 (median) and, in every pair, the same
configurations and bit-identical results (every report of every trial).
Prints its figures and ends with one JSON line.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _results import record  # benchmarks/_results.py: notes the load at start

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROUNDS = int(os.environ.get("NBTUNE_BENCH_ROUNDS", "3"))
TRIALS = int(os.environ.get("NBTUNE_BENCH_TRIALS", "14"))
ALLOCATOR = os.environ.get("NBTUNE_BENCH_ALLOCATOR", "fifo")
SEED = int(os.environ.get("NBTUNE_BENCH_SEED", "100"))
#: "io": an epoch is one pass of real training plus a wait for its data that grows as the
#: batch shrinks (the stragglers' time is off the CPU, so the shared machine's load barely
#: moves it); "cpu": 16 passes of real training, no wait (the stragglers' time is CPU time)
WORK = os.environ.get("NBTUNE_BENCH_WORK", "io")
PASSES = 16 if WORK == "cpu" else 1
LOAD_S = 0.0 if WORK == "cpu" else 0.25  # seconds of data wait per epoch at batch 8


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/engine/", "nbtune/algorithms/bohb.py", "nbtune/algorithms/hyperband.py",
    "nbtune/allocators/fifo.py", "nbtune/runtimes/dask/",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine


def train_mlp(config, trial):
    """A 2-layer MLP on breast cancer; an epoch's time grows as ``batch`` shrinks."""
    import torch

    from benchmarks.real_allocators import breast_cancer_mlp  # the same data and model

    model, opt, xtr, ytr, xva, yva, start = breast_cancer_mlp(config, trial)
    ntr = len(xtr)
    bs = int(config["batch"])
    for epoch in range(start + 1, 10):
        time.sleep(LOAD_S * 8 / bs)  # waiting for this epoch's data (0 in "cpu" mode)
        for _ in range(PASSES):
            for i in range(0, ntr, bs):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(xtr[i:i + bs]), ytr[i:i + bs])
                loss.backward()
                opt.step()
        with torch.no_grad():
            val = torch.nn.functional.cross_entropy(model(xva), yva).item()
        trial.checkpoint({"model": model.state_dict(), "opt": opt.state_dict(),
                          "epoch": epoch}, step=epoch)
        if trial.report(epoch, loss=val):
            return


def space():
    from nbtune.core.space import choice, loguniform

    return {"lr": loguniform(1e-3, 3e-1), "hidden": choice([16, 64]),
            "batch": choice([8, 16, 32, 64])}


def outcome(exp) -> list[tuple]:
    """Every trial's configuration, end state and every report (budget, metrics): no times."""
    return [(t.trial_id, sorted(t.config.items()), t.state.value,
             [(b, sorted(m.items())) for _, b, m in t.results])
            for t in sorted(exp.engine.trials.values(), key=lambda t: t.trial_id)]


def fill_seconds(engine) -> float:
    """Worker-seconds the speculative (fill) launches held, from the engine's allocation log."""
    log, total = engine.ledger.log, 0.0
    for rec in engine.fill_log:
        for r in log[rec.log_index:rec.log_index + len(rec.placement)]:
            total += (engine.time if r.end is None else r.end) - r.start
    return total


def tail_overlap(engine) -> float:
    """Seconds each bracket started before the previous one ended (the tail filled), summed."""
    of = engine.algorithm._bracket_of
    span: dict[int, tuple[float, float]] = {}
    for t in engine.trials.values():
        b = of[t.trial_id].index
        lo, hi = span.get(b, (float("inf"), 0.0))
        span[b] = (min(lo, t.start_time), max(hi, t.end_time or engine.time))
    return sum(max(span[b - 1][1] - span[b][0], 0.0) for b in span if b - 1 in span)


def one_run(client, fill: bool, seed: int, ckpt: Path) -> dict:
    import nbtune
    from nbtune.allocators.bubble_windows import ledger_idle_windows
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(client, checkpoint_dir=ckpt, warm_processes=2, preload=("torch",))
    t0 = time.perf_counter()
    exp = nbtune.tune(train_mlp, space(), algorithm="sync-bohb", eta=3, metric="loss",
                      max_budget=9, num_trials=TRIALS, pipeline_brackets=False,
                      fill_barriers=fill, allocator=ALLOCATOR, runtime=rt, seed=seed)
    ok = exp.runtime.wait(300)
    wall = time.perf_counter() - t0
    rt.close()
    if not ok:
        raise RuntimeError(f"fill_barriers={fill} did not finish in 300 s (a hang)")
    eng = exp.engine
    idle = ledger_idle_windows(eng.ledger.log, [g.gpu_id for g in eng.cluster.gpus], eng.time)
    outcomes = [r.outcome for r in eng.fill_log]
    return {"wall": wall, "makespan": exp.makespan, "outcome": outcome(exp),
            "fill_launches": len(eng.fill_log), "fill_seconds": fill_seconds(eng),
            "adopted": outcomes.count("adopted"), "retired": outcomes.count("retired"),
            "yielded": outcomes.count("yielded"), "tail_overlap": tail_overlap(eng),
            "idle_seconds": sum(w.end - w.start for w in idle),
            "errors": sum(t.state.value == "error" for t in eng.trials.values())}


def main() -> None:
    import distributed

    tmp = Path(tempfile.mkdtemp(prefix="nbtune-barrier-fill-"))
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None,
                                       resources={"GPU": 1})
    client = distributed.Client(cluster, set_as_default=False)
    runs: dict[bool, list[dict]] = {False: [], True: []}
    identical = []
    try:
        one_run(client, False, 0, tmp / "warm-up")  # imports, warm processes: not counted
        for r in range(ROUNDS):
            order = (False, True) if r % 2 == 0 else (True, False)
            pair = {}
            for fill in order:
                res = one_run(client, fill, SEED, tmp / f"ckpt-{fill}-{r}")
                pair[fill] = res
                runs[fill].append(res)
                print(f"round {r} fill={fill!s:5s} makespan {res['makespan']:6.2f} s  "
                      f"wall {res['wall']:6.2f} s  fill launches {res['fill_launches']:3d}  "
                      f"fill {res['fill_seconds']:5.2f} s (adopted {res['adopted']}, retired "
                      f"{res['retired']}, yielded {res['yielded']})  next bracket early "
                      f"{res['tail_overlap']:5.2f} s  idle "
                      f"{res['idle_seconds']:5.2f} s  errors {res['errors']}  "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
            identical.append(pair[False]["outcome"] == pair[True]["outcome"])
    finally:
        client.close()
        cluster.close()
    med = {k: statistics.median(x["makespan"] for x in v) for k, v in runs.items()}
    reduction = 100.0 * (med[False] - med[True]) / med[False]
    errors = sum(x["errors"] for v in runs.values() for x in v)
    print(f"makespan median: off {med[False]:.2f} s, on {med[True]:.2f} s, "
          f"reduction {reduction:.1f} %; identical results in {sum(identical)}/{len(identical)} "
          f"pairs; errors {errors}")
    figures = {"makespan_off_s": med[False], "makespan_on_s": med[True],
               "reduction_pct": reduction, "identical_pairs": sum(identical),
               "pairs": len(identical), "errors": errors, "rounds": ROUNDS, "trials": TRIALS, "seed": SEED, "work": WORK,
               "allocator": ALLOCATOR,
               "makespans_off": [x["makespan"] for x in runs[False]],
               "makespans_on": [x["makespan"] for x in runs[True]],
               "fill_launches_on": [x["fill_launches"] for x in runs[True]],
               "fill_seconds_on": [x["fill_seconds"] for x in runs[True]],
               "idle_worker_s_on": [x["idle_seconds"] for x in runs[True]],
               "next_bracket_early_s_on": [x["tail_overlap"] for x in runs[True]],
               "idle_worker_s_off": [x["idle_seconds"] for x in runs[False]],
               "load_avg_end": os.getloadavg()[0]}
    goal = {"reduction_pct_min_exclusive": 0.0, "identical_results": True, "errors": 0}
    met = reduction > 0 and all(identical) and errors == 0
    record({"name": "barrier_fill", "figures": figures, "goal": goal, "met": met})


if __name__ == "__main__":
    main()
