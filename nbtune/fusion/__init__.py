"""Inter-trial fusion (Hydro §4.2): F trials of one architecture trained as one batched model.

``fuse(models)`` gives a :class:`FusedModel` whose parameters carry a leading member axis;
``fused_optimizer`` and the fused schedulers take per-member hyperparameter vectors;
``fused_loss`` sums each member's mean loss so every member gets exactly the gradient it
would get alone. ``FusedModel.defuse(k)`` and ``keep(indices)`` take members out.
"""

from __future__ import annotations

import importlib
from typing import Any

#: where each public name lives; imported on first use (PEP 562), because these need torch
#: and the engine imports :mod:`nbtune.fusion.trial_planner` (pure): an eager import here would
#: make ``import nbtune`` (and every Dask worker, through nbtune's plugins) import torch,
#: most of a worker's start-up time
_WHERE = {
    "fused_loss": "loss", "member_accuracy": "loss",
    "FusedModel": "fused_model", "FusionError": "fused_model", "fuse": "fused_model",
    "supported_layers": "fused_model",
    "FusedAdam": "optim", "FusedAdamW": "optim", "FusedOptimizer": "optim", "FusedSGD": "optim",
    "fused_optimizer": "optim",
    "FusedCosineAnnealingLR": "schedulers", "FusedScheduler": "schedulers",
    "FusedStepLR": "schedulers",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "FusedAdam", "FusedAdamW", "FusedCosineAnnealingLR", "FusedModel", "FusedOptimizer",
    "FusedSGD", "FusedScheduler", "FusedStepLR", "FusionError", "fuse", "fused_loss",
    "fused_optimizer", "member_accuracy", "supported_layers",
]
