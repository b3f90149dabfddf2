"""Elastic split (Hydro §5.3): a fused group becomes smaller fused groups, state and all.

When workers go idle, Hydro splits a fused trial evenly into several and places each on
its own worker instead of growing it by data parallelism (no gradient all-reduce between
the parts). At the model level that is: copy the fused model together with its optimizer
and schedulers, and keep a different subset of members in each copy. Each part continues
exactly as the members would have continued together (momentum, Adam moments, running
statistics, schedules included), so it can be checkpointed and relaunched elsewhere.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from .fused_model import FusedModel
from .optim import FusedOptimizer
from .schedulers import FusedScheduler


def even_parts(members: int, parts: int) -> list[list[int]]:
    """Member indices split into ``parts`` contiguous parts whose sizes differ by <= 1."""
    if not 1 <= parts <= members:
        raise ValueError(f"even_parts: need 1 <= parts <= members ({members}), got {parts}")
    size, rest = divmod(members, parts)
    out, start = [], 0
    for p in range(parts):
        end = start + size + (1 if p < rest else 0)
        out.append(list(range(start, end)))
        start = end
    return out


def split_fused(model: FusedModel, optimizer: FusedOptimizer | None = None,
                schedulers: Sequence[FusedScheduler] = (),
                parts: Sequence[Sequence[int]] | int = 2
                ) -> list[tuple[FusedModel, FusedOptimizer | None, list[FusedScheduler]]]:
    """``(model, optimizer, schedulers)`` per part; the originals are left untouched.

    ``parts`` is a list of member-index lists (disjoint) or a count for an even split.
    """
    groups = even_parts(model.members, parts) if isinstance(parts, int) else \
        [list(p) for p in parts]
    flat = [i for g in groups for i in g]
    if len(set(flat)) != len(flat):
        raise ValueError(f"split_fused: parts overlap: {groups}")
    out = []
    for g in groups:
        # one deepcopy of all three keeps their links (optimizer -> parameters -> model)
        m2, o2, s2 = copy.deepcopy((model, optimizer, list(schedulers)))
        # the copied weak references still point at the originals
        m2.refollow(([o2] if o2 is not None else []) + s2)
        m2.keep(g)
        out.append((m2, o2, s2))
    return out
