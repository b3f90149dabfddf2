"""StaticFluid / DynamicFluid through the engine and the simulator, and Alg. 2's ε rule."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbtune
from nbtune import SimRuntime, grid
from nbtune.allocators import ALLOCATORS, DynamicFluidAllocator, StaticFluidAllocator
from nbtune.core.resources import ClusterSpec, Placement, width
from nbtune.core.trial import TrialRecord, TrialState
from nbtune.workloads import SyntheticWorkload
from tests.allocators.fluid_views import View
from tests.allocators.probed import probed_sim


def runtimes_workload(hs: list[float], budget: float, **kw: Any) -> SyntheticWorkload:
    """TrialRecord i (config i) takes hs[i] seconds alone on one GPU for ``budget`` units."""
    return SyntheticWorkload({"i": grid(list(range(len(hs))))},
                             unit_time=lambda cfg: hs[cfg["i"]] / budget, **kw)


def run(hs, n, allocator, *, budget=4.0, eps=0.0, **kw):
    wl = runtimes_workload(hs, budget, **kw)
    return nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=budget,
                       allocator=allocator, runtime=probed_sim(wl, cluster=n, resize_overhead=eps),
                       validate=True)


def gpu_peaks(allocs: pd.DataFrame) -> tuple[float, int]:
    """Largest total share and most trials any GPU held at any instant (allocation log)."""
    worst, most = 0.0, 0
    for _, g in allocs.groupby("gpu_id"):
        ev = sorted([(r.start, r.share, 1) for r in g.itertuples()]
                    + [(r.end, -r.share, -1) for r in g.itertuples()], key=lambda x: (x[0], x[1]))
        level, count = 0.0, 0
        for _, d, k in ev:
            level += d
            count += k
            worst, most = max(worst, level), max(most, count)
    return worst, most


def max_gpu_load(allocs: pd.DataFrame) -> float:
    return gpu_peaks(allocs)[0]


def test_registry_names():
    assert ALLOCATORS["waterfill"] is DynamicFluidAllocator
    assert ALLOCATORS["waterfill-static"] is StaticFluidAllocator


def test_fig5_toy_example_reaches_the_optimum():
    """4 trials of 4, 4, 12, 30 s on 5 GPUs (Fluid Fig. 5), α = β = 1, ε = 0."""
    hs = [4.0, 4.0, 12.0, 30.0]
    fifo = run(hs, 5, "fifo")
    static = run(hs, 5, "waterfill-static")
    dynamic = run(hs, 5, "waterfill")
    assert fifo.makespan == pytest.approx(30.0)
    # StaticFluid: a4 on 3 GPUs (10 s), a3 on 1 (12 s), a1 + a2 packed on the fifth
    assert static.makespan == pytest.approx(12.0)
    # Fig. 5b's optimum is Σh/n = 10 s; DynamicFluid widens a3 then a4 as GPUs free up
    assert dynamic.makespan <= 10.0 + 1e-6
    a = dynamic.allocations()
    assert set(a[a.trial_id == 3].gpu_id) >= {0, 1, 2}
    assert max_gpu_load(a) <= 1.0 + 1e-9


def test_dynamic_pays_epsilon_and_still_wins_when_it_is_small():
    hs = [4.0, 4.0, 12.0, 30.0]
    slow = run(hs, 5, DynamicFluidAllocator(resize_overhead=0.5), eps=0.5)
    # a3 widens at t=4 (done 8.5); at 8.5 a4 has 1.5 s left on 3 GPUs, 4 GPUs would take
    # 1.125 s + ε = 1.625 s: not worth it, so a4 keeps its 3 GPUs and ends at 10
    assert slow.makespan == pytest.approx(10.0)
    a = slow.allocations()
    assert len(a[a.trial_id == 3]) == 3
    # ε larger than anything a resize could save: DynamicFluid behaves like StaticFluid
    never = run(hs, 5, DynamicFluidAllocator(resize_overhead=100.0), eps=100.0)
    assert never.makespan == pytest.approx(12.0)


@settings(max_examples=25)
@given(st.lists(st.floats(0.5, 60.0), min_size=1, max_size=10), st.integers(1, 8),
       st.integers(1, 4), st.integers(1, 4))
def test_static_fluid_is_within_twice_the_lower_bound(hs, n, c, d):
    """Theorem 1 (ideal α = β = 1): makespan ≤ 2·max(max h/d, Σh/n)."""
    exp = run(hs, n, StaticFluidAllocator(c=c, d=d))
    lower = max(max(hs) / d, sum(hs) / n)
    assert exp.makespan <= 2 * lower + 1e-6
    assert max_gpu_load(exp.allocations()) <= 1.0 + 1e-9


@settings(max_examples=20)
@given(st.lists(st.floats(1.0, 40.0), min_size=1, max_size=12), st.integers(1, 6),
       st.floats(1.0, 1.3), st.floats(1.0, 1.2), st.floats(0.0, 5.0),
       st.sampled_from(["waterfill", "waterfill-static"]))
def test_no_gpu_is_ever_over_capacity(hs, n, alpha, beta, eps, name):
    alloc = ALLOCATORS[name](c=3, d=3, resize_overhead=eps)
    exp = run(hs, n, alloc, eps=eps, alpha=alpha, beta=beta)  # validate=True checks each step
    load, count = gpu_peaks(exp.allocations())
    assert load <= 1.0 + 1e-9
    assert count <= 3  # c = 3: never more than three trials on a GPU
    assert (exp.results().state == "completed").all()


def test_asynchronous_algorithm_runs_packed():
    wl = SyntheticWorkload({"x": nbtune.uniform(0, 1)}, unit_time=5.0, alpha=1.1)
    exp = nbtune.tune(wl, algorithm="asha", metric="loss", max_budget=9, num_trials=24, seed=1,
                      allocator="waterfill", runtime=SimRuntime(cluster=2), validate=True)
    shares = exp.allocations().share
    assert (shares < 1).any()  # packed
    assert max_gpu_load(exp.allocations()) <= 1.0 + 1e-9


# --------------------------------------------------------- the ε rule, exactly
@settings(max_examples=80)
@given(
    st.lists(st.tuples(st.floats(0.05, 50.0), st.sampled_from([0.25, 1.0, 2.0])), min_size=1,
             max_size=6),
    st.integers(1, 10), st.floats(0.0, 30.0), st.floats(1.0, 1.3), st.floats(1.0, 1.2),
)
def test_dynamic_never_resizes_unless_epsilon_pays(trials, extra_gpus, eps, alpha, beta):
    """Every Resize satisfies h(w') + ε < h(w) (up) or w'(h(w') + ε) < w·h(w) (down)."""
    n_needed = sum(max(1, int(w)) for _, w in trials)
    cluster = ClusterSpec.homogeneous(n_needed + extra_gpus, gpus_per_node=4)
    unit = {i: u for i, (u, _) in enumerate(trials)}
    wl = SyntheticWorkload({"i": grid(list(range(len(trials))))},
                           unit_time=lambda cfg: unit[cfg["i"]], alpha=alpha, beta=beta)
    running: dict[int, Placement] = {}
    g = 0
    for i, (_, w) in enumerate(trials):
        k = max(1, int(w))
        running[i] = tuple((g + j, w if w < 1 else 1.0) for j in range(k))
        g += k
    tr = {i: TrialRecord(i, {"i": i}, TrialState.RUNNING, target_budget=10.0, budget_used=3.0)
          for i in running}
    view = View(cluster, tr, running, hints={"workload": wl})
    alloc = DynamicFluidAllocator(c=4, d=4, resize_overhead=eps)
    out = alloc.allocate(view)
    oh = wl.overhead({})
    for tid, pl in out.resize.items():
        w, w2 = width(running[tid]), width(pl)
        h1 = 7.0 * unit[tid]
        h_old, h_new = h1 * oh.factor(w), h1 * oh.factor(w2)
        if w2 > w:
            assert h_new + eps < h_old
        else:
            assert w2 * (h_new + eps) < w * h_old
    # the result is a valid state
    merged = {**running, **out.resize}
    load: dict[int, float] = {}
    for pl in merged.values():
        for gg, s in pl:
            load[gg] = load.get(gg, 0.0) + s
    assert max(load.values()) <= 1.0 + 1e-9


def test_dynamic_scales_up_a_lone_straggler_only_if_it_pays():
    cluster = ClusterSpec.homogeneous(4)
    wl = SyntheticWorkload({"i": grid([0])}, unit_time=10.0)
    tr = {0: TrialRecord(0, {"i": 0}, TrialState.RUNNING, target_budget=10.0, budget_used=9.0)}
    view = View(cluster, tr, {0: ((0, 1.0),)}, hints={"workload": wl})
    # 10 s left: 4 GPUs -> 2.5 s + ε
    assert width(DynamicFluidAllocator(resize_overhead=5.0).allocate(view).resize[0]) == 4
    assert DynamicFluidAllocator(resize_overhead=8.0).allocate(view).resize == {}


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="c "):
        StaticFluidAllocator(c=0)
    with pytest.raises(ValueError, match="alpha"):
        DynamicFluidAllocator(alpha=0.5)
    with pytest.raises(ValueError, match="resize_overhead"):
        DynamicFluidAllocator(resize_overhead=-1)


def test_a_growing_cluster_widens_the_running_trial():
    """DynamicFluid also runs when the cluster grows (ResourcesChanged)."""
    from nbtune.core.events import ResourcesChanged

    wl = runtimes_workload([40.0], 4.0)
    sim = SimRuntime(cluster=1, resize_overhead=1.0)
    sim.at(10.0, ResourcesChanged, cluster=ClusterSpec.homogeneous(4))
    exp = nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=4,
                      allocator=DynamicFluidAllocator(resize_overhead=1.0), runtime=sim,
                      validate=True)
    # 10 s alone, then 30 s of work on 4 GPUs after paying ε = 1 s
    assert exp.makespan == pytest.approx(10.0 + 1.0 + 30.0 / 4)
    assert set(exp.allocations().gpu_id) == {0, 1, 2, 3}


def test_a_fraction_scaled_down_to_feed_others_joins_a_shared_gpu():
    """Scale-downs feed scale-ups only if they free whole GPUs: a trial going to a fraction
    joins a GPU other fractions share instead of staying alone on its own."""
    from nbtune.allocators.held_book import HeldBook

    book = HeldBook(ClusterSpec.homogeneous(3), 3, 1.0, {t: ((t, 1.0),) for t in range(3)})
    assert book.pooled_placement(0, 1 / 3) == ((0, 1 / 3),)  # no shared GPU yet: it stays
    book.move(0, ((0, 1 / 3),))
    assert book.trial_placement(1, 1 / 3) == ((1, 1 / 3),)  # staying frees nothing
    assert book.pooled_placement(1, 1 / 3) == ((0, 1 / 3),)  # pooled: GPU 1 is free
    assert book.pooled_placement(2, 1.0) == book.trial_placement(2, 1.0)


def test_scale_downs_pack_together_to_give_a_straggler_whole_gpus():
    """Three fast trials each alone on a GPU and a slow one on the fourth: DynamicFluid
    packs the fast ones onto one GPU so the slow one can widen to three."""
    cluster = ClusterSpec.homogeneous(4)
    wl = SyntheticWorkload({"i": grid([0, 1])}, unit_time=lambda c: 1.0 if c["i"] == 0 else 60.0)
    tr = {t: TrialRecord(t, {"i": 0}, TrialState.RUNNING, target_budget=10.0, budget_used=0.0)
          for t in range(3)}
    tr[3] = TrialRecord(3, {"i": 1}, TrialState.RUNNING, target_budget=10.0, budget_used=0.0)
    running = {t: ((t, 1.0),) for t in range(4)}
    view = View(cluster, tr, running, hints={"workload": wl})
    resize = DynamicFluidAllocator(c=3, resize_overhead=1.0).allocate(view).resize
    assert width(resize[3]) == 3.0
    fast = [resize.get(t, running[t]) for t in range(3)]
    assert len({pl[0][0] for pl in fast}) == 1 and all(pl[0][1] < 1 for pl in fast)
