"""The fusion example: one training loop that runs one trial or a fused group of trials.

An MLP 64-128-10 on scikit-learn's digits (:func:`nbtune.examples.digits.load_data`). The
model, optimizer and loss come from the trial (:mod:`nbtune.fusion.trial`), so the same
``train`` runs unfused on the Dask runtime (``as_fusion_trial`` wraps its trial) and fused
through :func:`nbtune.fusion.trial.run_group`, with per-member metrics either way. Config
keys: ``lr``, ``momentum``, ``seed`` (init), and optionally ``hidden`` and ``batch_size``
(shape keys: a fused group shares them).
"""

from __future__ import annotations

from typing import Any

__all__ = ["make_model", "train"]


def make_model(config: dict[str, Any]) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(int(config["seed"]))
    hidden = int(config.get("hidden", 128))
    return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def train(config: dict[str, Any], trial: Any) -> None:
    """One epoch per budget unit; reports validation ``loss`` and ``accuracy`` per member."""
    import torch
    import torch.nn.functional as F

    from nbtune.examples.digits import load_data
    from nbtune.fusion import member_accuracy
    from nbtune.fusion.trial import as_fusion_trial

    torch.set_num_threads(1)
    trial = as_fusion_trial(trial)
    x, y, xv, yv = load_data()
    model = trial.model(make_model)
    opt = trial.optimizer(torch.optim.SGD, model, lr="lr", momentum="momentum")
    bs = int(config.get("batch_size", 64))
    for step in trial.steps():
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(step))
        for i in range(0, len(order), bs):
            idx = order[i:i + bs]
            loss, _ = trial.loss(F.cross_entropy, model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            out = model(xv)
            _, per_loss = trial.loss(F.cross_entropy, out, yv)
        trial.report(step, loss=per_loss, accuracy=member_accuracy(out, yv))
