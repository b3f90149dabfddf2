"""Roles a trial can play, marked in its config so every layer can read them.

A Hydro *target trial* (the full model trained on the best surrogate
configuration, :mod:`nbtune.surrogate.eager_transfer`) carries
``config[TARGET_KEY] = True``; allocators read it (Hydro §5.2 places targets by
their measured utilization) without importing the surrogate package above them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TARGET_KEY", "is_target"]

TARGET_KEY = "nbtune_target"


def is_target(config: Mapping[str, Any]) -> bool:
    """True for a target trial's config."""
    return bool(config.get(TARGET_KEY, False))
