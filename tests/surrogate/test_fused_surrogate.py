"""Fused surrogates train exactly as each surrogate alone, µP rules and all.

Hydro fuses the shrunk trials (shrink -> fuse -> tune): the members of a fused surrogate
share the scale, so they share the per-layer lr / weight-decay multipliers, and each
member's update must equal the one ``Surrogate.optimizer`` gives it unfused. Checked on
an MLP (fx-traced, readout wrapped in ``Multiply``) and a CNN with BatchNorm, with SGD
(momentum, weight decay), Adam and AdamW, and a per-member StepLR.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nbtune.fusion import FusedStepLR, FusionError, fuse
from nbtune.fusion.fusion_trial import FusionTrial
from nbtune.surrogate import build, shrink

from .models import MLP, cnn

CONFIGS = [{"lr": 0.05, "momentum": 0.9, "gamma": 0.5, "seed": 0, "scaling": 4},
           {"lr": 0.2, "momentum": 0.0, "gamma": 0.9, "seed": 1, "scaling": 4},
           {"lr": 0.01, "momentum": 0.5, "gamma": 0.7, "seed": 2, "scaling": 4}]


class Sink:
    """A member of a fused group: keeps what it was sent (the runtime's trial does more)."""

    def __init__(self) -> None:
        self.reports: list[dict[str, float]] = []

    def report(self, step: int, **metrics: float) -> None:
        self.reports.append(metrics)


def _data(model: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(16, 64, generator=g) if model == "mlp" else torch.randn(16, 1, 8, 8,
                                                                             generator=g)
    return x, torch.randint(0, 10, (16,), generator=g)


def _make(model: str):
    return (lambda: MLP(64)) if model == "mlp" else (lambda: cnn(16))


def _seeded_build(model: str):
    def make(config):
        torch.manual_seed(config["seed"])
        return build(_make(model), config)
    return make


def _hparams(opt: type, config: dict) -> dict:
    if opt is torch.optim.SGD:
        return {"lr": config["lr"], "momentum": config["momentum"], "weight_decay": 1e-3}
    return {"lr": config["lr"] * 0.1, "betas": (config["momentum"], 0.99), "weight_decay": 1e-2}


def _alone(model: str, opt: type, config: dict, steps: int) -> list[float]:
    sur = _seeded_build(model)(config)
    o = sur.optimizer(opt, **_hparams(opt, config))
    sched = torch.optim.lr_scheduler.StepLR(o, 1, gamma=config["gamma"])
    x, y = _data(model)
    out = []
    for _ in range(steps):
        loss = F.cross_entropy(sur.module(x), y)
        o.zero_grad()
        loss.backward()
        o.step()
        sched.step()
        out.append(loss.item())
    return out


def _fused(model: str, opt: type, steps: int) -> list[list[float]]:
    members = [Sink() for _ in CONFIGS]

    def train(config, trial):
        fm = trial.model(_seeded_build(model))
        per = [_hparams(opt, c) for c in trial.configs]
        hp = {"lr": [p["lr"] for p in per], "weight_decay": per[0]["weight_decay"]}
        if opt is torch.optim.SGD:
            hp["momentum"] = [p["momentum"] for p in per]
        else:
            hp["beta1"] = [p["betas"][0] for p in per]
            hp["beta2"] = 0.99
        o = trial.optimizer(opt, fm, **hp)
        sched = FusedStepLR(o, 1, gamma=[c["gamma"] for c in trial.configs])
        x, y = _data(model)
        for step in trial.steps():
            loss, per_loss = trial.loss(F.cross_entropy, fm(x), y)
            o.zero_grad()
            loss.backward()
            o.step()
            sched.step()
            trial.report(step, loss=per_loss)

    trial = FusionTrial(CONFIGS, members, steps)
    train(trial.config, trial)
    return [[r["loss"] for r in m.reports] for m in members]


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("opt", [torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW])
def test_a_fused_surrogate_trains_each_member_as_its_surrogate_alone(model, opt):
    torch.set_num_threads(1)
    steps = 6
    fused = _fused(model, opt, steps)
    for config, got in zip(CONFIGS, fused, strict=True):
        want = _alone(model, opt, config, steps)
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) <= 1e-5, (got, want)
    # the µP multipliers matter: the same run with every factor 1 trains differently
    assert _fused_plain_first_member(model, opt, steps) != pytest.approx(fused[0], abs=1e-5)


def _fused_plain_first_member(model: str, opt: type, steps: int) -> list[float]:
    torch.manual_seed(CONFIGS[0]["seed"])
    sur = build(_make(model), CONFIGS[0])
    fm = fuse([sur.module])
    from nbtune.fusion import fused_optimizer

    hp = _hparams(opt, CONFIGS[0])
    o = fused_optimizer(opt, fm, **hp)  # no lr_mults: one lr for every layer
    x, y = _data(model)
    out = []
    for _ in range(steps):
        loss = F.cross_entropy(fm(x)[0], y)
        o.zero_grad()
        loss.backward()
        o.step()
        out.append(loss.item())
    return out


def test_members_of_different_scales_are_refused_with_the_fix():
    configs = [{**CONFIGS[0], "scaling": 4}, {**CONFIGS[1], "scaling": 1}]
    trial = FusionTrial(configs, [Sink(), Sink()], 1)
    with pytest.raises((ValueError, FusionError), match="shape_keys|different"):
        trial.model(_seeded_build("mlp"))


def test_a_traced_surrogate_fuses_and_defuses():
    surs = [shrink(nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(),
                                 nn.Linear(128, 10)), 4) for _ in range(3)]
    fm = fuse([s.module for s in surs])
    x = torch.randn(5, 1, 8, 8)
    out = fm(x)
    assert out.shape == (3, 5, 10)
    for k, s in enumerate(surs):
        torch.testing.assert_close(out[k], s.module(x))
        back = fm.defuse(k)
        for name, t in s.module.state_dict().items():
            torch.testing.assert_close(back.state_dict()[name], t)
