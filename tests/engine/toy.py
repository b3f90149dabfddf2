"""A deliberately tiny algorithm for engine and simulator tests (no dependency on nbtune.algorithms)."""

from __future__ import annotations

from nbtune.algorithms.algorithm_protocol import BaseAlgorithm
from nbtune.core.group import TrialGroup
from nbtune.core.space import sample_config


class OneShot(BaseAlgorithm):
    """All ``num_trials`` configs in one TrialGroup, each trained to ``max_budget``."""

    name = "oneshot"

    def __init__(self, *args, stop_above: float | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stop_above = stop_above
        self._asked = False

    def ask(self, max_trials: int) -> list[TrialGroup]:
        if self._asked:
            return []
        self._asked = True
        specs = [self.new_spec(sample_config(self.space, self.rng), self.max_budget)
                 for _ in range(self.num_trials or 1)]
        return [self.new_group(specs)]

    def on_report(self, trial_id, budget, metrics):
        from nbtune.core.trial import Decision

        loss = self.record(trial_id, budget, metrics)
        if self.stop_above is not None and loss is not None and budget >= 2 and loss > self.stop_above:
            return Decision.STOP
        return Decision.CONTINUE

    @property
    def finished(self) -> bool:
        return self._asked
