"""The rank-transfer study of Hydro §6.2 on two real small tasks (scikit-learn's digits).

Do configurations ranked on a shrunk surrogate rank the same on the target?
``benchmarks/transfer.py`` runs the whole study (32 configurations, S = 1, 2, 4, 8,
with and without µP); ``notebooks/05-surrogates.ipynb`` runs a small slice. Both
use these functions, so the notebook needs no path edits to find them:

* ``mlp_sgd`` — an MLP 64 -> 256 -> 256 -> 10 trained with SGD (lr, momentum);
* ``cnn_adam`` — a CNN (32 and 64 channels by default, BatchNorm) trained with Adam (lr, beta1).

``seed`` picks the initialisation and the data order of a run (seed 0 is the
study's original single run), so a configuration's loss can be averaged over
seeds; :func:`bootstrap_spearman` resamples those seeds to say how much of a
Spearman figure is seed noise.
"""

from __future__ import annotations

import math
import random
from typing import Any

__all__ = ["TASKS", "SCALES", "CNN_CHANNELS", "make_target", "sample_configs", "train_one",
           "spearman", "top3_hit", "seed_mean", "seed_draws",
           "bootstrap_spearman"]

TASKS = ("mlp_sgd", "cnn_adam")
SCALES = (1, 2, 4, 8)
#: the CNN target's two convolutions' output channels (``shrink`` divides both by S)
CNN_CHANNELS = (32, 64)


def make_target(task: str, channels: tuple[int, int] = CNN_CHANNELS) -> Any:
    from torch import nn

    if task == "mlp_sgd":
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    c1, c2 = channels
    return nn.Sequential(nn.Conv2d(1, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(),
                         nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(c2 * 16, 10))


def sample_configs(task: str, n: int, seed: int) -> list[dict[str, Any]]:
    """Hydro artifact's space: lr, momentum (beta1 for Adam), batch size, StepLR gamma."""
    rng = random.Random(f"{task}-{seed}")
    lo, hi = (1e-2, 3.0) if task == "mlp_sgd" else (1e-4, 3e-2)
    return [{"lr": math.exp(rng.uniform(math.log(lo), math.log(hi))),
             "momentum": rng.choice([0.0, 0.5, 0.9]),
             "batch_size": rng.choice([32, 64, 128]),
             "gamma": rng.uniform(0.5, 1.0)} for _ in range(n)]


def train_one(task: str, config: dict[str, Any], scale: int, mu: bool, epochs: int,
              seed: int = 0, channels: tuple[int, int] = CNN_CHANNELS) -> tuple[float, float]:
    """Final (validation loss, training loss) of one run (inf when it diverged).

    ``seed`` seeds the initialisation and each epoch's shuffle (``seed * 10000 +
    epoch``, so seed 0 is the original run); ``channels`` sizes the CNN target.
    """
    import torch
    from torch import nn

    from nbtune.examples.digits import load_data
    from nbtune.surrogate import shrink

    torch.set_num_threads(1)
    x_tr, y_tr, x_va, y_va = load_data()
    torch.manual_seed(seed)
    sur = shrink(make_target(task, channels), scale, parametrize=mu)
    if task == "mlp_sgd":
        opt = sur.optimizer(torch.optim.SGD, lr=config["lr"], momentum=config["momentum"])
    else:
        opt = sur.optimizer(torch.optim.Adam, lr=config["lr"], betas=(config["momentum"], 0.999))
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=config["gamma"])
    model, loss_fn, bs = sur.module, nn.CrossEntropyLoss(), config["batch_size"]
    for epoch in range(epochs):
        model.train()
        shuffle = torch.Generator().manual_seed(seed * 10000 + epoch)
        order = torch.randperm(len(x_tr), generator=shuffle)
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


def seed_mean(runs: list[list[float]], seeds: list[int] | None = None) -> list[float]:
    """Per-configuration mean loss over seeds (``runs[seed][config]``; inf if any diverged)."""
    pick = [runs[k] for k in (range(len(runs)) if seeds is None else seeds)]
    return [sum(r[i] for r in pick) / len(pick) for i in range(len(pick[0]))]


def seed_draws(k: int, n: int = 1000, seed: int = 0) -> list[list[int]]:
    """``n`` resamplings (with replacement) of ``k`` seed indices, for :func:`bootstrap_spearman`."""
    rng = random.Random(seed)
    return [[rng.randrange(k) for _ in range(k)] for _ in range(n)]


def bootstrap_spearman(ref: list[list[float]], sur: list[list[float]],
                       draws: list[list[int]]) -> list[float]:
    """Spearman of seed-averaged losses, one per draw of seeds (:func:`seed_draws`).

    ``ref[k]`` and ``sur[k]`` are seed ``k``'s losses per configuration at S = 1
    and at the surrogate's S; a draw averages the same seeds on both sides. The
    same draws for the µP and the SP arm give the spread of their difference.
    """
    return [spearman(seed_mean(ref, idx), seed_mean(sur, idx)) for idx in draws]
