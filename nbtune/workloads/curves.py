"""Parametric learning curves: something real for algorithms to rank.

loss(b) = q + (l0 − q)·(1 + b/τ)^(−κ) + noise, with the final quality ``q``
and the convergence speed ``κ`` depending on the configuration, so curves of
different configurations cross (early stopping is informative but not
perfect, as in real tuning). Noise shrinks with budget and is drawn from a
generator seeded by (seed, trial, budget), so the value at a budget does not
depend on the order the simulator produced events in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbtune.core.space import Domain

__all__ = ["QualityLandscape", "PowerLawCurve", "hashed_uniform", "hashed_normal"]


class QualityLandscape:
    """A seeded smooth function config -> (final quality q, speed κ) over a search space.

    Numeric hyperparameters contribute a quadratic bowl around a random
    optimum (in the unit-encoded space), categorical ones a random offset per
    option; a random pairwise interaction keeps it from being separable.
    """

    def __init__(self, space: Mapping[str, Any], *, seed: int = 0, q_best: float = 0.05,
                 q_spread: float = 1.0) -> None:
        self.space = {k: v for k, v in space.items() if isinstance(v, Domain)}
        rng = np.random.default_rng([seed, 7919])
        self.names = list(self.space)
        d = len(self.names)
        self.opt = rng.uniform(0.2, 0.8, size=d)
        self.weight = rng.uniform(0.5, 1.5, size=d)
        self.inter = rng.normal(0.0, 0.3, size=(d, d)) if d > 1 else np.zeros((d, d))
        self.cat_offset = {
            k: rng.uniform(0.0, 0.3, size=len(v.options))  # type: ignore[attr-defined]
            for k, v in self.space.items() if v.is_categorical
        }
        self.kappa_dir = rng.normal(0.0, 1.0, size=d)
        self.q_best, self.q_spread = q_best, q_spread

    def encode(self, config: Mapping[str, Any]) -> np.ndarray:
        return np.array([self.space[k].to_unit(config[k]) for k in self.names], dtype=float)

    def __call__(self, config: Mapping[str, Any]) -> tuple[float, float]:
        if not self.names:
            return self.q_best, 0.8
        u = self.encode(config)
        z = u - self.opt
        cost = float((self.weight * z * z).sum() + z @ self.inter @ z * 0.5)  # np.add.reduce
        for k, off in self.cat_offset.items():
            cost += float(off[self.space[k].index(config[k])])  # type: ignore[attr-defined]
        cost = max(cost, 0.0)
        q = self.q_best + self.q_spread * cost / (1.0 + cost)
        kappa = 0.5 + 1.0 / (1.0 + np.exp(-float(self.kappa_dir @ z) * 3.0))
        return q, float(kappa)


@dataclass(frozen=True)
class PowerLawCurve:
    """loss(b) = q + (l0 − q)(1 + b/τ)^(−κ) + σ·N(0,1)/sqrt(1 + b)."""

    l0: float = 2.5
    tau: float = 1.0
    noise: float = 0.01
    seed: int = 0

    def value(self, trial_id: int, q: float, kappa: float, budget: float) -> float:
        base = q + (self.l0 - q) * (1.0 + budget / self.tau) ** (-kappa)
        if self.noise <= 0.0:
            return base
        z = hashed_normal(self.seed, trial_id, int(budget * 1000 + 0.5))
        return base + self.noise * z / math.sqrt(1.0 + budget)


_SCALE = 1.0 / float(1 << 52)


def hashed_uniform(*keys: int) -> float:
    """A uniform in (0, 1) fixed by integer ``keys``, whatever order draws happen in.

    Python's tuple hash of ints is deterministic across runs (no hash
    randomization for ints) and costs well under a microsecond, against tens of
    microseconds for a fresh numpy Generator per draw; the simulator draws one
    per report. Two rounds of hashing decorrelate neighbouring keys.
    """
    h = (hash(keys) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 29
    h = (h * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return ((h >> 12) + 0.5) * _SCALE


def hashed_normal(*keys: int) -> float:
    """A standard normal fixed by ``keys``: Box-Muller on the two halves of one hash."""
    h = (hash(keys) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 29
    h = (h * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    u1 = ((h >> 32) + 0.5) * _HALF
    u2 = ((h & 0xFFFFFFFF) + 0.5) * _HALF
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)


_HALF = 1.0 / float(1 << 32)
_TWO_PI = 2.0 * math.pi
