"""Fluid's overhead model: how a trial's runtime changes with the GPU width it is given.

Pure data shared by the policies that plan widths (allocators) and the models
that simulate them (workloads): it lives in core so that neither depends on
the other.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OverheadModel"]


@dataclass(frozen=True)
class OverheadModel:
    """Fluid §4.2.2: h(w) = h1·α^(1/w − 1) for w < 1 and h1/w·β^(w − 1) for w ≥ 1.

    ``alpha`` ≥ 1 measures packing overhead (MPS), ``beta`` ≥ 1 scaling
    overhead (distributed training).
    """

    alpha: float = 1.0
    beta: float = 1.0

    def __post_init__(self) -> None:
        if self.alpha < 1 or self.beta < 1:
            raise ValueError(f"alpha and beta must be >= 1, got {self.alpha}, {self.beta}")

    def factor(self, w: float) -> float:
        """Runtime at width ``w`` divided by runtime at width 1."""
        if w <= 0:
            raise ValueError(f"width must be > 0, got {w}")
        if w < 1:
            return self.alpha ** (1.0 / w - 1.0)
        return self.beta ** (w - 1.0) / w

    def runtime(self, h1: float, w: float) -> float:
        return h1 * self.factor(w)
