"""gpu_packing: small trials on one real GPU, packed (MPS) vs FIFO vs Optuna, side by side.

The premise of water-filling and the knapsack (Fluid §4.2.2, HyperSack §IV):
a small model leaves most of a GPU idle, so several trials packed onto it
finish sooner than the same trials one after another. On CPU stand-ins that
premise is false (``real_allocators``); this is the check on a real GPU.

Workload: vs_peers' digits CNN (its ``data``, ``make`` and ``epoch``: scikit-learn's
8x8 digits, two conv layers, SGD), data on the GPU, 2 passes per epoch, ASHA (η = 3, 1–9
epochs), ``TRIALS`` trials, the search space of vs_peers. One dask-cuda
LocalCUDACluster (one worker per GPU, MPS when ``nvidia-cuda-mps-control``
is there) serves every nbtune run. Systems, alternating, in rounds:

* nbtune ``fifo``: one trial at a time per GPU (what a user gets from a plain queue);
* nbtune ``auto`` (the default): FIFO until the profiler measures that packing pays;
* nbtune ``waterfill``: Fluid's water-filling, packing from the start;
* Optuna ``n_jobs=1`` in-process on the same GPU, SuccessiveHalvingPruner (when installed).

"Once profiled" as in ``real_allocators``: one uncounted ``auto`` run first
measures the model into the store every counted run reads; its own wall time
is printed too (the cost of the first run of a new model).

Goal: ``auto`` ≥ 1.5x faster than ``fifo`` (median wall time) with 0 errors.
Prints its figures and ends with one JSON line; without a GPU it says so and
``met`` is false.

Run (GPU machine, dask-cuda installed): ``PYTHONPATH=$PWD python benchmarks/gpu_packing.py``.
``--cpu`` runs the same script on CPU stand-ins (a 2-worker LocalCluster), to check the
script itself where there is no GPU; its figures say nothing about GPUs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cloudpickle
from _results import record  # benchmarks/_results.py: notes the load at start

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROUNDS = int(os.environ.get("NBTUNE_BENCH_ROUNDS", "2"))
TRIALS = int(os.environ.get("NBTUNE_BENCH_TRIALS", "27"))
MAX_EPOCHS = 9
SYSTEMS = ["fifo", "auto", "waterfill", "optuna"]

import vs_peers  # noqa: E402  (the workload: data, model and epoch on NBTUNE_BENCH_DEVICE)
from vs_peers import epoch, make  # noqa: E402

cloudpickle.register_pickle_by_value(vs_peers)  # trial processes need not find the module


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/allocators/", "nbtune/runtimes/dask/", "nbtune/runtimes/profiler.py",
    "nbtune/algorithms/asha.py", "benchmarks/vs_peers.py",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine
KEY_FIGURES = ("speed_vs_fifo/auto", "errors")  # the figures summary.py shows (paths into figures)
RUNS_ON = ("gpu",)  # devices it has a mode for (default: cpu)


def train(config, trial):
    """The Optuna/Ray-style loop: train from epoch 1, report each epoch, stop when told."""
    model, opt = make(config)
    for e in range(1, MAX_EPOCHS + 1):
        if trial.report(e, val_acc=epoch(model, opt, config, e)):
            return


def space() -> dict[str, Any]:
    from nbtune import choice, loguniform, uniform

    return {"lr": loguniform(1e-3, 0.3), "momentum": uniform(0.5, 0.99),
            "channels": choice([8, 16, 32]), "batch_size": choice([16, 32, 64]),
            "weight_decay": loguniform(1e-6, 1e-2)}


def run_nbtune(client: Any, allocator: str, db: Path, seed: int) -> dict[str, Any]:
    import nbtune
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(client, warm_processes=4, sample_interval=0.5)
    t0 = time.perf_counter()
    exp = nbtune.tune(train, space(), algorithm="asha", eta=3, metric="val_acc", mode="max",
                      max_budget=MAX_EPOCHS, num_trials=TRIALS, allocator=allocator,
                      runtime=rt, seed=seed, store=db)
    ok = exp.wait(600)
    wall = time.perf_counter() - t0
    rt.close()
    if not ok:
        raise RuntimeError(f"{allocator} did not finish in 600 s")
    trials = list(exp.engine.trials.values())
    alloc = exp.allocations()
    return {"wall": wall, "best": max((t.best or 0.0) for t in trials),
            "epochs": sum(t.budget_used + t.recomputed for t in trials),
            "errors": sum(t.state.value == "error" for t in trials),
            "packed": int((alloc["share"] < 1).sum()),  # allocations that shared a GPU
            "mps": bool(rt.mps),
            "profile": [{"c": p.c, "c_measured": p.c_measured, "unit_time": p.unit_time,
                         "memory_gb": p.demand.memory_gb, "compute": p.demand.compute}
                        for p in rt.profiler.measured().values()]}


def run_optuna(seed: int) -> dict[str, Any] | None:
    """vs_peers' Optuna run (``n_jobs=1``, SuccessiveHalvingPruner), with this space and size."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        return None
    return vs_peers.run_optuna(1, channels=(8, 16, 32), trials=TRIALS, max_epochs=MAX_EPOCHS,
                               seed=seed)


def main() -> None:
    import distributed
    import torch

    from nbtune.runtimes.dask import gpu

    cpu = "--cpu" in sys.argv[1:]
    # before the cluster starts: its workers, and their trial processes, inherit it
    os.environ["NBTUNE_BENCH_DEVICE"] = "cpu" if cpu else "cuda"
    if not cpu and (gpu.nvml_gpu_count() == 0 or not torch.cuda.is_available()):
        print("no GPU here: gpu_packing measures nothing on CPU stand-ins (see real_allocators)")
        print(json.dumps({"name": "gpu_packing", "figures": {"gpu": None},
                          "goal": {"auto_vs_fifo_min": 1.5, "errors": 0}, "met": False}))
        return
    tmp = Path(tempfile.mkdtemp(prefix="nbtune-gpu-packing-"))
    db = tmp / "nb.db"
    cluster = (distributed.LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                                        dashboard_address=None, resources={"GPU": 1})
               if cpu else gpu.make_cuda_cluster("127.0.0.1", None))
    client = distributed.Client(cluster, set_as_default=False)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    t_start = time.perf_counter()
    try:
        first = run_nbtune(client, "auto", db, 0)
        print(f"first run of the model (auto, profiling, not counted): {first}", flush=True)
        for r in range(ROUNDS):
            for s in (SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]):
                res = run_optuna(100 + r) if s == "optuna" else run_nbtune(client, s, db, 100 + r)
                if res is None:
                    continue
                runs[s].append(res)
                print(f"round {r} {s:10s} {res['wall']:6.1f} s  epochs {res['epochs']:4.0f}  "
                      f"best {res['best']:.4f}  errors {res['errors']}  "
                      f"packed {res.get('packed', '-')}", flush=True)
    finally:
        client.close()
        cluster.close()
    med = {s: statistics.median(x["wall"] for x in v) for s, v in runs.items() if v}
    speed = {s: med["fifo"] / m for s, m in med.items()}
    errors = sum(x["errors"] for v in runs.values() for x in v)
    device = "cpu stand-ins" if cpu else torch.cuda.get_device_name()
    for s in med:
        print(f"{s:10s} median {med[s]:6.1f} s  {speed[s]:.2f}x FIFO's speed")
    goal = {"auto_vs_fifo_min": 1.5, "errors": 0}
    met = speed["auto"] >= goal["auto_vs_fifo_min"] and errors == 0
    record({"name": "gpu_packing", "figures": {
        "device": device, "median_s": med, "speed_vs_fifo": speed, "errors": errors,
        "first_auto_run_s": first["wall"], "first_auto_profile": first["profile"],
        "best": {s: max(x["best"] for x in v) for s, v in runs.items() if v},
        "epochs": {s: [x["epochs"] for x in v] for s, v in runs.items() if v},
        "mps": first["mps"], "rounds": ROUNDS, "trials": TRIALS, "passes": vs_peers.PASSES,
        "total_s": time.perf_counter() - t_start}, "goal": goal, "met": met}, gpu=not cpu)


if __name__ == "__main__":
    main()
