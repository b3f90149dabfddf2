"""Population Based Training (Jaderberg et al., 2017), asynchronous like Ray Tune's.

A population of ``num_trials`` trials trains in segments of
``perturbation_interval`` budget units. At each segment end a trial in the
bottom ``quantile_fraction`` of the population's latest results *exploits*: it
takes a top-quantile trial's weights (``restore_from=donor``) and config, then
*explores*: numeric values are multiplied by 0.8 or 1.2 (clipped to the
domain) and categorical values are resampled with ``resample_probability``.
Other trials simply continue from their own checkpoint.

Budget accounting follows the weights, as in the engine's admission of a
``restore_from`` spec (``budget_used`` becomes the donor's ``budget_used``):
an exploiting trial paused at ``b`` gets
``TrialSpec(t, cfg, next_boundary(used_d), restore_from=d)`` where ``used_d``
is the donor's budget now (its latest report). Donors are top-quantile trials
with a checkpoint at or beyond ``b`` and short of ``max_budget``, so a trial's
budget never goes backwards and there is always budget left to train. When the
donor is mid-segment its latest checkpoint is behind ``used_d`` by less than one
interval; an engine that counts from the donor's *checkpoint* budget instead
gets a valid spec too (it then trains a little longer to the same boundary).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from nbtune.algorithms._common import EPS, check_fraction, rank_key
from nbtune.algorithms.algorithm_protocol import AlgorithmError, BaseAlgorithm
from nbtune.core.group import TrialGroup
from nbtune.core.space import Choice, Domain, RandInt
from nbtune.core.trial import Decision, TrialSpec, TrialState

__all__ = ["PBT", "perturb"]


def perturb(
    config: Mapping[str, Any],
    space: Mapping[str, Any],
    rng: Any,
    *,
    resample_probability: float = 0.25,
    factors: tuple[float, float] = (0.8, 1.2),
    keys: Sequence[str] | None = None,
) -> dict[str, Any]:
    """PBT's explore step on a copy of ``config`` (only ``keys`` if given); stays in the space."""
    out = dict(config)
    for k, dom in space.items():
        if not isinstance(dom, Domain) or (keys is not None and k not in keys):
            continue
        if isinstance(dom, Choice):
            if rng.random() < resample_probability:
                out[k] = dom.sample(rng)
            continue
        f = factors[int(rng.integers(2))]
        v = out[k]
        if isinstance(dom, RandInt):
            nv = int(round(v * f))
            if nv == v:  # small ints would never move: step by one in f's direction
                nv = v + (1 if f > 1 else -1)
            out[k] = int(min(max(nv, dom.low), dom.high - 1))
        else:
            low, high = float(dom.low), float(dom.high)  # type: ignore[attr-defined]
            nv = min(max(float(v) * f, low), high)
            out[k] = dom.from_unit(dom.to_unit(nv))  # re-quantizes q-domains
    return out


class PBT(BaseAlgorithm):
    """Asynchronous PBT; ``num_trials`` is the population size.

    Segment ends are multiples of ``perturbation_interval`` (default
    ``max(1, round(max_budget / 10))``) capped at ``max_budget``. Every exploit
    is logged in :attr:`exploits` (trial, donor, budget, top, bottom, the
    donor's config and the explored config) for dashboards and tests.
    """

    name = "pbt"

    def __init__(
        self,
        space: Mapping[str, Any],
        *,
        perturbation_interval: float | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: tuple[float, float] = (0.8, 1.2),
        hyperparam_mutations: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(space, **kwargs)
        if self.num_trials is None:
            raise AlgorithmError("pbt has no natural size: pass num_trials (the population size)")
        if perturbation_interval is None:
            perturbation_interval = max(1.0, float(round(self.max_budget / 10)))
        if not (isinstance(perturbation_interval, int | float) and perturbation_interval > 0):
            raise AlgorithmError(
                f"perturbation_interval must be a number > 0, got {perturbation_interval!r}"
            )
        self.interval = float(perturbation_interval)
        self.quantile_fraction = check_fraction("quantile_fraction", quantile_fraction, high=0.5)
        self.resample_probability = check_fraction("resample_probability", resample_probability)
        if len(perturbation_factors) != 2 or min(perturbation_factors) <= 0:
            raise AlgorithmError(
                f"perturbation_factors must be two numbers > 0, got {perturbation_factors!r}"
            )
        self.factors = (float(perturbation_factors[0]), float(perturbation_factors[1]))
        if hyperparam_mutations is not None:
            unknown = [k for k in hyperparam_mutations if k not in self.space]
            if unknown:
                raise AlgorithmError(f"hyperparam_mutations names unknown hyperparameters {unknown}")
        self.mutations = None if hyperparam_mutations is None else list(hyperparam_mutations)
        #: trial -> latest loss (what the population is ranked by)
        self.score: dict[int, float] = {}
        #: trial -> budget of its latest checkpoint (segment end)
        self.checkpoint: dict[int, float] = {}
        #: trial -> budget the engine counts for it (latest report, or inherited from a donor)
        self.used: dict[int, float] = {}
        self.exploits: list[dict[str, Any]] = []
        self._active: set[int] = set()
        self._paused: set[int] = set()

    def next_boundary(self, budget: float) -> float:
        k = math.floor(budget / self.interval + EPS) + 1
        return min(self.max_budget, k * self.interval)

    def quantiles(self) -> tuple[list[int], list[int]]:
        """(top, bottom) of the population by latest result; empty until two trials reported."""
        ranked = sorted(
            (t for t in self.score if self.ended.get(t) != TrialState.ERROR),
            key=lambda t: (rank_key(self.score[t]), t),
        )
        k = min(math.ceil(len(ranked) * self.quantile_fraction), len(ranked) // 2)
        if k == 0:
            return [], []
        return ranked[:k], ranked[-k:]

    def _continue(self, trial_id: int) -> TrialSpec:
        b = self.checkpoint[trial_id]
        nxt = self.next_boundary(b)
        top, bottom = self.quantiles()
        donors = [
            d for d in top
            if d != trial_id
            and self.checkpoint.get(d, 0.0) >= b - EPS
            and self.used.get(d, 0.0) < self.max_budget - EPS
        ]
        if trial_id in bottom and donors:
            donor = donors[int(self.rng.integers(len(donors)))]
            self.used[trial_id] = self.used.get(donor, self.checkpoint[donor])
            nxt = self.next_boundary(self.used[trial_id])
            cfg = perturb(
                self.configs[donor], self.space, self.rng,
                resample_probability=self.resample_probability,
                factors=self.factors, keys=self.mutations,
            )
            self.exploits.append(
                {"trial_id": trial_id, "donor": donor, "budget": b, "top": list(top),
                 "bottom": list(bottom), "donor_config": dict(self.configs[donor]),
                 "config": dict(cfg)}
            )
            self.configs[trial_id] = cfg
            self.score[trial_id] = self.score[donor]  # its old result no longer describes it
            return TrialSpec(trial_id, dict(cfg), nxt, restore_from=donor)
        return TrialSpec(trial_id, dict(self.configs[trial_id]), nxt)

    def ask(self, max_trials: int) -> list[TrialGroup]:
        """New members first (the population must exist to compare), then the laggards."""
        specs: list[TrialSpec] = []
        while len(specs) < max_trials and self.budget_ok():
            spec = self.new_spec(self.draw_config(), self.next_boundary(0.0))
            specs.append(spec)
            self._active.add(spec.trial_id)
        for t in sorted(self._paused, key=lambda t: (self.checkpoint[t], t)):
            if len(specs) >= max_trials:
                break
            specs.append(self._continue(t))
            self._paused.discard(t)
            self._active.add(t)
        return [self.new_group(specs)] if specs else []

    def on_report(self, trial_id: int, budget: float, metrics: Mapping[str, Any]) -> Decision:
        loss = self.record(trial_id, budget, metrics)
        if loss is not None:
            self.score[trial_id] = loss
        self.used[trial_id] = max(self.used.get(trial_id, 0.0), float(budget))
        return Decision.CONTINUE

    def on_segment_end(self, trial_id: int, budget: float) -> None:
        if trial_id not in self._active:
            return
        self.checkpoint[trial_id] = float(budget)
        self.used[trial_id] = max(self.used.get(trial_id, 0.0), float(budget))
        if budget >= self.max_budget - EPS:
            return  # the engine completes it
        self._active.discard(trial_id)
        self._paused.add(trial_id)

    def on_trial_end(self, trial_id: int, state: TrialState) -> None:
        super().on_trial_end(trial_id, state)
        if state == TrialState.COMPLETED:
            self.checkpoint[trial_id] = self.max_budget
        self._active.discard(trial_id)
        self._paused.discard(trial_id)

    @property
    def finished(self) -> bool:
        return not self.budget_ok() and not self._active and not self._paused
