"""Inter-trial fusion (Hydro §4.2): F trials of one architecture trained as one batched model.

``fuse(models)`` gives a :class:`FusedModel` whose parameters carry a leading member axis;
``fused_optimizer`` and the fused schedulers take per-member hyperparameter vectors;
``fused_loss`` sums each member's mean loss so every member gets exactly the gradient it
would get alone. ``FusedModel.defuse(k)`` and ``keep(indices)`` take members out.
"""

from __future__ import annotations

from .loss import fused_loss, member_accuracy
from .model import FusedModel, FusionError, fuse, supported_layers
from .optim import FusedAdam, FusedAdamW, FusedOptimizer, FusedSGD, fused_optimizer
from .schedulers import FusedCosineAnnealingLR, FusedScheduler, FusedStepLR

__all__ = [
    "FusedAdam", "FusedAdamW", "FusedCosineAnnealingLR", "FusedModel", "FusedOptimizer",
    "FusedSGD", "FusedScheduler", "FusedStepLR", "FusionError", "fuse", "fused_loss",
    "fused_optimizer", "member_accuracy", "supported_layers",
]
