"""Roles a trial can play, marked in its config so every layer can read them.

A Hydro *target trial* (the full model trained on the best surrogate
configuration, :mod:`nbtune.surrogate.eager_transfer`) carries
``config[TARGET_KEY] = True``; allocators read it (Hydro §5.2 places targets by
their measured utilization) without importing the surrogate package above them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SCALING_KEY", "TARGET_KEY", "is_target", "role"]

TARGET_KEY = "nbtune_target"
#: config key of a ``tune(scaling=S)`` trial: the width divisor its model is built with
SCALING_KEY = "scaling"


def is_target(config: Mapping[str, Any]) -> bool:
    """True for a target trial's config."""
    return bool(config.get(TARGET_KEY, False))


def role(config: Mapping[str, Any]) -> str:
    """What a trial is in a Hydro run: ``"target"`` (full model, best configuration),
    ``"surrogate"`` (a shrunk trial of ``tune(scaling=S)``), or ``""`` (an ordinary trial)."""
    if is_target(config):
        return "target"
    return "surrogate" if SCALING_KEY in config else ""
