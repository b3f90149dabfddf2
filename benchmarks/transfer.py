"""transfer: do hyperparameters ranked on a shrunk surrogate rank the same on the target?

Hydro §6.2 (Fig. 10): configurations keep their order across S = 1, 2, 4, 8 with
Hydro's parametrization. Here, two real small tasks on scikit-learn's digits:

* ``mlp_sgd`` — an MLP 64 -> 256 -> 256 -> 10 trained with SGD (lr, momentum);
* ``cnn_adam`` — a CNN (32 and 64 channels, BatchNorm) trained with Adam (lr, beta1);

each with 32 configurations over lr, momentum / beta1, batch size and the
StepLR gamma (one step per epoch), trained at S = 1, 2, 4, 8 twice: with µP
(``shrink(model, S)``; S = 1 is the target with Hydro's init) and without
(``shrink(model, S, parametrize=False)``: the same narrower layers, standard
parametrization, one lr for all). Measured: the final validation loss of each
run (and, as a second figure, the final training loss: µP's theory is about
training); reported per task, arm and S, the Spearman rank correlation with
S = 1 and whether S = 1's best configuration is in the surrogate's top 3.
Goal: Spearman >= 0.8 at S = 4 with µP on both tasks, and higher than without.

Run: ``.venv/bin/python benchmarks/transfer.py [--configs 32] [--epochs 6] [--workers 2]``
(a few minutes on 2 idle cores; ``--quick`` for 8 configs, 2 epochs).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from nbtune.surrogate.transfer_study import (  # the study's tasks, shared with notebook 05
    SCALES,
    TASKS,
    sample_configs,
    spearman,
    top3_hit,
    train_one,
)


def _job(args: tuple) -> tuple[tuple, tuple[float, float]]:
    return args[:4], train_one(*args)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="8 configs, 2 epochs (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.configs, args.epochs = 8, 2
    t0 = time.monotonic()
    configs = {t: sample_configs(t, args.configs, args.seed) for t in TASKS}
    jobs = [(t, c, s, mu, args.epochs) for t in TASKS for s in SCALES for mu in (True, False)
            for c in configs[t]]
    with ProcessPoolExecutor(args.workers) as pool:
        out = list(pool.map(_job, jobs, chunksize=4))
    loss: dict[tuple, list[float]] = {}
    train_loss: dict[tuple, list[float]] = {}
    for (t, _c, s, mu), (v, tr) in out:
        loss.setdefault((t, s, mu), []).append(v)
        train_loss.setdefault((t, s, mu), []).append(tr)
    figures: dict[str, Any] = {}
    print(f"{'task':9} {'arm':4} " + " ".join(f"{'S=' + str(s):>16}" for s in SCALES[1:]))
    for t in TASKS:
        for mu in (True, False):
            arm = "mup" if mu else "sp"
            ref = loss[(t, 1, mu)]
            cells = []
            for s in SCALES[1:]:
                rho, hit = spearman(ref, loss[(t, s, mu)]), top3_hit(ref, loss[(t, s, mu)])
                figures[f"{t}.{arm}.S{s}.spearman"] = round(rho, 3)
                figures[f"{t}.{arm}.S{s}.best_in_top3"] = hit
                figures[f"{t}.{arm}.S{s}.spearman_train_loss"] = round(
                    spearman(train_loss[(t, 1, mu)], train_loss[(t, s, mu)]), 3)
                cells.append(f"{rho:+.3f} {'top3' if hit else 'miss'}")
            best = min(ref)
            figures[f"{t}.{arm}.S1.best_val_loss"] = round(best, 4)
            figures[f"{t}.{arm}.diverged_S1"] = sum(math.isinf(v) for v in ref)
            print(f"{t:9} {arm:4} " + " ".join(f"{c:>16}" for c in cells)
                  + f"   best S=1 val loss {best:.4f}")
    figures["configs"], figures["epochs"] = args.configs, args.epochs
    figures["seconds"] = round(time.monotonic() - t0, 1)
    goal = {"spearman_S4_mup": ">= 0.8 on both tasks", "mup_vs_sp_S4": "higher on both tasks"}
    met = all(figures[f"{t}.mup.S4.spearman"] >= 0.8
              and figures[f"{t}.mup.S4.spearman"] > figures[f"{t}.sp.S4.spearman"]
              for t in TASKS)
    print(json.dumps({"name": "transfer", "figures": figures, "goal": goal, "met": met}))


if __name__ == "__main__":
    main()
