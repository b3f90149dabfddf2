"""A synthetic workload: learning curves from a quality landscape, Fluid's overhead model.

The default simulated job (``nbtune demo`` before the Dask runtime, the
simulator benchmarks, the what-if notebooks). Every quantity can depend on the
configuration through plain callables, e.g. step time growing with batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nbtune.core.resources import Demand
from nbtune.core.space import validate_space
from nbtune.workloads.curves import PowerLawCurve, QualityLandscape, hashed_uniform
from nbtune.workloads.workload_protocol import OverheadModel, WorkloadModel

__all__ = ["SyntheticWorkload"]

Cfg = Mapping[str, Any]


class SyntheticWorkload(WorkloadModel):
    """Trials whose loss follows :class:`PowerLawCurve` over a :class:`QualityLandscape`.

    ``unit_time`` is seconds per budget unit on one reference GPU, a number or
    a function of the config; ``alpha``/``beta`` are Fluid's packing and
    scaling overheads; ``demand`` is what one trial needs of a GPU alone.
    ``failure_rate`` makes that fraction of trials raise at a random budget.
    """

    def __init__(
        self,
        space: Mapping[str, Any],
        *,
        metric: str = "loss",
        unit_time: float | Callable[[Cfg], float] = 10.0,
        unit_time_jitter: float = 0.0,
        alpha: float = 1.0,
        beta: float = 1.0,
        demand: Demand | Callable[[Cfg], Demand] = Demand(),
        launch_overhead: float = 0.0,
        noise: float = 0.01,
        failure_rate: float = 0.0,
        max_budget_hint: float = 100.0,
        seed: int = 0,
    ) -> None:
        self._space = validate_space(space)
        self.metric = metric
        self._unit_time = unit_time
        self._jitter = float(unit_time_jitter)
        self._overhead = OverheadModel(alpha, beta)
        self._demand = demand
        self._launch = float(launch_overhead)
        self._failure_rate = float(failure_rate)
        self._max_budget_hint = float(max_budget_hint)
        self.seed = seed
        self.landscape = QualityLandscape(self._space, seed=seed)
        self.curve = PowerLawCurve(noise=noise, seed=seed, tau=max(max_budget_hint / 20, 1.0))
        self._cache: dict[int, tuple[dict[str, Any], float, float]] = {}  # trial: config, q, κ

    def _rand(self, trial_id: int, salt: int) -> float:
        """A per-trial draw that does not depend on the order events were simulated in."""
        return hashed_uniform(self.seed, trial_id, salt)

    def unit_time(self, trial_id: int, config: Cfg) -> float:
        base = self._unit_time(config) if callable(self._unit_time) else float(self._unit_time)
        if self._jitter:
            base *= 1.0 + self._jitter * (2.0 * self._rand(trial_id, 1) - 1.0)
        return base

    def overhead(self, config: Cfg) -> OverheadModel:
        return self._overhead

    def metrics(self, trial_id: int, config: Cfg, budget: float) -> dict[str, float]:
        hit = self._cache.get(trial_id)
        if hit is None or hit[0] != config:  # PBT may hand a trial a new config
            hit = self._cache[trial_id] = (dict(config), *self.landscape(config))
        return {self.metric: self.curve.value(trial_id, hit[1], hit[2], budget)}

    def demand(self, trial_id: int, config: Cfg) -> Demand:
        return self._demand(config) if callable(self._demand) else self._demand

    def fails_at(self, trial_id: int, config: Cfg) -> float | None:
        if self._failure_rate and self._rand(trial_id, 2) < self._failure_rate:
            return max(1.0, round(self._rand(trial_id, 3) * self._max_budget_hint))
        return None

    @property
    def launch_overhead(self) -> float:
        return self._launch

    @property
    def space(self) -> dict[str, Any]:
        return dict(self._space)
