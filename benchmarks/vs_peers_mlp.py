"""``vs_peers`` on an MLP with epochs of ~20 ms: does nbtune's warm run reach the bound?

The same benchmark, systems, configurations and rounds as :mod:`vs_peers`, with the model
swapped for ``asha_rules``' one-hidden-layer MLP (``NBTUNE_BENCH_WORKLOAD=mlp``, which every
process of the run inherits; ``channels`` 4/8/16 sets the hidden width 16/64/256; one pass over
the training split per epoch: ~20-50 ms). Epochs this short make the overhead between trials (launch, first import, report, stop, next launch)
most of a trial: the goal is the warm run's efficiency against the two-process bound
measured in the same run (its work over the measured parallel speed-up of two bare
processes) >= 0.85, with the same configurations, 0 errors and the best accuracy within
0.5 % of the best peer's. The ratios to Optuna and Ray Tune are reported. Run:
``cd benchmarks && PYTHONPATH=$PWD/.. ../.venv/bin/python vs_peers_mlp.py [--rounds N]``.
Ends with one JSON line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/runtimes/dask/", "nbtune/engine/", "nbtune/algorithms/asha.py",
    "nbtune/allocators/", "nbtune/api.py", "nbtune/build/", "benchmarks/two_core_bound.py",
    "benchmarks/vs_peers.py",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine
KEY_FIGURES = ("pair_efficiency/warm", "pair_speedup", "ratios/warm_vs_optuna2", "acc_gap")

if __name__ == "__main__":
    os.environ["NBTUNE_BENCH_WORKLOAD"] = "mlp"
    import vs_peers

    vs_peers.main("vs_peers_mlp", vs_peers.MLP_GOAL)
