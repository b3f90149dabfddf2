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

Besides the wall times, per system: the mean GPU utilization over each run (NVML, sampled
here every 0.25 s, Optuna's runs too; and for nbtune's runs the runtime's own
``Experiment.mean_utilization``), and from the store's event log, for each trial's first
launch, the seconds from the engine's ``Launch`` to the trial process running
(``TrialStarted``: the launch) and to its first report; for the uncounted first run, the
seconds from the ``tune()`` call to its first report (an upper bound: the runtime's clock
starts inside ``tune()``).

Goal: ``auto`` ≥ 1.5x faster than ``fifo`` and ≥ 2x faster than Optuna ``n_jobs=1``
(median wall times of ``ROUNDS`` ≥ 3 rounds), 0 errors, the median launch of nbtune's trials
≤ 0.5 s and the first run's first report ≤ 5 s after ``tune()``. Prints its figures and ends
with one JSON line; without a GPU it says so and ``met`` is false. Interrupted (SIGINT: a
time limit's first signal), it records what the rounds it finished measured, with
``"interrupted": true`` and ``met`` false.

Run (GPU machine, dask-cuda installed):
``PYTHONPATH=$PWD python benchmarks/gpu_packing.py [--reuse | --no-reuse]``. ``--reuse``
passes ``DaskRuntime(reuse_processes=True)`` (a trial process that ended cleanly serves the
next trial of its GPU and MPS share), ``--no-reuse`` False; without either the runtime's
default (GPU: no). Sizes: ``NBTUNE_BENCH_ROUNDS`` (3), ``NBTUNE_BENCH_TRIALS`` (27),
``NBTUNE_BENCH_MAX_EPOCHS`` (9).
``--cpu`` runs the same script on CPU stand-ins (a 2-worker LocalCluster), to check the
script itself where there is no GPU; its figures say nothing about GPUs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
from _results import record  # benchmarks/_results.py: notes the load at start

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROUNDS = int(os.environ.get("NBTUNE_BENCH_ROUNDS", "3"))
TRIALS = int(os.environ.get("NBTUNE_BENCH_TRIALS", "27"))
MAX_EPOCHS = int(os.environ.get("NBTUNE_BENCH_MAX_EPOCHS", "9"))
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
KEY_FIGURES = ("speed_vs_fifo/auto", "auto_vs_optuna", "errors", "launch_s/nbtune",
               "cold_first_report_s")  # the figures summary.py shows (paths into figures)
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


class GpuSampler:
    """Mean NVML utilization of this machine's GPUs while a run goes on (None without NVML).

    It samples from this process, so Optuna's in-process runs and nbtune's trial processes
    are measured alike."""

    def __init__(self, interval: float = 0.25) -> None:
        from nbtune.runtimes.dask import gpu

        self.interval, self.sample = interval, gpu.sample_gpus
        self.indices = list(range(gpu.nvml_gpu_count()))
        self.values: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            got = self.sample(self.indices)
            if got:
                self.values.append(statistics.fmean(u for u, _ in got))

    def __enter__(self) -> GpuSampler:
        if self.indices:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None


def launches(log: list[tuple[list[Any], list[tuple[str, Any]]]]) -> dict[str, Any]:
    """From a store's event log (``Store.event_log``): for each trial's first launch, seconds
    from the engine's ``Launch`` to ``TrialStarted`` (``start``) and to its first report
    (``first_report``); and the time of the run's first report (``first`` seconds after the
    runtime's clock started).

    A batch's commands were decided at the engine's time after its events: the latest event
    time so far (the engine's clock never goes back)."""
    from nbtune.core import events as ev

    now, seen = 0.0, set()
    to_start: dict[int, float] = {}
    to_report: dict[int, float] = {}
    out: dict[str, Any] = {"start": [], "first_report": [], "first": None}
    for events, cmds in log:
        for e in events:
            now = max(now, e.time)
            if type(e) is ev.TrialStarted and e.trial_id in to_start:
                out["start"].append(e.time - to_start.pop(e.trial_id))
            elif type(e) is ev.TrialReported:
                if out["first"] is None:
                    out["first"] = e.time
                if e.trial_id in to_report:
                    out["first_report"].append(e.time - to_report.pop(e.trial_id))
        for kind, payload in cmds:
            tid = int(payload["trial_id"]) if kind == "Launch" else None
            if tid is not None and tid not in seen and float(payload["start_budget"]) == 0:
                seen.add(tid)
                to_start[tid] = to_report[tid] = now
    return out


def warm_processes() -> int:
    """Trial processes each worker keeps started: 4 on a GPU; 1 on CPU stand-ins, whose run
    checks the script (each warm process there costs a core's start-up on a small machine)."""
    return 1 if os.environ["NBTUNE_BENCH_DEVICE"] == "cpu" else 4


def run_nbtune(client: Any, allocator: str, db: Path, seed: int,
               reuse: bool | None) -> dict[str, Any]:
    import nbtune
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(client, warm_processes=warm_processes(), sample_interval=0.5,
                     reuse_processes=reuse)
    try:
        with GpuSampler() as sampler:
            t0 = time.perf_counter()
            exp = nbtune.tune(train, space(), algorithm="asha", eta=3, metric="val_acc",
                              mode="max", max_budget=MAX_EPOCHS, num_trials=TRIALS,
                              allocator=allocator, runtime=rt, seed=seed, store=db)
            called = time.perf_counter() - t0  # tune() returns once the runtime's clock runs
            exp.wait(600)
            wall = time.perf_counter() - t0
        if not exp.done:
            raise RuntimeError(f"{allocator} did not finish in 600 s")
        runtime_util = exp.mean_utilization() if exp.busy_seconds() else None  # unsampled
    finally:
        rt.close()
    exp.recorder.flush()  # every batch in the store before its log is read
    got = launches(exp.store.event_log(exp.name))
    trials = list(exp.engine.trials.values())
    alloc = exp.allocations()
    return {"wall": wall, "best": max((t.best or 0.0) for t in trials),
            "epochs": sum(t.budget_used + t.recomputed for t in trials),
            "errors": sum(t.state.value == "error" for t in trials),
            "packed": int((alloc["share"] < 1).sum()),  # allocations that shared a GPU
            "mps": bool(rt.mps), "gpu_util": sampler.mean, "runtime_util": runtime_util,
            "launch_s": got["start"], "first_report_s": got["first_report"],
            "first_report_after_call_s": None if got["first"] is None else called + got["first"],
            "profile": [{"c": p.c, "c_measured": p.c_measured, "unit_time": p.unit_time,
                         "memory_gb": p.demand.memory_gb, "compute": p.demand.compute}
                        for p in rt.profiler.measured().values()]}


def run_optuna(seed: int) -> dict[str, Any] | None:
    """vs_peers' Optuna run (``n_jobs=1``, SuccessiveHalvingPruner), with this space and size."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        return None
    with GpuSampler() as sampler:
        res = vs_peers.run_optuna(1, channels=(8, 16, 32), trials=TRIALS, max_epochs=MAX_EPOCHS,
                                  seed=seed, given=[])  # its sampler's own draws per seed
    return {**res, "gpu_util": sampler.mean}


def median_or_none(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(runs: dict[str, list[dict[str, Any]]], first: dict[str, Any]) -> dict[str, Any]:
    """The figures of the rounds run so far: medians per system, the launches pooled."""
    med = {s: statistics.median(x["wall"] for x in v) for s, v in runs.items() if v}
    speed = {s: med["fifo"] / m for s, m in med.items()} if "fifo" in med else {}
    nb = [s for s in med if s != "optuna"]
    launch = {s: median_or_none([t for x in runs[s] for t in x["launch_s"]]) for s in nb}
    launch["nbtune"] = median_or_none([t for s in nb for x in runs[s] for t in x["launch_s"]])
    return {
        "median_s": med, "speed_vs_fifo": speed,
        "auto_vs_optuna": (med["optuna"] / med["auto"]
                           if "optuna" in med and "auto" in med else None),
        "errors": sum(x["errors"] for v in runs.values() for x in v),
        "rounds_done": min((len(v) for v in runs.values() if v), default=0),
        "gpu_util": {s: median_or_none([x["gpu_util"] for x in runs[s]]) for s in med},
        "runtime_util": {s: median_or_none([x["runtime_util"] for x in runs[s]]) for s in nb},
        "launch_s": launch,
        "first_report_s": {s: median_or_none([t for x in runs[s] for t in x["first_report_s"]])
                           for s in nb},
        "cold_first_report_s": first["first_report_after_call_s"],
        "cold_launch_s": median_or_none(first["launch_s"]),
        "best": {s: max(x["best"] for x in v) for s, v in runs.items() if v},
        "epochs": {s: [x["epochs"] for x in v] for s, v in runs.items() if v}}


GOAL = {"auto_vs_fifo_min": 1.5, "auto_vs_optuna_min": 2.0, "errors": 0, "rounds_min": 3,
        "launch_median_s_max": 0.5, "cold_first_report_s_max": 5.0}


def met(f: dict[str, Any], interrupted: bool) -> bool:
    def at_most(x: float | None, limit: float) -> bool:
        return x is not None and x <= limit

    def at_least(x: float | None, limit: float) -> bool:
        return x is not None and x >= limit

    return (not interrupted and f["rounds_done"] >= GOAL["rounds_min"] and f["errors"] == 0
            and at_least(f["speed_vs_fifo"].get("auto"), GOAL["auto_vs_fifo_min"])
            and at_least(f["auto_vs_optuna"], GOAL["auto_vs_optuna_min"])
            and at_most(f["launch_s"]["nbtune"], GOAL["launch_median_s_max"])
            and at_most(f["cold_first_report_s"], GOAL["cold_first_report_s_max"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true",
                    help="CPU stand-ins (a 2-worker LocalCluster): checks the script only")
    ap.add_argument("--reuse", action=argparse.BooleanOptionalAction, default=None,
                    help="DaskRuntime(reuse_processes=...): a trial process serves the next "
                         "trial of its GPU and share (default: the runtime's, on a GPU no)")
    args = ap.parse_args()

    import distributed
    import torch

    from nbtune.runtimes.dask import gpu

    cpu = args.cpu
    # before the cluster starts: its workers, and their trial processes, inherit it
    os.environ["NBTUNE_BENCH_DEVICE"] = "cpu" if cpu else "cuda"
    if not cpu and (gpu.nvml_gpu_count() == 0 or not torch.cuda.is_available()):
        print("no GPU here: gpu_packing measures nothing on CPU stand-ins (see real_allocators)")
        print(json.dumps({"name": "gpu_packing", "figures": {"gpu": None},
                          "goal": GOAL, "met": False}))
        return
    tmp = Path(tempfile.mkdtemp(prefix="nbtune-gpu-packing-"))
    db = tmp / "nb.db"
    t_start = time.perf_counter()
    cluster = (distributed.LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                                        dashboard_address=None, resources={"GPU": 1})
               if cpu else gpu.make_cuda_cluster("127.0.0.1", None))
    client = distributed.Client(cluster, set_as_default=False)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    cluster_s = time.perf_counter() - t_start
    interrupted = False
    first: dict[str, Any] | None = None
    try:
        try:
            first = run_nbtune(client, "auto", db, 0, args.reuse)
            print(f"first run of the model (auto, profiling, not counted): {first}", flush=True)
            for r in range(ROUNDS):
                for s in (SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]):
                    res = (run_optuna(100 + r) if s == "optuna"
                           else run_nbtune(client, s, db, 100 + r, args.reuse))
                    if res is None:
                        continue
                    runs[s].append(res)
                    launch = median_or_none(res.get("launch_s", []))
                    print(f"round {r} {s:10s} {res['wall']:6.1f} s  epochs {res['epochs']:4.0f}  "
                          f"best {res['best']:.4f}  errors {res['errors']}  "
                          f"packed {res.get('packed', '-')}  GPU util {res['gpu_util']}  "
                          f"median launch {launch}", flush=True)
        except KeyboardInterrupt:  # a time limit's SIGINT: record the rounds that finished
            interrupted = True
            print("interrupted: recording the rounds that finished", flush=True)
        if first is None:
            raise SystemExit("interrupted before the first run ended: nothing to record")
        # recorded before the cluster closes: a time limit's KILL follows its SIGINT
        finish(runs, first, interrupted, cpu, args.reuse, cluster_s, t_start)
    finally:
        client.close()
        cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)  # the store every run read and wrote


def finish(runs: dict[str, list[dict[str, Any]]], first: dict[str, Any], interrupted: bool,
           cpu: bool, reuse: bool | None, cluster_s: float, t_start: float) -> None:
    import torch

    # whole rounds only (an interrupted round is dropped); Optuna where it is installed
    ran = [s for s in SYSTEMS if s != "optuna" or importlib.util.find_spec("optuna")]
    done = min((len(runs[s]) for s in ran), default=0)
    runs = {s: v[:done] for s, v in runs.items() if v[:done]}
    figures = summarize(runs, first)
    for s, m in figures["median_s"].items():
        print(f"{s:10s} median {m:6.1f} s  {figures['speed_vs_fifo'].get(s, 0):.2f}x FIFO's "
              f"speed  GPU util {figures['gpu_util'][s]}  "
              f"launch {figures['launch_s'].get(s)}")
    device = "cpu stand-ins" if cpu else torch.cuda.get_device_name()
    record({"name": "gpu_packing", "figures": {
        "device": device, **figures, "interrupted": interrupted,
        "first_auto_run_s": first["wall"], "first_auto_profile": first["profile"],
        "mps": first["mps"], "reuse_processes": reuse, "warm_processes": warm_processes(),
        "rounds": ROUNDS, "trials": TRIALS, "max_epochs": MAX_EPOCHS, "passes": vs_peers.PASSES,
        "cluster_start_s": cluster_s,
        "total_s": time.perf_counter() - t_start}, "goal": GOAL,
        "met": met(figures, interrupted)}, gpu=not cpu)

if __name__ == "__main__":
    main()
