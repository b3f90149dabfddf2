"""RunningH1 (h_i1 of running trials kept across decisions) against the estimator from scratch.

A run is simulated by hand: records mutate in place as the engine's do (reports, new
measurements, resizes, new targets, trials ending and starting), the profile store learns
new profiles, the clock moves. At each decision the kept table must give exactly what a
fresh :meth:`FluidEstimator.h1` gives, in the same order, with the same guesses and the
same runtimes afterwards, and the two allocators' fits of unmeasured trials must agree.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbtune.allocators import DynamicFluidAllocator
from nbtune.allocators.profiling import InMemoryProfileStore, Profile, store_signature
from nbtune.allocators.running_h1 import RunningH1
from nbtune.core.resources import ClusterSpec
from nbtune.core.trial import TrialRecord, TrialState
from tests.allocators.fluid_views import View

SHARES = [0.25, 1 / 3, 0.5, 1.0]


class EngineView(View):
    """A view whose measured times are the records' own (as the engine's view reads them)."""

    def unit_time(self, tid: int) -> tuple[float, float] | None:
        t = self.trials.get(tid)
        return None if t is None else t.unit_time


def _placement(data: st.DataObject) -> tuple[tuple[int, float], ...]:
    if data.draw(st.integers(0, 4)) == 0:  # now and then a trial on two whole GPUs
        g = data.draw(st.integers(0, 6))
        return ((g, 1.0), (g + 1, 1.0))
    return ((data.draw(st.integers(0, 7)), data.draw(st.sampled_from(SHARES))),)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), fixed=st.booleans(), use_store=st.booleans())
def test_kept_h1_matches_a_fresh_estimate_at_every_decision(data, fixed, use_store):
    cluster = ClusterSpec.homogeneous(8, gpus_per_node=4)
    store = InMemoryProfileStore() if use_store else None
    kw = {"alpha": 1.2, "beta": 1.1} if fixed else {}
    fast = DynamicFluidAllocator(signature_keys=["m"], **kw)
    ref = DynamicFluidAllocator(signature_keys=["m"], **kw)
    table = RunningH1()
    trials: dict[int, TrialRecord] = {}
    running: dict[int, tuple[tuple[int, float], ...]] = {}
    now, next_id = 0.0, 0
    for _ in range(data.draw(st.integers(1, 10))):
        now += data.draw(st.sampled_from([0.0, 0.5, 1.0, 2.5]))
        for _ in range(data.draw(st.integers(0, 3))):  # launches
            tid, next_id = next_id, next_id + 1
            trials[tid] = TrialRecord(
                tid, {"m": data.draw(st.integers(1, 3)), "x": 0.5}, TrialState.RUNNING,
                target_budget=data.draw(st.sampled_from([0.5, 3.0, 9.0, 27.0])),
                share_since=now)
            running[tid] = _placement(data)
        for tid in list(running):  # what happened to each since the last decision
            t = trials[tid]
            what = data.draw(st.sampled_from(
                ["none", "none", "report", "report", "measure", "resize", "end", "target"]))
            if what == "report":
                t.budget_used += data.draw(st.sampled_from([0.5, 1.0, 2.0]))
                t.results.append((now - data.draw(st.sampled_from([0.0, 0.3])),
                                  t.budget_used, {}))
            elif what == "measure":
                w = sum(s for _, s in running[tid]) if data.draw(st.booleans()) else 1.0
                t.unit_time = (data.draw(st.sampled_from([0.0, 0.7, 1.3, 2.0])), w)
            elif what == "resize":
                running[tid] = _placement(data)
                if data.draw(st.booleans()):
                    t.share_since = now
            elif what == "end":
                del running[tid]
            elif what == "target":
                t.target_budget *= 3
        if store is not None and data.draw(st.booleans()):  # the store learns a model anew
            m = data.draw(st.integers(1, 3))
            store.put(Profile(store_signature(store, {"m": m}, ["m"]),
                              unit_time=data.draw(st.sampled_from([None, 0.5, 2.0])),
                              alpha=data.draw(st.sampled_from([1.0, 1.3])),
                              beta=data.draw(st.sampled_from([1.0, 1.2]))))
        order = data.draw(st.permutations(list(running)))
        view = EngineView(cluster, trials, {t: running[t] for t in order},
                          hints={} if store is None else {"profiles": store}, time=now)
        records = [trials[t] for t in view.running]
        est, want_est = fast.estimator(view), ref.estimator(view)
        got = table.h1(est, view.running, records, now)
        want = want_est.h1({t: trials[t].target_budget for t in view.running}, records)
        assert got is not None
        assert list(got.items()) == list(want.items())
        assert est.guessed == want_est.guessed
        for t in view.running:
            for w in (0.25, 1.0, 2.0):
                assert est.runtime(t, w) == want_est.runtime(t, w)


def test_a_workload_prior_is_left_to_the_estimator():
    """With a workload prior in the hints (unit tests of the policies) the table declines."""
    view = EngineView(ClusterSpec.homogeneous(2), {}, {}, hints={"workload": object()})
    est = DynamicFluidAllocator().estimator(view)
    assert RunningH1().h1(est, view.running, [], 0.0) is None
