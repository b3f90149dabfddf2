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
S = 1, whether S = 1's best configuration is in the surrogate's top 3, and the
regret (S = 1 loss of the surrogate's best configuration minus S = 1's best).
Goal: Spearman >= 0.8 at S = 4 with µP on both tasks, and higher than without.

``--seeds K`` (default 3) trains every (configuration, S, arm) K times (seeds 0..K-1: init and
data order; seed 0 seeds as the earlier single run did) and ranks by the loss
averaged over seeds; it also reports each seed's own Spearman and a bootstrap
over seeds (5th-95th percentile of the Spearman, and of µP minus SP at S = 4 with
the same resampled seeds on both arms), so a difference can be told from noise:
``met`` counts µP as higher only when it is in >= 90 % of the draws (the CNN's S = 4
Spearman varies more from seed to seed than the µP - SP gap of one seed; RESULTS.md,
transfer).
``--cnn-channels 64,128`` widens the CNN target; ``--tasks cnn_adam`` runs one task
(``met`` needs both, so it is false then); ``--dump`` writes every run, ``--load``
recomputes the figures from dumps (one per task, or seeds added with ``--first-seed``).

Run: ``.venv/bin/python benchmarks/transfer.py [--configs 32] [--epochs 6] [--workers 2]
[--seeds 3] [--cnn-channels 32,64] [--tasks mlp_sgd,cnn_adam]`` (a few minutes on 2 idle
cores per seed; ``--quick`` for 8 configs, 2 epochs).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from _results import record  # benchmarks/_results.py: notes the load at start

from nbtune.surrogate.transfer_study import (  # the study's tasks, shared with notebook 05
    SCALES,
    TASKS,
    bootstrap_spearman,
    sample_configs,
    seed_draws,
    seed_mean,
    spearman,
    top3_hit,
    train_one,
)

#: share of seed-bootstrap draws in which µP must beat SP for "higher" to count
SURE = 0.9


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = ("nbtune/surrogate/",)
WALL_CLOCK = False  # its goal figures do not depend on the machine or its load
# the figures summary.py shows (paths into figures)
KEY_FIGURES = ("mlp_sgd.mup.S4.spearman", "cnn_adam.mup.S4.spearman")


def _job(args: tuple) -> tuple[tuple, tuple[float, float]]:
    t, i, c, s, mu, epochs, seed, channels = args
    return (t, s, mu, seed, i), train_one(t, c, s, mu, epochs, seed, channels)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def _load(paths: list[str], n: int, seed: int) -> tuple[dict[tuple, tuple], dict[str, Any]]:
    """Runs of earlier ``--dump`` files, checked to be this sample of configurations."""
    out: dict[tuple, tuple] = {}
    meta: dict[str, Any] = {}
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        for t, cs in d["configs"].items():
            if cs != sample_configs(t, n, seed):
                raise SystemExit(f"{path}: {t}'s configurations are not --configs {n} --seed {seed}")
        meta.update({key: d[key] for key in ("epochs", "cnn_channels") if key in d})
        out.update({tuple(r[:5]): tuple(r[5:]) for r in d["runs"]})
    return out, meta


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="seed of the configuration sample")
    ap.add_argument("--seeds", type=int, default=3, help="training seeds per configuration")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="train seeds first..first+K-1 (to add seeds to a dump later)")
    ap.add_argument("--cnn-channels", default="32,64", help="the CNN target's channels")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--dump", help="write every run's losses here (JSON) for later analysis")
    ap.add_argument("--load", help="comma-separated --dump files: recompute the figures from "
                                   "their runs instead of training (same --configs/--seed)")
    ap.add_argument("--quick", action="store_true", help="8 configs, 2 epochs (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.configs, args.epochs = 8, 2
    tasks = [t for t in args.tasks.split(",") if t]
    channels = tuple(int(c) for c in args.cnn_channels.split(","))
    k, n = args.seeds, args.configs
    t0 = time.monotonic()
    if args.load:
        out, meta = _load(args.load.split(","), n, args.seed)
        tasks = [t for t in TASKS if any(key[0] == t for key in out)]
        channels, args.epochs = tuple(meta.get("cnn_channels", channels)), meta.get(
            "epochs", args.epochs)
    else:
        configs = {t: sample_configs(t, n, args.seed) for t in tasks}
        jobs = [(t, i, c, s, mu, args.epochs, seed, channels) for seed in range(args.first_seed, args.first_seed + k)
                for t in tasks for s in SCALES for mu in (True, False)
                for i, c in enumerate(configs[t])]
        with ProcessPoolExecutor(args.workers) as pool:
            out = dict(pool.map(_job, jobs, chunksize=4))
        if args.dump:
            with open(args.dump, "w") as f:
                json.dump({"configs": configs, "epochs": args.epochs,
                           "cnn_channels": list(channels),
                           "runs": [[*key, *v] for key, v in out.items()]}, f)
    # runs[(task, S, mu)][0 or 1] = per seed, per configuration: validation / training loss
    seeds = sorted({key[3] for key in out})
    k = len(seeds)
    runs = {(t, s, mu): [[[out[(t, s, mu, seed, i)][j] for i in range(n)] for seed in seeds]
                         for j in (0, 1)]
            for t in tasks for s in SCALES for mu in (True, False)}
    draws = seed_draws(k)
    figures: dict[str, Any] = {}
    print(f"{'task':9} {'arm':4} " + " ".join(f"{'S=' + str(s):>16}" for s in SCALES[1:]))
    for t in tasks:
        boot4 = {}
        for mu in (True, False):
            arm = "mup" if mu else "sp"
            val1, tr1 = runs[(t, 1, mu)]
            ref = seed_mean(val1)
            cells = []
            for s in SCALES[1:]:
                val, tr = runs[(t, s, mu)]
                sur = seed_mean(val)
                rho, hit = spearman(ref, sur), top3_hit(ref, sur)
                key = f"{t}.{arm}.S{s}"
                figures[f"{key}.spearman"] = round(rho, 3)
                figures[f"{key}.best_in_top3"] = hit
                # what tuning on the surrogate costs: S = 1 loss of its pick above S = 1's best
                figures[f"{key}.regret"] = round(ref[min(range(n), key=sur.__getitem__)]
                                                 - min(ref), 4)
                figures[f"{key}.spearman_train_loss"] = round(
                    spearman(seed_mean(tr1), seed_mean(tr)), 3)
                cell = f"{rho:+.3f} {'top3' if hit else 'miss'}"
                if k > 1:
                    per = [spearman(a, b) for a, b in zip(val1, val, strict=True)]
                    boot = bootstrap_spearman(val1, val, draws)
                    if s == 4:
                        boot4[mu] = boot
                    figures[f"{key}.spearman_per_seed"] = [round(r, 3) for r in per]
                    figures[f"{key}.spearman_per_seed_sd"] = round(statistics.stdev(per), 3)
                    figures[f"{key}.spearman_boot_p5_p95"] = [round(_pct(boot, q), 3)
                                                             for q in (0.05, 0.95)]
                    cell += f" ±{statistics.stdev(per):.2f}"
                cells.append(cell)
            best = min(ref)
            figures[f"{t}.{arm}.S1.best_val_loss"] = round(best, 4)
            figures[f"{t}.{arm}.diverged_S1"] = sum(math.isinf(v) for v in ref)
            print(f"{t:9} {arm:4} " + " ".join(f"{c:>16}" for c in cells)
                  + f"   best S=1 val loss {best:.4f}")
        if k > 1:
            diff = [a - b for a, b in zip(boot4[True], boot4[False], strict=True)]
            figures[f"{t}.S4.mup_minus_sp_boot_p5_p95"] = [round(_pct(diff, q), 3)
                                                         for q in (0.05, 0.95)]
            figures[f"{t}.S4.mup_above_sp_boot_share"] = round(
                sum(d > 0 for d in diff) / len(diff), 3)
            print(f"{t:9} S=4 µP - SP over seed bootstrap: 5-95 % "
                  f"{figures[f'{t}.S4.mup_minus_sp_boot_p5_p95']}, "
                  f"share > 0 {figures[f'{t}.S4.mup_above_sp_boot_share']}")
    figures["configs"], figures["epochs"], figures["seeds"] = args.configs, args.epochs, seeds
    figures["cnn_channels"], figures["tasks"] = list(channels), tasks
    figures["seconds"] = round(time.monotonic() - t0, 1)
    if args.load:
        figures["loaded_from"] = args.load  # seconds: the analysis, not the training
    goal = {"spearman_S4_mup": ">= 0.8 on both tasks (seed-averaged loss)",
            "mup_vs_sp_S4": "higher on both tasks, and with --seeds > 1 in >= 90 % of the "
                            "seed-bootstrap draws (a gap inside the seed noise is not 'higher')"}
    met = all(t in tasks and figures[f"{t}.mup.S4.spearman"] >= 0.8
              and figures[f"{t}.mup.S4.spearman"] > figures[f"{t}.sp.S4.spearman"]
              and (k == 1 or figures[f"{t}.S4.mup_above_sp_boot_share"] >= SURE)
              for t in TASKS)
    record({"name": "transfer", "figures": figures, "goal": goal, "met": met})


if __name__ == "__main__":
    main()
