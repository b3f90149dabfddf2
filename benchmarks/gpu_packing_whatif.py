"""gpu_packing_whatif: the simulator's answer to gpu_packing, from what the H200 run measured.

A what-if, not a measurement: ``gpu_packing`` on a real GPU is the truth
(``benchmarks/RESULTS.md``, the first GPU run). The workload model is built
from that run's profiles: nine signatures (channels × batch size); seconds
per epoch alone by batch size (16: 0.65 s, 32: 0.28 s, 64: 0.13 s); NVML
compute share alone (0.03, 0.073, 0.09); 6.5 s per trial of launch
overhead (a fresh trial process: imports, CUDA set-up), or 0.5 s as with
processes that keep their CUDA context (``reuse_processes=True``). Packing's
slowdown α on that GPU was never measured, so two are run: 1.0 (packed
launch-bound trials do not slow each other) and 1.24 (Fluid's fit to Hydro's
ResNet-18 under MPS). ASHA (η = 3, 1–9 epochs), 27 trials, one GPU, under
``fifo``, ``auto`` (which now packs by measured GPU room) and ``waterfill``.

Goal (as gpu_packing's): ``auto`` ≥ 1.5x FIFO's speed in every case. Run:
``PYTHONPATH=$PWD .venv/bin/python benchmarks/gpu_packing_whatif.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _results import record  # benchmarks/_results.py: notes the load at start

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbtune  # noqa: E402
from nbtune import choice, loguniform  # noqa: E402
from nbtune.core.resources import Demand  # noqa: E402
from nbtune.runtimes.sim import SimRuntime  # noqa: E402
from nbtune.workloads import SyntheticWorkload  # noqa: E402

SPACE = {"lr": loguniform(1e-3, 0.3), "channels": choice([8, 16, 32]),
         "batch_size": choice([16, 32, 64])}
UNIT = {16: 0.65, 32: 0.28, 64: 0.13}  # s per epoch alone, by batch size (H200 profiles)
COMPUTE = {16: 0.03, 32: 0.073, 64: 0.09}  # NVML share alone, by batch size
ALLOCATORS = ["fifo", "auto", "waterfill"]


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/runtimes/sim.py", "nbtune/engine/", "nbtune/allocators/",
    "nbtune/algorithms/asha.py", "nbtune/runtimes/profiler.py",
    "nbtune/runtimes/profile_samples.py", "nbtune/runtimes/model_key.py", "nbtune/core/",
    "nbtune/workloads/",
)
WALL_CLOCK = False  # its goal figures do not depend on the machine or its load
KEY_FIGURES = ("auto_vs_fifo_worst",)  # the figures summary.py shows (paths into figures)


def makespan(allocator: str, alpha: float, launch: float, seed: int) -> float:
    wl = SyntheticWorkload(SPACE, unit_time=lambda c: UNIT[c["batch_size"]], alpha=alpha,
                           demand=lambda c: Demand(COMPUTE[c["batch_size"]], 2.1),
                           launch_overhead=launch, max_budget_hint=9, seed=seed)
    exp = nbtune.tune(wl, SPACE, algorithm="asha", eta=3, metric="loss", max_budget=9,
                      num_trials=27, allocator=allocator, runtime=SimRuntime(cluster=1),
                      seed=seed, validate=True)
    return exp.makespan


def main() -> None:
    rows, worst = {}, float("inf")
    for alpha in (1.0, 1.24):
        for launch in (6.5, 0.5):
            ms = {a: sum(makespan(a, alpha, launch, s) for s in range(3)) / 3 for a in ALLOCATORS}
            speed = {a: ms["fifo"] / ms[a] for a in ALLOCATORS}
            worst = min(worst, speed["auto"])
            key = f"alpha={alpha} launch={launch}s"
            rows[key] = {"makespan_s": ms, "speed_vs_fifo": speed}
            print(f"{key:26s} " + "  ".join(f"{a} {ms[a]:6.1f} s ({speed[a]:.2f}x)"
                                           for a in ALLOCATORS))
    goal = {"auto_vs_fifo_min": 1.5}
    record({"name": "gpu_packing_whatif", "figures": {**rows, "auto_vs_fifo_worst": worst},
            "goal": goal, "met": worst >= goal["auto_vs_fifo_min"]})


if __name__ == "__main__":
    main()
