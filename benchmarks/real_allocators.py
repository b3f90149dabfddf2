"""The allocators on the real Dask runtime, once profiled: none slower than FIFO.

One real small workload — a PyTorch MLP on scikit-learn's breast-cancer
data set, ASHA (η = 3, 1–9 epochs) — on a real 2-worker LocalCluster (one
thread each, each worker one CPU "GPU"), under ``fifo``, ``waterfill``,
``knapsack-wfd``, ``fluid+knapsack`` and ``auto``, alternating, in rounds.
The training function is written the ordinary way (train from epoch 1,
report each epoch, return when told) and also checkpoints: Fluid's resizes
(and ASHA's promotions, in promotion mode) relaunch trials, and a relaunch
must resume from its checkpoint.

"Once profiled": a first, uncounted ``auto`` run measures the model (time
alone, its probe of two packed trials, CPU share and memory) into a store;
every counted run uses that store, so each policy starts knowing the
measured c, d and demand — as the second run of a model in a notebook does.

Goal: ``auto`` ≤ FIFO's makespan (median over rounds), and every allocator
≤ 1.05x FIFO's. Prints its figures and ends with one JSON line. The machine
is shared: timings are taken side by side, alternating, and the load
average is printed.
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

ALLOCATORS = ["fifo", "waterfill", "knapsack-wfd", "fluid+knapsack", "auto"]
ROUNDS = int(os.environ.get("NBTUNE_BENCH_ROUNDS", "3"))
TRIALS = int(os.environ.get("NBTUNE_BENCH_TRIALS", "18"))


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/allocators/", "nbtune/runtimes/dask/", "nbtune/runtimes/profiler.py",
    "nbtune/algorithms/asha.py", "nbtune/engine/",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine
KEY_FIGURES = ("vs_fifo/auto", "errors")  # the figures summary.py shows (paths into figures)


def breast_cancer_mlp(config, trial):
    """Breast cancer (80/20 split, standardised) and a 2-layer MLP with SGD, initialised alike
    in every process (torch seeded), then restored from the trial's checkpoint if it has one:
    ``(model, opt, xtr, ytr, xva, yva, epochs_done)``."""
    import torch
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = load_breast_cancer(return_X_y=True)
    x = StandardScaler().fit_transform(x)
    idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    xt = torch.tensor(x, dtype=torch.float32)[idx]
    yt = torch.tensor(y, dtype=torch.long)[idx]
    ntr = int(0.8 * len(xt))
    model = torch.nn.Sequential(torch.nn.Linear(30, config["hidden"]), torch.nn.ReLU(),
                                torch.nn.Linear(config["hidden"], 2))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    state = trial.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    start = 0 if state is None else state["epoch"]
    return model, opt, xt[:ntr], yt[:ntr], xt[ntr:], yt[ntr:], start


def train_mlp(config, trial):
    """A 2-layer MLP on breast cancer, one epoch per report; resumes from its checkpoint."""
    import torch

    model, opt, xtr, ytr, xva, yva, start = breast_cancer_mlp(config, trial)
    ntr = len(xtr)
    for epoch in range(start + 1, 10):
        for _ in range(32):  # 32 passes over the training split per epoch: ~0.4 s alone
            for i in range(0, ntr, 32):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(xtr[i:i + 32]), ytr[i:i + 32])
                loss.backward()
                opt.step()
        with torch.no_grad():
            acc = (model(xva).argmax(1) == yva).float().mean().item()
        trial.checkpoint({"model": model.state_dict(), "opt": opt.state_dict(),
                          "epoch": epoch}, step=epoch)
        if trial.report(epoch, acc=acc):
            return


def space():
    from nbtune.core.space import choice, loguniform

    return {"lr": loguniform(1e-3, 3e-1), "hidden": choice([32])}


def one_run(client, allocator: str, db: Path, seed: int, ckpt: Path) -> tuple[float, int, dict]:
    import nbtune
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(client, checkpoint_dir=ckpt, warm_processes=2, preload=("torch",))
    t0 = time.perf_counter()
    exp = nbtune.tune(train_mlp, space(), algorithm="asha", eta=3, metric="acc", mode="max",
                      max_budget=9, num_trials=TRIALS, allocator=allocator, runtime=rt,
                      seed=seed, store=db)
    ok = exp.wait(600)
    wall = time.perf_counter() - t0
    rt.close()
    if not ok:
        raise RuntimeError(f"{allocator} did not finish in 600 s")
    errors = sum(t.state.value == "error" for t in exp.engine.trials.values())
    prof = {sig: {"c": p.c, "d": p.d, "unit_time": p.unit_time, "packing": p.packing,
                  "compute": p.demand.compute, "memory_gb": p.demand.memory_gb}
            for sig, p in rt.profiler.measured().items()}
    return wall, errors, prof


def main() -> None:
    import distributed

    tmp = Path(tempfile.mkdtemp(prefix="nbtune-real-alloc-"))
    db = tmp / "nb.db"
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None,
                                       resources={"GPU": 1})
    client = distributed.Client(cluster, set_as_default=False)
    times: dict[str, list[float]] = {a: [] for a in ALLOCATORS}
    errors = 0
    try:
        wall, err, prof = one_run(client, "auto", db, 0, tmp / "ckpt-profile")
        print(f"profiling run (auto, not counted): {wall:.1f} s, profile {prof}")
        for r in range(ROUNDS):
            order = ALLOCATORS if r % 2 == 0 else ALLOCATORS[::-1]
            for a in order:
                wall, err, _ = one_run(client, a, db, 100 + r, tmp / f"ckpt-{a}-{r}")
                times[a].append(wall)
                errors += err
                print(f"round {r} {a:15s} {wall:6.1f} s  errors {err}  "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        client.close()
        cluster.close()
    med = {a: statistics.median(v) for a, v in times.items()}
    fifo = med["fifo"]
    ratio = {a: med[a] / fifo for a in ALLOCATORS}
    for a in ALLOCATORS:
        print(f"{a:15s} median {med[a]:6.1f} s  x FIFO {ratio[a]:.2f}  runs {times[a]}")
    goal = {"auto_vs_fifo_max": 1.0, "every_vs_fifo_max": 1.05, "errors": 0}
    met = ratio["auto"] <= 1.0 and max(ratio.values()) <= 1.05 and errors == 0
    record({"name": "real_allocators",
            "figures": {"median_s": med, "vs_fifo": ratio, "errors": errors,
                        "rounds": ROUNDS, "trials": TRIALS,
                        "load_avg_end": os.getloadavg()[0]},
            "goal": goal, "met": met})


if __name__ == "__main__":
    main()
