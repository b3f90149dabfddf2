"""ASHA: asynchronous successive halving (Li et al., MLSys 2020), promotion variant.

Rungs sit at ``min_budget * eta**k`` (then ``max_budget``). Every trial trains
to its rung's budget and pauses. Whenever a slot frees up, :meth:`ASHA.ask`
first looks for a promotion — from the highest rung down, a paused trial in the
top ``floor(n_k / eta)`` of the ``n_k`` results recorded at rung ``k`` that was
not promoted yet — and otherwise starts a new config at ``min_budget``. No
barrier: GPUs never wait for a rung to fill, at the price of sometimes
promoting a trial that a full rung would have cut.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

from nbtune.algorithms._common import EPS, latest_loss, rank_key, rung_budgets, validate_eta
from nbtune.algorithms.base import AlgorithmError, BaseAlgorithm
from nbtune.core.group import TrialGroup
from nbtune.core.space import sample_config
from nbtune.core.trial import TrialSpec, TrialState

__all__ = ["ASHA", "promotable"]


def promotable(results: Mapping[int, float], eta: float) -> list[int]:
    """Trial ids in the top ``floor(n / eta)`` of one rung's results (best first).

    The pure promotion rule, for property tests. Ties are broken by trial id.
    """
    k = int(len(results) // eta + 1e-9)
    ranked = sorted(results, key=lambda t: (rank_key(results[t]), t))
    return ranked[:k]


class ASHA(BaseAlgorithm):
    """Asynchronous successive halving with promotions (never stops a running trial).

    When ``num_trials`` configs exist, nothing runs and nothing can be promoted
    any more, the paused leftovers are retired (see :meth:`pop_retired`) and
    :attr:`finished` becomes True, so the experiment can end.
    """

    name = "asha"

    def __init__(self, space: Mapping[str, Any], *, eta: float = 3, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        if self.num_trials is None:
            raise AlgorithmError(
                f"{self.name} has no natural size: pass num_trials (how many configs to start)"
            )
        self.eta = validate_eta(eta)
        self.rungs = rung_budgets(self.min_budget, self.max_budget, self.eta)
        #: per rung: trial id -> loss recorded when the trial reached that rung
        self.rung_results: list[dict[int, float]] = [{} for _ in self.rungs]
        #: per rung: (rank key, trial id) kept sorted as results arrive, so finding the
        #: next promotion does not re-sort the rung on every report (O(n log n) each time
        #: made a 1,000-trial run take seconds)
        self._ranked: list[list[tuple[float, int]]] = [[] for _ in self.rungs]
        self.promoted: list[set[int]] = [set() for _ in self.rungs]
        self.level: dict[int, int] = {}
        self._active: set[int] = set()
        self._paused: set[int] = set()
        self._done = False

    # ---------------------------------------------------------------- hooks
    def sample_new_config(self) -> dict[str, Any]:
        return sample_config(self.space, self.rng)

    def observe(self, trial_id: int, budget: float, loss: float) -> None:
        """A trial finished a rung at ``budget`` with ``loss`` (model-based subclasses learn)."""

    # ------------------------------------------------------------- promotion
    def find_promotion(self) -> tuple[int, int] | None:
        """``(trial_id, rung)`` of the next promotion, highest rung first, or None."""
        for k in range(len(self.rungs) - 2, -1, -1):
            ranked = self._ranked[k]
            top = int(len(ranked) // self.eta + 1e-9)  # the rule of :func:`promotable`
            promoted, paused = self.promoted[k], self._paused
            for _, t in ranked[:top]:
                if t not in promoted and t in paused:
                    return t, k
        return None

    def _settle(self) -> None:
        """Retire what can never be promoted once no new work can change the rungs."""
        if self._done or self.budget_ok() or self._active or self.find_promotion():
            return
        for t in sorted(self._paused):
            self.retire(t)
        self._paused.clear()
        self._done = True

    def ask(self, max_trials: int) -> list[TrialGroup]:
        """Up to ``max_trials`` specs: promotions first, then new configs at ``min_budget``."""
        specs: list[TrialSpec] = []
        while len(specs) < max_trials and not self._done:
            p = self.find_promotion()
            if p is not None:
                t, k = p
                self.promoted[k].add(t)
                self._paused.discard(t)
                self._active.add(t)
                self.level[t] = k + 1
                specs.append(TrialSpec(t, dict(self.configs[t]), self.rungs[k + 1]))
            elif self.budget_ok():
                spec = self.new_spec(self.sample_new_config(), self.rungs[0])
                self._active.add(spec.trial_id)
                self.level[spec.trial_id] = 0
                specs.append(spec)
            else:
                break
        self._settle()
        return [self.new_group(specs)] if specs else []

    # ----------------------------------------------------------------- events
    def _reach_rung(self, trial_id: int) -> None:
        k = self.level[trial_id]
        loss = latest_loss(self.history, trial_id)
        old = self.rung_results[k].get(trial_id)
        if old is not None:
            self._ranked[k].remove((rank_key(old), trial_id))
        self.rung_results[k][trial_id] = loss
        bisect.insort(self._ranked[k], (rank_key(loss), trial_id))
        self.observe(trial_id, self.rungs[k], loss)

    def on_segment_end(self, trial_id: int, budget: float) -> None:
        if trial_id not in self._active or budget < self.rungs[self.level[trial_id]] - EPS:
            return  # not a rung result (the engine paused it for its own reasons)
        self._active.discard(trial_id)
        self._reach_rung(trial_id)
        self._paused.add(trial_id)
        self._settle()

    def on_trial_end(self, trial_id: int, state: TrialState) -> None:
        super().on_trial_end(trial_id, state)
        if trial_id in self._active and state == TrialState.COMPLETED:
            self._reach_rung(trial_id)
        self._active.discard(trial_id)
        self._paused.discard(trial_id)
        self._settle()

    @property
    def finished(self) -> bool:
        return self._done
