"""The rank-transfer study of Hydro §6.2 on two real small tasks (scikit-learn's digits).

Do configurations ranked on a shrunk surrogate rank the same on the target?
``benchmarks/transfer.py`` runs the whole study (32 configurations, S = 1, 2, 4, 8,
with and without µP); ``notebooks/05-surrogates.ipynb`` runs a small slice. Both
use these functions, so the notebook needs no path edits to find them:

* ``mlp_sgd`` — an MLP 64 -> 256 -> 256 -> 10 trained with SGD (lr, momentum);
* ``cnn_adam`` — a CNN (32 and 64 channels, BatchNorm) trained with Adam (lr, beta1).
"""

from __future__ import annotations

import math
import random
from typing import Any

__all__ = ["TASKS", "SCALES", "make_target", "sample_configs", "train_one", "spearman",
           "top3_hit"]

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


def spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    big = 1e9  # diverged runs tie for last
    return float(spearmanr([min(x, big) for x in a], [min(x, big) for x in b]).statistic)


def top3_hit(ref: list[float], sur: list[float]) -> bool:
    best = min(range(len(ref)), key=ref.__getitem__)
    return best in sorted(range(len(sur)), key=sur.__getitem__)[:3]
