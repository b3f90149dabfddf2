"""Profiling: c from marginal benefit, d and β from scaling, α from packing, the profile store."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.allocators import StaticFluidAllocator
from nbtune.allocators.fluid import FluidEstimator
from nbtune.allocators.profiling import (
    InMemoryProfileStore,
    MeasuredLimits,
    Profile,
    ProfileStore,
    fit_alpha,
    fit_beta,
    interpolate_latency,
    marginal_benefit,
    model_signature,
    packing_limit,
    profile_from_measurements,
    sample_iterations,
    scaling_limit,
)
from nbtune.core.resources import ClusterSpec
from nbtune.core.trial import TrialRecord, TrialSpec
from tests.allocators.fluid_views import View

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "hydro-artifact"


def packed_times(alpha: float, pmax: int, t1: float = 0.1) -> dict[int, list[float]]:
    """Per-iteration times of p trials packed at w = 1/p under h = h1·α^(1/w − 1)."""
    return {p: [t1 * alpha ** (p - 1)] * p for p in range(1, pmax + 1)}


def test_marginal_benefit_formula():
    # second trial free: O^2 = 1/2; no benefit at all: the pair takes twice as long
    assert marginal_benefit({1: [1.0], 2: [1.0, 1.0]})[2] == pytest.approx(0.5)
    assert marginal_benefit({1: [1.0], 2: [2.0, 2.0]})[2] == pytest.approx(0.0)
    o = marginal_benefit(packed_times(1.24, 5))
    assert o[3] == pytest.approx(1 - 2 / 3 * 1.24)


def test_packing_limit_is_the_inflection_point():
    # α = 1.24 (ResNet-18 under MPS): O^4 = 0.07 > 0.05, O^5 = 0.008 -> c = 4
    assert packing_limit(packed_times(1.24, 8), threshold=0.05) == 4
    assert packing_limit(packed_times(1.24, 8), threshold=0.1) == 3
    assert packing_limit(packed_times(2.5, 8)) == 1  # packing never pays
    # a later lucky measurement does not revive packing past the first failure
    t = packed_times(1.24, 5) | {6: [0.01] * 6}
    assert packing_limit(t) == 4


@given(st.floats(1.0, 2.0), st.integers(2, 10))
def test_alpha_is_recovered_and_c_matches_the_closed_form(alpha, pmax):
    t = packed_times(alpha, pmax)
    assert fit_alpha(t) == pytest.approx(alpha, rel=1e-9)
    # c is the last p whose O^p = 1 − (p−1)/p·α clears the threshold, as §4.2.2 defines it
    c = packing_limit(t, 0.05)
    for p in range(2, c + 1):
        assert 1 - (p - 1) / p * alpha > 0.05
    if c < pmax:
        assert 1 - c / (c + 1) * alpha <= 0.05


@given(st.floats(1.0, 1.5), st.sampled_from([[1, 2], [1, 2, 4], [1, 2, 4, 8]]))
def test_beta_is_recovered(beta, widths):
    steps = {w: 1.0 / w * beta ** (w - 1) for w in widths}
    assert fit_beta(steps) == pytest.approx(beta, rel=1e-9)


def test_scaling_limit_stops_where_gpus_stop_paying():
    assert scaling_limit({1: 1.0, 2: 0.55, 4: 0.3, 8: 0.29}) == 4
    assert scaling_limit({1: 1.0, 2: 0.95}) == 1
    lat = interpolate_latency({1: 1.0, 2: 0.5, 4: 0.25})
    assert lat(2.0) == pytest.approx(0.5) and lat(3.0) == pytest.approx(1 / 3, rel=0.05)
    assert lat(16) == pytest.approx(0.25)


def test_sampler_skips_the_first_iteration():
    assert sample_iterations([9.0] + [1.0] * 10) == pytest.approx(1.0)
    assert sample_iterations([9.0] + [1.0] * 10 + [50.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="more than 1"):
        sample_iterations([3.0])


def test_bad_measurements_are_refused():
    with pytest.raises(ValueError, match="alone"):
        marginal_benefit({2: [1.0, 1.0]})
    with pytest.raises(ValueError, match="consecutive"):
        marginal_benefit({1: [1.0], 3: [1.0]})
    with pytest.raises(ValueError, match="threshold"):
        packing_limit({1: [1.0]}, threshold=1.5)
    with pytest.raises(ValueError, match="one worker"):
        scaling_limit({2: 1.0})


def test_signature_ignores_continuous_hyperparameters():
    a = model_signature({"model": "resnet18", "batch_size": 128, "lr": 0.1})
    b = model_signature({"model": "resnet18", "batch_size": 128, "lr": 0.01})
    c = model_signature({"model": "resnet18", "batch_size": 256, "lr": 0.1})
    assert a == b != c
    assert model_signature({"m": 1, "x": 2.0}, keys=["x"]) != model_signature({"x": 3.0},
                                                                               keys=["x"])
    with pytest.raises(KeyError, match="model"):
        model_signature({"lr": 0.1}, keys=["model"])


def test_profile_from_measurements_and_store_roundtrip():
    sig = model_signature({"model": "alexnet", "batch_size": 64})
    prof = profile_from_measurements(
        sig, iterations_per_unit=100, iteration_times=[0.5] + [0.1] * 10,
        packing=packed_times(1.24, 6), scaling={1: 0.1, 2: 0.055, 4: 0.03, 8: 0.029},
        gpu_util=[0.1] + [0.4] * 10, memory_gb=[1.0, 2.0, 2.5],
    )
    assert prof.unit_time == pytest.approx(10.0)
    assert prof.c == 4 and prof.d == 4
    assert prof.alpha == pytest.approx(1.24, rel=1e-6)
    assert prof.demand.compute == pytest.approx(0.4) and prof.demand.memory_gb == 2.5
    store = InMemoryProfileStore()
    assert isinstance(store, ProfileStore)
    assert sig not in store
    store.put(prof)
    assert store.get(sig) is prof and len(store) == 1
    with pytest.raises(TypeError):
        store.put({"c": 4})  # type: ignore[arg-type]
    alloc = StaticFluidAllocator.from_profile(prof)
    assert (alloc.c, alloc.d, alloc.alpha) == (4, 4, prof.alpha)


def test_a_rerun_reads_the_profile_instead_of_needing_a_prior():
    """With no measurement and no workload prior, h_i1 comes from the stored profile."""
    store = InMemoryProfileStore([Profile(model_signature({"model": "a"}), unit_time=7.0,
                                          alpha=1.2)])
    trials = {0: TrialRecord(0, {"model": "a", "lr": 0.1}), 1: TrialRecord(1, {"model": "b", "lr": 0.1})}
    view = View(ClusterSpec.homogeneous(2), trials, {},
                pending=[TrialSpec(0, trials[0].config, 10.0), TrialSpec(1, trials[1].config,
                                                                         10.0)])
    est = StaticFluidAllocator(profiles=store).estimator(view)
    assert isinstance(est, FluidEstimator)
    h = est.h1({0: 10.0, 1: 10.0})
    assert h[0] == pytest.approx(70.0)
    assert h[1] == pytest.approx(70.0)  # unknown model: the mean of what is known
    assert est.overhead(0).alpha == 1.2 and est.overhead(1).alpha == 1.0


@pytest.mark.skipif(not TRACES.exists(), reason="Hydro artifact traces not found at ../shared")
def test_alpha_from_the_measured_resnet18_packing():
    """resnet18_mps.csv: 5 and 10 ResNet-18s on one GPU vs one alone (resnet18_256.csv)."""
    mps = pd.read_csv(TRACES / "resnet18_mps.csv")
    alone = pd.read_csv(TRACES / "resnet18_256.csv")
    t1 = float(alone[(alone.fusion == 1) & (alone.scale == 1)]["speed(s)"].iloc[0])
    times = {1: [t1]} | {int(r.MPS): [float(r["speed(s)"])] * int(r.MPS)
                         for _, r in mps.iterrows()}
    alpha = fit_alpha(times)
    assert 1.2 < alpha < 1.3


def test_the_profile_lookup_asks_the_store_each_time_and_follows_a_new_config():
    from nbtune.allocators.demand import DemandLookup
    from nbtune.allocators.profiling import ProfileLookup
    from nbtune.core.resources import Demand

    store = InMemoryProfileStore()
    lookup = ProfileLookup(["arch"])
    cfg = {"arch": "a", "lr": 0.1}
    assert lookup(store, 7, cfg) is None  # nothing measured yet
    store.put(Profile(model_signature(cfg, ["arch"]), unit_time=2.0))
    assert lookup(store, 7, cfg).unit_time == 2.0  # the store learnt: asked again
    store.put(Profile(model_signature(cfg, ["arch"]), unit_time=3.0))
    assert lookup(store, 7, cfg).unit_time == 3.0
    new = {"arch": "b", "lr": 0.1}  # PBT handed trial 7 another model
    assert lookup(store, 7, new) is None
    assert lookup(store, 7, {"lr": 0.1}) is None  # no key: no profile
    assert lookup(None, 7, cfg) is None and lookup(object(), 7, cfg) is None

    class Hints:
        def __init__(self, trials):
            self.hints = {"profiles": store}
            self._trials = trials

        def trial(self, tid):
            return self._trials[tid]

    sig = model_signature({"arch": "x"}, None)
    store.put(Profile(sig, demand=Demand(0.5, 3.0)))
    view = Hints({1: TrialRecord(1, {"arch": "x"}), 2: TrialRecord(2, {"unmeasured": 1.5})})
    demands = DemandLookup()
    assert demands.many(view, [1, 2]) == [Demand(0.5, 3.0), Demand()]
    store.put(Profile(sig, demand=Demand(0.25, 1.0)))  # a new measurement
    assert demands.many(view, [1, 2]) == [Demand(0.25, 1.0), Demand()]
    assert demands(view, 1, view.trial(1).config) == Demand(0.25, 1.0)
    store.put(Profile(sig, demand=Demand(2.0, -1.0)))  # a bad profile is still refused
    with pytest.raises(ValueError, match="invalid"):
        demands.many(view, [1])


def test_profile_lookup_many_answers_as_one_lookup_per_trial_and_asks_once_per_model():
    from nbtune.allocators.profiling import ProfileLookup

    class CountingStore(InMemoryProfileStore):
        asked = 0

        def get(self, signature):
            self.asked += 1
            return super().get(signature)

    store = CountingStore()
    keys = ["arch"]
    configs = {1: {"arch": "a", "lr": 0.1}, 2: {"arch": "a", "lr": 0.2},
               3: {"arch": "b", "lr": 0.1}, 4: {"lr": 0.3}}
    store.put(Profile(model_signature(configs[1], keys), unit_time=2.0))
    many = ProfileLookup(keys).many(store, list(configs), list(configs.values()))
    assert store.asked == 2  # models a and b; trial 4 has no key
    one = ProfileLookup(keys)
    assert many == [one(store, tid, cfg) for tid, cfg in configs.items()]
    assert [p and p.unit_time for p in many] == [2.0, 2.0, None, None]
    assert ProfileLookup(keys).many(object(), [1, 2], [configs[1], configs[2]]) == [None, None]
    assert ProfileLookup(keys).many(None, [], []) == []


def test_measured_d_lowers_the_cap_only_where_a_wider_width_did_not_pay():
    """A model measured at 1 and 2 GPUs only says nothing against 4; one whose 4 GPUs
    bought under ``min_gain`` over 2 caps d at 2 (Fluid §4.2.2: d is where scaling stops
    paying)."""
    sig = model_signature({"model": "a"})
    cfg = {"model": "a", "lr": 0.1}
    trials = {0: TrialRecord(0, cfg)}

    def measured(scaling: dict[int, float]) -> Profile:
        return Profile(sig, unit_time=10.0, d=scaling_limit(scaling), scaling=scaling)

    def limits(scaling: dict[int, float]) -> tuple[int | None, int | None]:
        store = InMemoryProfileStore([measured(scaling)])
        view = View(ClusterSpec.homogeneous(8), trials, {},
                    pending=[TrialSpec(0, cfg, 10.0)], hints={"profiles": store})
        return MeasuredLimits()(view)

    tried = measured({1: 1.0, 2: 0.55})
    assert tried.d == 2 and tried.d_measured and not tried.d_bounded
    assert limits({1: 1.0, 2: 0.55}) == (None, None)
    assert limits({1: 1.0, 2: 0.55, 4: 0.53}) == (None, 2)
    assert limits({1: 1.0, 2: 0.55, 4: 0.3}) == (None, None)
    alloc = StaticFluidAllocator(c=3, d=4)
    view = View(ClusterSpec.homogeneous(8), trials, {}, pending=[TrialSpec(0, cfg, 10.0)],
                hints={"profiles": InMemoryProfileStore([tried])})
    alloc.adopt_measured(view)
    assert alloc.d == 4


@given(st.lists(st.tuples(st.integers(0, 6), st.sampled_from(["a", "b", None]),
                          st.booleans()), max_size=12),
       st.lists(st.integers(0, 6), max_size=6))
def test_profile_lookup_signatures_answers_as_signature_per_trial(asks, known):
    """signatures() over a mix of remembered trials, new ones and new config objects gives
    what signature() per trial gives, and leaves the lookup remembering the same."""
    from nbtune.allocators.profiling import ProfileLookup

    class CountingStore(InMemoryProfileStore):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[object] = []

        def signature(self, config):
            self.seen.append(config.get("arch"))
            return model_signature(config, ["arch"])

    configs = {tid: {"arch": "a", "lr": tid} for tid in range(7)}
    stores = CountingStore(), CountingStore()
    fast, slow = ProfileLookup(["arch"]), ProfileLookup(["arch"])
    for tid in known:
        for lookup, store in zip((fast, slow), stores, strict=True):
            lookup.signature(store, tid, configs[tid])
    tids, cfgs = [], []
    for tid, arch, fresh in asks:
        if fresh:  # PBT's new config object (or a key-less one)
            configs[tid] = {"lr": tid} if arch is None else {"arch": arch, "lr": tid}
        tids.append(tid)
        cfgs.append(configs[tid])
    got = fast.signatures(stores[0], tids, cfgs)
    want = [slow.signature(stores[1], t, c) for t, c in zip(tids, cfgs, strict=True)]
    assert got == want
    assert stores[0].seen == stores[1].seen  # the same models worked out, in the same order
    for tid in range(7):  # remembered alike: a second ask works nothing out
        assert fast.signature(stores[0], tid, configs[tid]) == \
            slow.signature(stores[1], tid, configs[tid])
    assert stores[0].seen == stores[1].seen
