"""Fused StepLR / CosineAnnealingLR: per-member schedules on a fused optimizer's lr vector.

Both use torch's closed forms (``base·gamma^(epoch // step_size)`` and
``eta_min + (base - eta_min)(1 + cos(pi·epoch/T_max))/2``), which torch documents as what
its recursive updates compute, with every argument a per-member vector.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .optim import FusedOptimizer, member_vector


class FusedScheduler:
    """Shared bookkeeping: base lrs, the epoch counter, keep()."""

    def __init__(self, optimizer: FusedOptimizer, **vectors: object) -> None:
        if not isinstance(optimizer, FusedOptimizer):
            raise TypeError(f"{type(self).__name__}: pass an optimizer from fused_optimizer()")
        self.optimizer = optimizer
        f = optimizer.members
        self.base_lrs = optimizer.param_groups[0]["lr"].clone()
        self.vectors = {k: member_vector(k, v, f) for k, v in vectors.items()}
        self.last_epoch = 0
        if optimizer.owner is not None:  # follow the fused model's keep()
            optimizer.owner.follow(self)

    def lr_at(self, epoch: int) -> torch.Tensor:
        raise NotImplementedError

    def step(self) -> None:
        self.last_epoch += 1
        self.optimizer.param_groups[0]["lr"] = self.lr_at(self.last_epoch).to(
            self.base_lrs.device)

    def get_last_lr(self) -> list[float]:
        return self.optimizer.param_groups[0]["lr"].tolist()

    def keep(self, indices: Sequence[int], remap: object = None) -> None:
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        self.base_lrs = self.base_lrs.index_select(0, idx.to(self.base_lrs.device))
        self.vectors = {k: v.index_select(0, idx) for k, v in self.vectors.items()}

    def state_dict(self) -> dict:
        return {"last_epoch": self.last_epoch, "base_lrs": self.base_lrs,
                "vectors": self.vectors}

    def load_state_dict(self, state: dict) -> None:
        self.last_epoch = state["last_epoch"]
        self.base_lrs = state["base_lrs"]
        self.vectors = state["vectors"]


class FusedStepLR(FusedScheduler):
    """``torch.optim.lr_scheduler.StepLR`` per member: lr·gamma^(epoch // step_size)."""

    def __init__(self, optimizer: FusedOptimizer, step_size: int | Sequence[int],
                 gamma: float | Sequence[float] = 0.1) -> None:
        super().__init__(optimizer, step_size=step_size, gamma=gamma)
        if (self.vectors["step_size"] < 1).any():
            raise ValueError("FusedStepLR: step_size must be >= 1 for every member")

    def lr_at(self, epoch: int) -> torch.Tensor:
        v = self.vectors
        return self.base_lrs * v["gamma"] ** torch.floor(epoch / v["step_size"])


class FusedCosineAnnealingLR(FusedScheduler):
    """``torch.optim.lr_scheduler.CosineAnnealingLR`` per member (closed form)."""

    def __init__(self, optimizer: FusedOptimizer, T_max: int | Sequence[int],  # noqa: N803
                 eta_min: float | Sequence[float] = 0.0) -> None:
        super().__init__(optimizer, T_max=T_max, eta_min=eta_min)
        if (self.vectors["T_max"] <= 0).any():
            raise ValueError("FusedCosineAnnealingLR: T_max must be > 0 for every member")

    def lr_at(self, epoch: int) -> torch.Tensor:
        v = self.vectors
        return v["eta_min"] + (self.base_lrs - v["eta_min"]) * (
            1 + torch.cos(math.pi * epoch / v["T_max"])) / 2
