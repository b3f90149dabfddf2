"""Grid search: every combination of the ``grid([...])`` domains, each trained to ``max_budget``.

Like Fluid, the whole search is a single :class:`~nbtune.core.group.TrialGroup`,
handed out on the first :meth:`~GridSearch.ask`: there are no stages, so the
allocator sees all the work at once and can minimise its makespan.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from nbtune.algorithms.algorithm_protocol import AlgorithmError, BaseAlgorithm
from nbtune.core.group import TrialGroup
from nbtune.core.space import grid_configs, has_grid, sample_config

__all__ = ["GridSearch"]


class GridSearch(BaseAlgorithm):
    """Exhaustive search over the cartesian product of ``grid`` domains.

    Other domains (``uniform``, ``choice``, ...) are sampled once per trial, as
    in Ray Tune. ``num_trials`` is the *total* number of trials, which makes it
    both a limit and a repeat count:

    * ``None`` runs the grid once;
    * fewer than the grid size runs the first ``num_trials`` points (in
      declaration order), a cap the user asked for;
    * more than the grid size cycles through the grid again, resampling the
      non-grid domains each pass (repeats with different seeds/samples), and
      truncates the last pass. Ray's ``num_samples=k`` is ``num_trials = k * size``.
    """

    name = "grid"
    #: the whole search is one group: a larger-than-``max_trials`` answer is expected
    synchronous = True

    def __init__(self, space: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        if not has_grid(self.space):
            raise AlgorithmError(
                "grid search needs at least one grid([...]) domain in the space; "
                "use algorithm='random' to sample the other domains"
            )
        if self.points_to_evaluate:
            raise AlgorithmError("grid search tries its grid: points_to_evaluate is for the "
                                 "algorithms that sample (random, asha, hyperband, bohb, ...)")
        self.grid_size = sum(1 for _ in grid_configs(self.space))
        self._issued = False

    def _configs(self) -> list[dict[str, Any]]:
        total = self.grid_size if self.num_trials is None else self.num_trials
        points = itertools.islice(itertools.cycle(list(grid_configs(self.space))), total)
        # each point still holds the non-grid domains: sample them, constants are copied
        return [sample_config(p, self.rng) for p in points]

    def ask(self, max_trials: int) -> list[TrialGroup]:
        """Everything at once on the first call (regardless of ``max_trials``), then nothing."""
        if self._issued:
            return []
        self._issued = True
        specs = [self.new_spec(c, self.max_budget) for c in self._configs()]
        return [self.new_group(specs)]

    @property
    def finished(self) -> bool:
        return self._issued
