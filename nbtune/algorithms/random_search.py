"""Random search: ``num_trials`` independent samples, each trained to ``max_budget``.

Random search is the baseline every adaptive method must beat (Bergstra &
Bengio, 2012). As in Fluid it is one :class:`~nbtune.core.group.TrialGroup`
holding every trial, so the allocator can plan the whole makespan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbtune.algorithms.algorithm_protocol import AlgorithmError, BaseAlgorithm
from nbtune.core.group import TrialGroup

__all__ = ["RandomSearch"]


class RandomSearch(BaseAlgorithm):
    """``num_trials`` configurations drawn from the space with the algorithm's seeded RNG."""

    name = "random"
    #: the whole search is one group: a larger-than-``max_trials`` answer is expected
    synchronous = True

    def __init__(self, space: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        if self.num_trials is None:
            raise AlgorithmError(
                "random search has no natural size: pass num_trials (how many configs to try)"
            )
        self._issued = False

    def ask(self, max_trials: int) -> list[TrialGroup]:
        """Everything at once on the first call (regardless of ``max_trials``), then nothing."""
        if self._issued:
            return []
        self._issued = True
        assert self.num_trials is not None
        specs = [
            self.new_spec(self.draw_config(), self.max_budget)
            for _ in range(self.num_trials)
        ]
        return [self.new_group(specs)]

    @property
    def finished(self) -> bool:
        return self._issued
