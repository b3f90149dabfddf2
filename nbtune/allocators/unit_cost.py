"""A new trial's time per unit predicted from the trials measured so far in the run.

Water-filling needs h_i1 for every trial it places, and a trial whose model no
trial has measured yet has none. The trials of one search are mostly the same
network at other sizes: layers, widths, batch sizes, whose compute cost grows
as a power of each (Paleo's per-layer FLOP counts are products of sizes), so
log(time per unit) is close to linear in the logs of the whole-number config
entries. :class:`UnitCostFit` keeps each measured trial's whole-number entries
and time per unit and answers an unmeasured config with the least-squares fit,
kept within the range of times measured. It knows only measurements (no
workload model); a config with no positive whole-number entry, or too few
measured trials for the fit, gets no answer and the caller keeps its fallback.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["UnitCostFit"]


class UnitCostFit:
    """log(seconds per unit) fitted on the logs of a config's positive whole-number entries.

    ``keys`` restricts the entries to those names (an allocator's ``signature_keys``); by
    default the entries are those of the first config observed whose values are positive
    integers. ``spare`` is how many measured trials beyond the fit's parameters it needs
    before it answers.
    """

    def __init__(self, keys: Iterable[str] | None = None, *, spare: int = 3) -> None:
        self.keys = None if keys is None else sorted(keys)
        self.spare = int(spare)
        self._names: tuple[str, ...] | None = None  # the entries fitted on, fixed at first sight
        self._x: dict[int, tuple[float, ...] | None] = {}  # trial -> 1 and its log entries
        self._y: dict[int, float] = {}  # trial -> seconds per unit measured last
        self._fit: tuple[np.ndarray, float, float] | None = None  # coef, lowest, highest log
        #: moves whenever what :meth:`predict` answers may have: equal, the same answers
        self.generation = 0

    @property
    def active(self) -> bool:
        """False once the entries are known to be none: nothing is ever predicted."""
        return self._names is None or bool(self._names)

    def _features(self, config: Mapping[str, Any]) -> tuple[float, ...] | None:
        names = self._names
        if names is None:
            pool = config if self.keys is None else {k: config[k] for k in self.keys
                                                     if k in config}
            names = self._names = tuple(sorted(k for k, v in pool.items() if _whole(v)))
            self.generation += 1
        out = [1.0]
        for k in names:
            v = config.get(k)
            if not _whole(v):
                return None
            out.append(math.log(v))
        return tuple(out)

    def observe(self, trial_id: int, config: Mapping[str, Any], unit_time: float) -> None:
        """Trial ``trial_id`` (of ``config``) measured ``unit_time`` seconds per unit alone."""
        if self._y.get(trial_id) == unit_time or not unit_time > 0:
            return
        if trial_id not in self._x:
            self._x[trial_id] = self._features(config)
        if self._x[trial_id] is None:
            return
        self._y[trial_id] = unit_time
        self._fit = None
        self.generation += 1

    def predict(self, config: Mapping[str, Any]) -> float | None:
        """Seconds per unit for ``config``, or None (too few measured, or not a config it fits)."""
        if not self.active:
            return None
        x = self._features(config)
        if x is None or len(self._y) < len(x) + self.spare:
            return None
        fit = self._fit
        if fit is None:
            xs = np.array([self._x[t] for t in self._y], dtype=float)
            ys = np.log(np.fromiter(self._y.values(), dtype=float, count=len(self._y)))
            coef = np.linalg.lstsq(xs, ys, rcond=None)[0]
            fit = self._fit = (coef, float(ys.min()), float(ys.max()))
        coef, lo, hi = fit
        guess = float(np.dot(coef, x))
        return math.exp(min(max(guess, lo), hi))


def _whole(v: Any) -> bool:
    """A positive whole number (not a bool): a size the cost can grow as a power of."""
    return isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0
