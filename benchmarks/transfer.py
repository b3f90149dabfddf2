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
import random
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

TASKS = ("mlp_sgd", "cnn_adam")
SCALES = (1, 2, 4, 8)


def make_target(task: str) -> Any:
    from torch import nn

    if task == "mlp_sgd":
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 16, 10))


def sample_configs(task: str, n: int, seed: int) -> list[dict[str, Any]]:
    """Hydro artifact's space: lr, momentum (beta1 for Adam), batch size, StepLR gamma."""
    rng = random.Random(f"{task}-{seed}")
    lo, hi = (1e-2, 3.0) if task == "mlp_sgd" else (1e-4, 3e-2)
    return [{"lr": math.exp(rng.uniform(math.log(lo), math.log(hi))),
             "momentum": rng.choice([0.0, 0.5, 0.9]),
             "batch_size": rng.choice([32, 64, 128]),
             "gamma": rng.uniform(0.5, 1.0)} for _ in range(n)]


def train_one(task: str, config: dict[str, Any], scale: int, mu: bool,
              epochs: int) -> tuple[float, float]:
    """Final (validation loss, training loss) of one run (inf when it diverged)."""
    import torch
    from torch import nn

    from nbtune.examples.digits import load_data
    from nbtune.surrogate import shrink

    torch.set_num_threads(1)
    x_tr, y_tr, x_va, y_va = load_data()
    torch.manual_seed(0)
    sur = shrink(make_target(task), scale, parametrize=mu)
    if task == "mlp_sgd":
        opt = sur.optimizer(torch.optim.SGD, lr=config["lr"], momentum=config["momentum"])
    else:
        opt = sur.optimizer(torch.optim.Adam, lr=config["lr"], betas=(config["momentum"], 0.999))
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=config["gamma"])
    model, loss_fn, bs = sur.module, nn.CrossEntropyLoss(), config["batch_size"]
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(x_tr), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(order), bs):
            idx = order[i:i + bs]
            opt.zero_grad()
            loss = loss_fn(model(x_tr[idx]), y_tr[idx])
            if not torch.isfinite(loss):
                return math.inf, math.inf
            loss.backward()
            opt.step()
        sched.step()
    model.eval()
    with torch.no_grad():
        val, tr = float(loss_fn(model(x_va), y_va)), float(loss_fn(model(x_tr), y_tr))
    return tuple(v if math.isfinite(v) else math.inf for v in (val, tr))


def _job(args: tuple) -> tuple[tuple, tuple[float, float]]:
    return args[:4], train_one(*args)


def spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    big = 1e9  # diverged runs tie for last
    return float(spearmanr([min(x, big) for x in a], [min(x, big) for x in b]).statistic)


def top3_hit(ref: list[float], sur: list[float]) -> bool:
    best = min(range(len(ref)), key=ref.__getitem__)
    return best in sorted(range(len(sur)), key=sur.__getitem__)[:3]


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
