"""Where water-filling's numbers come from: measurements, priors, and the interference model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbtune
from nbtune import SimRuntime, grid
from nbtune.allocators import DynamicFluidAllocator
from nbtune.core.resources import GPU, ClusterSpec, Demand
from nbtune.core.trial import TrialRecord, TrialState
from nbtune.workloads import SyntheticWorkload
from nbtune.workloads.interference import InterferenceWorkload, calibrate
from nbtune.workloads.workload_protocol import Neighbor
from tests.allocators.fluid_views import View

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "hydro-artifact"


@dataclass
class MeasuredView(View):
    measured: tuple[float, float] | None = None

    def unit_time(self, tid: int) -> tuple[float, float] | None:
        return self.measured


def _view(measured, placement, *, used=2.0, results=(), share_since=0.0, time=0.0, wl=None):
    t = TrialRecord(0, {"i": 0}, TrialState.RUNNING, target_budget=10.0, budget_used=used,
              results=list(results), share_since=share_since)
    hints = {"workload": wl} if wl is not None else {}
    return MeasuredView(ClusterSpec.homogeneous(4), {0: t}, {0: placement}, hints=hints,
                        time=time, measured=measured)


def test_a_measurement_is_converted_to_width_one_through_the_overhead_model():
    wl = SyntheticWorkload({"i": grid([0])}, unit_time=99.0, alpha=1.2, beta=1.1)
    # 2.5 s per unit measured on 3 GPUs: h1/unit = 2.5 / (β²/3)
    est = DynamicFluidAllocator().estimator(_view((2.5, 3.0), ((0, 1.0), (1, 1.0), (2, 1.0)),
                                                  wl=wl))
    assert est.unit_time(0) == pytest.approx(2.5 * 3 / 1.1**2)
    # measured at a quarter GPU: 4 s = h1·α³
    est = DynamicFluidAllocator().estimator(_view((4.0, 0.25), ((0, 0.25),), wl=wl))
    assert est.unit_time(0) == pytest.approx(4.0 / 1.2**3)
    # nothing measured: the workload prior
    est = DynamicFluidAllocator().estimator(_view(None, ((0, 1.0),), wl=wl))
    assert est.unit_time(0) == 99.0
    # nothing at all: unknown, and h1 falls back to 1 s per unit
    est = DynamicFluidAllocator().estimator(_view(None, ((0, 1.0),)))
    assert est.unit_time(0) is None
    assert est.h1({0: 10.0})[0] == pytest.approx(8.0)


def test_progress_since_the_last_report_counts_only_on_the_same_placement():
    pl = ((0, 1.0),)
    v = _view((2.0, 1.0), pl, used=2.0, results=[(10.0, 2.0, {})], share_since=0.0, time=13.0)
    est = DynamicFluidAllocator().estimator(v)
    assert est.remaining(0, 10.0) == pytest.approx(10 - 2 - 1.5)
    # resized after the last report: the old rate says nothing about progress since
    v = _view((2.0, 1.0), pl, used=2.0, results=[(10.0, 2.0, {})], share_since=11.0, time=13.0)
    assert DynamicFluidAllocator().estimator(v).remaining(0, 10.0) == pytest.approx(8.0)


# ------------------------------------------------------------ interference model
@given(st.lists(st.floats(0.05, 1.0), min_size=0, max_size=8), st.floats(0.05, 1.0))
def test_interference_never_speeds_a_trial_up_and_grows_with_neighbours(others, own):
    wl = InterferenceWorkload({"i": grid([0])}, unit_time=1.0)
    s = wl.slowdown(own, others)
    assert s >= 1.0
    assert wl.slowdown(own, [*others, 0.3]) > s


def test_interference_rate_uses_neighbours_not_shares():
    wl = InterferenceWorkload({"i": grid([0])}, unit_time=2.0, rho=1.0, gamma=0.0,
                              demand=Demand(compute=0.4))
    gpus = {0: GPU(0), 1: GPU(1)}
    alone = wl.rate(0, {"i": 0}, ((0, 0.25),), gpus)
    assert alone == pytest.approx(0.5)  # share 1/4 alone: full speed under MPS
    two = wl.rate(0, {"i": 0}, ((0, 0.25),), gpus, [Neighbor(1, 0.25, Demand(compute=0.4))])
    assert two == pytest.approx(0.5)  # 0.8 busy: still overlaps
    three = wl.rate(0, {"i": 0}, ((0, 0.25),), gpus, [Neighbor(k, 0.25, Demand(compute=0.4))
                                                       for k in (1, 2)])
    assert three == pytest.approx(0.5 / 1.2)  # 1.2 busy on a GPU that overlaps 1.0
    assert wl.rate(0, {"i": 0}, ((0, 1.0), (1, 1.0)), gpus) == pytest.approx(1.0)


def test_packing_lightweight_jobs_beats_fifo_on_the_interference_model():
    wl = InterferenceWorkload({"i": grid(list(range(12)))}, unit_time=5.0,
                              demand=Demand(compute=0.3))
    runs = {a: nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=4, allocator=a,
                           runtime=SimRuntime(cluster=2), validate=True).makespan
            for a in ("fifo", "waterfill")}
    assert runs["fifo"] == pytest.approx(6 * 20.0)
    assert runs["waterfill"] < runs["fifo"] / 2


def test_calibrate_recovers_its_own_model():
    wl = InterferenceWorkload({"i": grid([0])}, rho=1.3, gamma=0.05, unit_time=1.0)
    t = {k: 6.0 * wl.slowdown(0.6, [0.6] * (k - 1)) for k in (4, 8)}
    rho, gamma = calibrate(6.0, 0.6, t)
    assert rho == pytest.approx(1.3) and gamma == pytest.approx(0.05)
    with pytest.raises(ValueError, match="two"):
        calibrate(6.0, 0.6, {4: 10.0})


@pytest.mark.skipif(not TRACES.exists(), reason="Hydro artifact traces not found at ../shared")
def test_calibration_on_the_measured_resnet18_packing():
    mps = pd.read_csv(TRACES / "resnet18_mps.csv")
    alone = pd.read_csv(TRACES / "resnet18_256.csv")
    row = alone[(alone.fusion == 1) & (alone.scale == 1)].iloc[0]
    rho, gamma = calibrate(float(row["speed(s)"]), float(row["gpu_util"]) / 100,
                           {int(r.MPS): float(r["speed(s)"]) for _, r in mps.iterrows()})
    assert 1.4 < rho < 1.55 and 0.07 < gamma < 0.11
