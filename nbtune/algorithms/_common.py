"""Small helpers shared by the rung-based algorithms (SHA, Hyperband, ASHA, BOHB, PBT).

They live apart from :mod:`nbtune.algorithms.algorithm_protocol` because they encode choices
about *budget arithmetic* (rounding, floating-point guards) rather than the
engine-facing protocol.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from nbtune.algorithms.algorithm_protocol import AlgorithmError
from nbtune.core.space import Domain
from nbtune.core.tolerance import EPS  # reports at 9.000000001 still reach budget 9

__all__ = [
    "EPS",
    "validate_eta",
    "is_integral",
    "snap_budget",
    "rung_budgets",
    "ceil_eps",
    "floor_eps",
    "rank_key",
    "latest_loss",
    "check_fraction",
    "encode",
    "decode",
]

def validate_eta(eta: Any) -> float:
    """Reduction factor: below 2 two successive rungs would round onto the same unit."""
    if isinstance(eta, bool) or not isinstance(eta, int | float) or not math.isfinite(eta):
        raise AlgorithmError(f"eta must be a number >= 2, got {eta!r}")
    if eta < 2:
        raise AlgorithmError(f"eta must be >= 2 (e.g. 3 keeps the top third), got {eta!r}")
    return float(eta)


def check_fraction(name: str, value: Any, *, low: float = 0.0, high: float = 1.0) -> float:
    """A probability-like option must be a number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise AlgorithmError(f"{name} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def is_integral(*values: float) -> bool:
    """True when every budget is a whole number: rung budgets are then rounded to units.

    Runtimes report once per budget unit, so a rung at 3.33 epochs would only be
    observed at epoch 4; rounding keeps every rung on a reported unit.
    """
    return all(abs(v - round(v)) < EPS for v in values)


def snap_budget(b: float, min_budget: float, max_budget: float) -> float:
    """Clamp ``b`` into ``[min_budget, max_budget]``; round to a unit if both ends are integral."""
    b = min(max(b, min_budget), max_budget)
    if is_integral(min_budget, max_budget):
        b = float(min(max(round(b), round(min_budget)), round(max_budget)))
    return float(b)


def rung_budgets(min_budget: float, max_budget: float, eta: float) -> list[float]:
    """``min_budget * eta**k`` below ``max_budget``, then ``max_budget`` itself.

    The last rung is always exactly ``max_budget`` so survivors finish training
    (they complete rather than pause). Strictly increasing, duplicates dropped.
    """
    raw: list[float] = []
    k = 0
    while True:
        b = min_budget * eta**k
        if b >= max_budget * (1 - EPS):
            break
        raw.append(b)
        k += 1
    raw.append(max_budget)
    out: list[float] = []
    for b in raw:
        s = snap_budget(b, min_budget, max_budget)
        if not out or s > out[-1] + EPS:
            out.append(s)
    if out[-1] < max_budget - EPS:  # rounding can only have merged the top with max
        out.append(float(max_budget))
    return out


def ceil_eps(x: float) -> int:
    """ceil that forgives float noise: ceil(27.000000000000004) is 27."""
    return int(math.ceil(x - EPS))


def floor_eps(x: float) -> int:
    """floor that forgives float noise: floor(2.9999999999999996) is 3."""
    return int(math.floor(x + EPS))


def rank_key(loss: float | None) -> float:
    """Sort key: NaN and missing results rank last, like a failed trial."""
    if loss is None or math.isnan(loss):
        return math.inf
    return float(loss)


def latest_loss(history: Mapping[int, Mapping[float, float]], trial_id: int) -> float:
    """The loss at the largest budget a trial reported (``inf`` if it never reported).

    Rung decisions use the last result of a segment rather than the result at the
    exact rung budget, so they stay right if a runtime reports on another grid.
    """
    h = history.get(trial_id)
    if not h:
        return math.inf
    return rank_key(h[max(h)])


def encode(domains: Mapping[str, Domain], config: Mapping[str, Any]) -> list[float]:
    """A config as a point of the unit cube, one coordinate per domain (density models)."""
    return [min(max(float(d.to_unit(config[k])), 0.0), 1.0) for k, d in domains.items()]


def decode(
    domains: Mapping[str, Domain], space: Mapping[str, Any], u: Any
) -> dict[str, Any]:
    """Inverse of :func:`encode`; constants of the space are copied as they are."""
    cfg: dict[str, Any] = {}
    it = iter([float(x) for x in u])
    for k, v in space.items():
        cfg[k] = v.from_unit(next(it)) if k in domains else v
    return cfg
