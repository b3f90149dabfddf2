"""The Hydro example: one training loop for fused surrogates and the full target model.

(It lives here, not in :mod:`nbtune.examples`, because it builds surrogates: a layer up.)

An MLP 64 -> 256 -> 256 -> 10 on scikit-learn's digits (:func:`nbtune.examples.digits.load_data`)
trained with SGD and a StepLR schedule, over the Hydro artifact's search space: ``lr``,
``momentum``, ``batch_size`` and the StepLR ``gamma`` (:data:`SPACE`; the batch sizes are
Hydro's 128/256/512 divided by 4, because digits has 1,437 training images, not 50,000).

The model, optimizer and loss come through the fusion trial
(:mod:`nbtune.fusion.fusion_trial`), and the model is built with :func:`nbtune.surrogate.build`,
so the one ``train`` serves every trial of ``nbtune.tune(train, SPACE, scaling=S,
fusion=True)``: surrogate members (width / S, µP) fused into units, and the target trial
(``scaling = 1``, full width) alone. With neither ``scaling`` nor ``fusion`` it trains
one full-width model per trial, the plain baseline. Reports per epoch: validation
``loss``, ``accuracy`` and the hidden ``width`` the model trained at.
"""

from __future__ import annotations

from typing import Any

from nbtune.core.space import choice, qloguniform, quniform

__all__ = ["SPACE", "make_model", "train"]

#: Hydro's CV search space (Table 2), batch sizes scaled to digits
SPACE: dict[str, Any] = {
    "lr": qloguniform(1e-3, 1.0, 1e-4),
    "momentum": quniform(0.5, 0.999, 1e-3),
    "batch_size": choice([32, 64, 128]),
    "gamma": quniform(0.01, 0.9, 0.01),
}


def make_model() -> Any:
    """The target: an MLP 64 -> 256 -> 256 -> 10 (``shrink`` divides the 256s by S)."""
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256),
                         nn.ReLU(), nn.Linear(256, 10))


def _member(config: dict[str, Any]) -> Any:
    import torch

    from nbtune.surrogate import build

    torch.manual_seed(int(config.get("seed", 0)))
    return build(make_model, config)  # shrink(make_model(), config["scaling"]), S = 1 without


def train(config: dict[str, Any], trial: Any) -> None:
    """One epoch per budget unit, StepLR stepping once per epoch.

    A fused unit (``tune(fusion=F)``: a :class:`~nbtune.fusion.fusion_trial.FusionTrial`, one
    member or more) trains through the fusion trial API; an ordinary trial (no fusion:
    the plain baseline) trains the ordinary way, with torch's own optimizer and StepLR,
    so the baseline pays nothing for fusion. Both give the same numbers
    (``tests/surrogate/test_fused_surrogate.py``).
    """
    from nbtune.fusion.fusion_trial import FusionTrial

    if isinstance(trial, FusionTrial):
        _train_fused(config, trial)
    else:
        _train_plain(config, trial)


def _train_plain(config: dict[str, Any], trial: Any) -> None:
    import torch
    import torch.nn.functional as F

    from nbtune.examples.digits import load_data
    from nbtune.examples.fusion_digits import epochs

    torch.set_num_threads(1)
    x, y, xv, yv = load_data()
    sur = _member(config)
    opt = sur.optimizer(torch.optim.SGD, lr=config["lr"], momentum=config["momentum"])
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=config["gamma"])
    model = sur.module
    width = max(m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear))
    for step in epochs(trial, lambda xb, yb: F.cross_entropy(model(xb), yb), opt, x, y,
                       int(config["batch_size"])):
        sched.step()
        with torch.no_grad():
            out = model(xv)
            val = float(F.cross_entropy(out, yv))
        trial.report(step=step, loss=val if val == val and val < 1e9 else 1e9,
                     accuracy=float((out.argmax(1) == yv).float().mean()), width=width)


def _train_fused(config: dict[str, Any], trial: Any) -> None:
    import torch
    import torch.nn.functional as F

    from nbtune.examples.digits import load_data
    from nbtune.examples.fusion_digits import epochs
    from nbtune.fusion import FusedStepLR, member_accuracy

    torch.set_num_threads(1)
    x, y, xv, yv = load_data()
    model = trial.model(_member)
    opt = trial.optimizer(torch.optim.SGD, model, lr="lr", momentum="momentum")
    sched = FusedStepLR(opt, 1, gamma=[trial.configs[i]["gamma"] for i in trial.alive])
    width = max(m.out_features for m in model.defuse(0).modules()
                if isinstance(m, torch.nn.Linear))

    def batch_loss(xb: Any, yb: Any) -> Any:
        return trial.loss(F.cross_entropy, model(xb), yb)[0]

    for step in epochs(trial, batch_loss, opt, x, y, int(config["batch_size"])):
        sched.step()
        with torch.no_grad():
            out = model(xv)
            _, per_loss = trial.loss(F.cross_entropy, out, yv)
        per_loss = torch.nan_to_num(per_loss, nan=1e9, posinf=1e9)  # a diverged member: last
        trial.report(step, loss=per_loss, accuracy=member_accuracy(out, yv), width=width)
