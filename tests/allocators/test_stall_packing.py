"""Input stalls: packing by measured busy fractions (HyperSack §I-A), on hand-built views."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nbtune.allocators import BubblesAllocator
from nbtune.allocators.bubbles import stall_oversubscription
from nbtune.allocators.profiling import InMemoryProfileStore, Profile, model_signature
from nbtune.core.resources import ClusterSpec, Demand
from nbtune.core.trial import TrialRecord, TrialSpec
from tests.allocators.fluid_views import View


def view_with(us: dict[str, float | None], running: dict[int, str], pending: list[str],
              gpus: int = 1) -> View:
    """Trials named by model; ``us[model]`` its measured busy fraction (None: not measured)."""
    profiles = InMemoryProfileStore([
        Profile(model_signature({"model": m}), unit_time=1.0, demand=Demand(compute=u))
        for m, u in us.items() if u is not None])
    trials = {}
    for tid, m in list(running.items()) + list(enumerate(pending, start=100)):
        trials[tid] = TrialRecord(tid, {"model": m})
    return View(ClusterSpec.homogeneous(gpus), trials=trials,
                running={tid: ((i % gpus, 1.0),) for i, tid in enumerate(running)},
                pending=[TrialSpec(100 + i, {"model": m}, 1.0) for i, m in enumerate(pending)],
                hints={"profiles": profiles})


def test_a_waiting_trial_gets_company_a_busy_or_unmeasured_one_does_not():
    a = BubblesAllocator()
    v = view_with({"io": 0.3}, {1: "io"}, ["io", "io", "io"])
    assert a.allocate(v).launch == {100: ((0, 1.0),), 101: ((0, 1.0),)}  # 3 x 0.3 ≤ 1 < 4 x 0.3
    assert a.capacity(v) == 2 and a.max_share(v, 0) == 4.0
    assert a.allocate(view_with({"cpu": 0.95}, {1: "cpu"}, ["cpu"])).launch == {}
    assert a.allocate(view_with({"io": None}, {1: "io"}, ["io"])).launch == {}


@given(st.lists(st.floats(0.05, 0.89), min_size=1, max_size=3),
       st.lists(st.floats(0.05, 0.89), min_size=1, max_size=6))
def test_packed_workers_never_exceed_their_measured_stall(running, pending):
    us = {f"r{i}": u for i, u in enumerate(running)} | {f"p{i}": u for i, u in enumerate(pending)}
    v = view_with(us, {i + 1: f"r{i}" for i in range(len(running))},
                  [f"p{i}" for i in range(len(pending))], gpus=len(running))
    launch = BubblesAllocator().allocate(v).launch
    on = {g: [us[f"r{g}"]] + [us[f"p{t - 100}"] for t, pl in launch.items() if pl[0][0] == g]
          for g in range(len(running))}
    for xs in on.values():
        assert len(xs) <= stall_oversubscription(xs) + 1e-9  # Σu ≤ 1
    # nothing left waiting would still have fitted beside any worker's trials: by Σu, or by
    # the cap of 4 trials a GPU (max_ratio; hypothesis found 0.25 x 3 + 0.125 + 0.0625 left out)
    for i, u in enumerate(pending):
        if 100 + i not in launch:
            assert all(len(xs) + 1 > stall_oversubscription([*xs, u]) + 1e-9
                       for xs in on.values())


def test_a_fifth_trial_waits_though_its_stall_would_fit():
    """Σu = 0.9375 would fit, but a GPU holds at most 4 trials (HyperSack §V-D's saturation)."""
    us = {"r0": 0.25, "p0": 0.25, "p1": 0.25, "p2": 0.125, "p3": 0.0625}
    v = view_with(us, {1: "r0"}, ["p0", "p1", "p2", "p3"])
    assert BubblesAllocator().allocate(v).launch == {t: ((0, 1.0),) for t in (100, 101, 102)}
