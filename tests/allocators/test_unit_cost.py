"""UnitCostFit: an unmeasured trial's time per unit from the trials measured so far."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from nbtune.allocators import DynamicFluidAllocator
from nbtune.allocators.fluid_estimator import FluidEstimator
from nbtune.allocators.unit_cost import UnitCostFit
from nbtune.core.resources import ClusterSpec
from nbtune.core.trial import TrialRecord, TrialSpec, TrialState
from tests.allocators.fluid_views import View


@dataclass
class SeenView(View):
    """A view whose trials have measured times per unit (``seen``: trial -> (s, width))."""

    seen: dict[int, tuple[float, float]] = field(default_factory=dict)

    def unit_time(self, tid: int) -> tuple[float, float] | None:  # type: ignore[override]
        return self.seen.get(tid)


def cost(cfg: dict) -> float:
    """A power law in two sizes, as compute cost grows."""
    return 0.5 * cfg["layers"] ** 1.5 * (128 / cfg["batch"]) ** 0.5


CONFIGS = [{"layers": a, "batch": b, "lr": 0.1 * a} for a in (2, 3, 4) for b in (64, 128, 256)]


def test_a_power_law_is_recovered_from_the_measured_trials():
    fit = UnitCostFit()
    for tid, cfg in enumerate(CONFIGS[:6]):  # layers 2 and 3 only
        fit.observe(tid, cfg, cost(cfg))
    for cfg in CONFIGS[6:]:  # layers 4: beyond what was measured, clamped to the range seen
        hi = max(cost(c) for c in CONFIGS[:6])
        assert fit.predict(cfg) == pytest.approx(min(cost(cfg), hi), rel=1e-9)
    assert fit.predict({"layers": 3, "batch": 128, "lr": 5.0}) == pytest.approx(
        cost({"layers": 3, "batch": 128}), rel=1e-9)  # a float entry does not count


def test_no_answer_without_enough_measurements_or_sizes():
    fit = UnitCostFit(spare=3)
    for tid, cfg in enumerate(CONFIGS[:5]):  # 3 parameters + 3 spare = 6 needed
        fit.observe(tid, cfg, cost(cfg))
        assert fit.predict(CONFIGS[8]) is None
    fit.observe(5, CONFIGS[5], cost(CONFIGS[5]))
    assert fit.predict(CONFIGS[8]) is not None
    assert fit.predict({"layers": 2, "lr": 0.1}) is None  # a size missing: no answer
    floats = UnitCostFit()
    for tid in range(10):
        floats.observe(tid, {"lr": 0.1 * tid}, 1.0 + tid)
    assert not floats.active and floats.predict({"lr": 0.5}) is None
    keyed = UnitCostFit(keys=["batch"])  # the signature's entries only
    for tid, cfg in enumerate(CONFIGS):
        keyed.observe(tid, cfg, 2.0 * math.sqrt(128 / cfg["batch"]))
    assert keyed.predict({"layers": 9, "batch": 100}) == pytest.approx(2.0 * 1.28 ** 0.5, rel=1e-9)


def test_water_filling_places_an_unmeasured_trial_on_the_fit_not_the_mean():
    """Six running trials measured themselves; two new ones of unmeasured sizes wait. Their
    h_i1 comes from the fit of the six (a guess still: they stay in ``guessed``), so the
    bigger one gets the wider share of the idle GPUs."""
    cluster = ClusterSpec.homogeneous(8)
    trials, running, seen = {}, {}, {}
    for tid, cfg in enumerate(CONFIGS[:6]):
        trials[tid] = TrialRecord(tid, cfg, TrialState.RUNNING, target_budget=10.0,
                                  budget_used=1.0)
        running[tid], seen[tid] = ((tid, 1.0),), (cost(cfg), 1.0)
    small, big = {"layers": 2, "batch": 200, "lr": 0.1}, {"layers": 3, "batch": 80, "lr": 0.1}
    for tid, cfg in ((6, small), (7, big)):
        trials[tid] = TrialRecord(tid, cfg, TrialState.PENDING, target_budget=10.0)
    view = SeenView(cluster, trials, running,
                    pending=[TrialSpec(6, small, 10.0), TrialSpec(7, big, 10.0)], seen=seen)
    alloc = DynamicFluidAllocator(c=2, resize_overhead=1.0)
    est = alloc.estimator(view)
    h1 = est.h1({tid: 10.0 for tid in running} | {6: 10.0, 7: 10.0})
    assert est.guessed == {6, 7}
    assert h1[7] / h1[6] == pytest.approx(cost(big) / cost(small), rel=1e-6)
    plain = FluidEstimator(view).h1({6: 10.0, 7: 10.0})  # no fit: both on the same guess
    assert plain[6] == plain[7]
