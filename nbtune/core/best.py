"""The best trial: the one rule ``exp.best``, ``nbtune ls/show``, the sidebar and the report share.

Only the trials trained the furthest compete: a loss at budget 1 is not
comparable to one at 81 (early leaders of a successive-halving run are
often not the late ones). Among them the best value wins; a tie goes to the
first in the order given (trial id order everywhere).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from nbtune.core.tolerance import EPS

__all__ = ["best_index"]


def best_index(scores: Iterable[tuple[float | None, float]], mode: str) -> int | None:
    """Index of the best of ``(value, budget_used)`` pairs, or None when no value is known.

    ``mode`` is ``"min"`` or ``"max"``. A value of None was not reported; NaN or
    infinite is a diverged run, never the best.
    """
    items = [(i, float(v), float(b)) for i, (v, b) in enumerate(scores)
             if v is not None and math.isfinite(v)]
    if not items:
        return None
    top = max(b for _, _, b in items)
    sign = 1.0 if mode == "min" else -1.0
    full = [(sign * v, i) for i, v, b in items if b >= top - EPS]
    return min(full, key=lambda x: x[0])[1]
