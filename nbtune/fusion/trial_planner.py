"""Trial Planner (Hydro §4.3, adaptive fusion): which trials fuse, and how many per worker.

1. Trials fuse only when their operator shapes agree, so they are grouped by the
   hyperparameters that change shapes (batch size, widths, layer counts: ``shape_keys``);
   the rest (learning rate, momentum, decay, ...) vary inside a group.
2. Each group's F_max comes from its memory measured at F = 1 and F = 2
   (:func:`nbtune.fusion.memory.fusion_limit`).
3. Workers (GPUs) are shared between groups by weight. The paper's weight is
   ``batch size x trial count`` (§4.3 step 4) and that is the default here: a group's work
   per epoch is proportional to the samples it processes, which is B x N. Hydro's released
   code splits workers evenly between groups instead (``weighting="even"``), which starves
   large groups when groups differ in size.
4. Inside a group, trials are spread evenly over fused units: at least one unit per
   worker the group got (so none idles) and enough units that none exceeds F_max.

Pure code: it receives measurements, it does not take them.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ShapeGroup:
    """Trials that can fuse: same shape-changing hyperparameters (a shape group).

    Not an algorithm's :class:`nbtune.core.group.TrialGroup`: this one only says which
    of the configs given to :func:`group_trials` may share one fused model.
    """

    key: tuple[tuple[str, Hashable], ...]
    trials: tuple[int, ...]  # indices into the configs given to group_trials
    batch_size: int = 1

    @property
    def weight(self) -> int:
        return self.batch_size * len(self.trials)


@dataclass(frozen=True)
class FusedUnit:
    """One fused model on one worker: a group's member trials."""

    group: int
    trials: tuple[int, ...]


@dataclass
class FusionPlan:
    groups: list[ShapeGroup]
    workers: list[int]  # workers per group
    units: list[FusedUnit] = field(default_factory=list)


def group_trials(configs: Sequence[Mapping[str, Any]], shape_keys: Sequence[str],
                 batch_key: str | None = "batch_size") -> list[ShapeGroup]:
    """Split configs into fusible groups by the values of ``shape_keys`` (first-seen order)."""
    if batch_key is not None and batch_key not in shape_keys:
        shape_keys = [*shape_keys, batch_key]
    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(configs):
        missing = [k for k in shape_keys if k not in cfg]
        if missing:
            raise KeyError(f"group_trials: config {i} lacks shape key(s) {missing}")
        key = tuple((k, _hashable(cfg[k])) for k in shape_keys)
        groups.setdefault(key, []).append(i)
    out = []
    for key, trials in groups.items():
        bs = int(dict(key)[batch_key]) if batch_key is not None else 1
        out.append(ShapeGroup(key, tuple(trials), bs))
    return out


def _hashable(v: Any) -> Hashable:
    return tuple(v) if isinstance(v, list) else v


def share_workers(groups: Sequence[ShapeGroup], workers: int,
                  weighting: str = "paper") -> list[int]:
    """Workers per group, proportional to weight (largest remainder), each group >= 1 when
    there are enough workers; when there are fewer workers than groups, the heaviest groups
    get one each and the rest wait for a worker (0)."""
    if workers < 1:
        raise ValueError(f"share_workers: need at least one worker, got {workers}")
    if weighting not in ("paper", "even"):
        raise ValueError(f"share_workers: weighting is 'paper' or 'even', got {weighting!r}")
    n = len(groups)
    if n == 0:
        return []
    weights = [g.weight if weighting == "paper" else 1 for g in groups]
    if workers < n:
        order = sorted(range(n), key=lambda i: -weights[i])
        share = [0] * n
        for i in order[:workers]:
            share[i] = 1
        return share
    # one each, the rest by weight (largest remainder), never more than a group's trials
    share = [1] * n
    spare = workers - n
    total = sum(weights)
    ideal = [spare * w / total for w in weights]
    extra = [math.floor(x) for x in ideal]
    left = spare - sum(extra)
    for i in sorted(range(n), key=lambda i: -(ideal[i] - extra[i]))[:left]:
        extra[i] += 1
    share = [min(s + e, len(g.trials)) for s, e, g in zip(share, extra, groups, strict=True)]
    return share


def split_group(trials: Sequence[int], workers: int, f_max: int) -> list[tuple[int, ...]]:
    """Trials spread evenly over ``max(workers, ceil(n / f_max))`` units (sizes differ by
    at most one, none above f_max)."""
    if f_max < 1:
        raise ValueError(f"split_group: f_max must be >= 1, got {f_max}")
    n = len(trials)
    if n == 0:
        return []
    units = min(n, max(workers, math.ceil(n / f_max)))
    size, rest = divmod(n, units)
    out, start = [], 0
    for u in range(units):
        end = start + size + (1 if u < rest else 0)
        out.append(tuple(trials[start:end]))
        start = end
    return out


def plan_fusion(configs: Sequence[Mapping[str, Any]], shape_keys: Sequence[str],
                workers: int, f_max: int | Mapping[tuple, int] | Any,
                batch_key: str | None = "batch_size", weighting: str = "paper") -> FusionPlan:
    """Hydro's adaptive fusion: groups, workers per group, fused units.

    ``f_max`` is one limit for every group, a mapping from group key to limit, or a
    callable ``group -> limit`` (e.g. measuring memory with :mod:`.memory`).
    """
    groups = group_trials(configs, shape_keys, batch_key)
    share = share_workers(groups, workers, weighting)
    plan = FusionPlan(groups, share)
    for gi, (g, w) in enumerate(zip(groups, share, strict=True)):
        limit = (f_max(g) if callable(f_max)
                 else f_max[g.key] if isinstance(f_max, Mapping) else int(f_max))
        for unit in split_group(g.trials, max(w, 1), limit):
            plan.units.append(FusedUnit(gi, unit))
    return plan
