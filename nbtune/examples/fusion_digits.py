"""The fusion example: one training loop that runs one trial or a fused group of trials.

An MLP 64-128-10 on scikit-learn's digits (:func:`nbtune.examples.digits.load_data`). The
model, optimizer and loss come from the trial (:mod:`nbtune.fusion.fusion_trial`), so the same
``train`` runs unfused on the Dask runtime (``as_fusion_trial`` wraps its trial) and fused
through :func:`nbtune.fusion.fusion_trial.run_group`, with per-member metrics either way. Config
keys: ``lr``, ``momentum``, ``seed`` (init), and optionally ``hidden`` and ``batch_size``
(shape keys: a fused group shares them).
"""

from __future__ import annotations

from typing import Any

__all__ = ["epochs", "make_model", "train"]


def make_model(config: dict[str, Any]) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(int(config["seed"]))
    hidden = int(config.get("hidden", 128))
    return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def epochs(trial: Any, batch_loss: Any, opt: Any, x: Any, y: Any, batch_size: int) -> Any:
    """Yield each step of ``trial`` after one epoch of minibatch updates on ``(x, y)``, in
    an order seeded by the step (a relaunch sees the same batches); ``batch_loss(xb, yb)``
    is the scalar to minimise (a fused model's: the sum of the members' mean losses)."""
    import torch

    for step in trial.steps():
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(int(step)))
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            loss = batch_loss(x[idx], y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        yield step


def train(config: dict[str, Any], trial: Any) -> None:
    """One epoch per budget unit; reports validation ``loss`` and ``accuracy`` per member."""
    import torch
    import torch.nn.functional as F

    from nbtune.examples.digits import load_data
    from nbtune.fusion import member_accuracy
    from nbtune.fusion.fusion_trial import as_fusion_trial

    torch.set_num_threads(1)
    trial = as_fusion_trial(trial)
    x, y, xv, yv = load_data()
    model = trial.model(make_model)
    opt = trial.optimizer(torch.optim.SGD, model, lr="lr", momentum="momentum")
    bs = int(config.get("batch_size", 64))

    def batch_loss(xb: Any, yb: Any) -> Any:
        return trial.loss(F.cross_entropy, model(xb), yb)[0]

    for step in epochs(trial, batch_loss, opt, x, y, bs):
        with torch.no_grad():
            out = model(xv)
            _, per_loss = trial.loss(F.cross_entropy, out, yv)
        trial.report(step, loss=per_loss, accuracy=member_accuracy(out, yv))
