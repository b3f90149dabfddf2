"""Idle windows as capacity: straggler gaps, stalls, and Hydro's pipeline bubbles."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbtune
from nbtune import SimRuntime, grid
from nbtune.allocators import DynamicFluidAllocator, FifoAllocator
from nbtune.allocators.bubbles import (
    BubbleSqueezer,
    PipelineHostModel,
    stall_oversubscription,
    straggler_gaps,
)
from nbtune.core.resources import ClusterSpec, Demand
from nbtune.workloads import SyntheticWorkload
from tests.allocators.probed import probed_sim


def test_bubble_ratio_is_hydro_formula():
    assert PipelineHostModel(4, 8).bubble_ratio == pytest.approx(3 / 11)
    assert PipelineHostModel(1, 8).bubble_ratio == 0.0


@given(st.integers(1, 8), st.integers(1, 32), st.floats(0.1, 10.0), st.integers(1, 5))
def test_every_stage_idles_the_bubble_ratio_of_each_iteration(p, m, T, iters):
    host = PipelineHostModel(p, m, iteration_time=T, activation_gb=1.0)
    for s in range(p):
        ws = host.windows(s, iters * T)
        total = sum(w.end - w.start for w in ws)
        assert total == pytest.approx(iters * T * host.bubble_ratio, rel=1e-9, abs=1e-9)
        assert all(0 <= w.start < w.end <= iters * T + 1e-9 for w in ws)
        assert all(w.kind == "bubble" for w in ws)


@given(st.integers(2, 6), st.integers(1, 16), st.floats(0.1, 5.0), st.integers(1, 4), st.data())
def test_a_host_fed_measured_idle_shares_idles_them_not_the_formula(p, m, T, iters, data):
    idle = tuple(data.draw(st.floats(0.0, 0.95)) for _ in range(p))
    host = PipelineHostModel(p, m, iteration_time=T, activation_gb=1.0, efficiency=0.5, idle=idle)
    gpus = host.ephemeral_gpus(0)
    for s in range(p):
        total = sum(w.end - w.start for w in host.windows(s, iters * T))
        assert total == pytest.approx(iters * T * idle[s], rel=1e-9, abs=1e-9)
        assert gpus[s].speed == pytest.approx(idle[s] * 0.5)


def test_measured_idle_shares_must_be_one_per_stage_and_below_one():
    with pytest.raises(ValueError, match="one fraction"):
        PipelineHostModel(2, 4, idle=(0.4,))
    with pytest.raises(ValueError, match="one fraction"):
        PipelineHostModel(2, 4, idle=(0.4, 1.0))


def test_early_stages_have_least_memory_left():
    host = PipelineHostModel(4, 8, gpu_memory_gb=80, weights_gb=20, activation_gb=5)
    left = [host.memory_left(s) for s in range(4)]
    assert left == [40, 45, 50, 55]
    with pytest.raises(ValueError, match="first stage"):
        PipelineHostModel(4, 8, gpu_memory_gb=30, weights_gb=20, activation_gb=5)


def test_straggler_gaps_measure_the_barrier_wait():
    gaps = straggler_gaps({0: 4.0, 1: 4.0, 2: 12.0, 3: 30.0})
    assert [g.gpu_id for g in gaps] == [0, 1, 2]
    assert sum(g.gpu_seconds for g in gaps) == pytest.approx(26 + 26 + 18)


def test_stall_oversubscription():
    assert stall_oversubscription([0.25, 0.5]) == pytest.approx(1 / 0.375)
    assert stall_oversubscription([0.1], max_ratio=3.0) == 3.0
    with pytest.raises(ValueError):
        stall_oversubscription([0.0])


def _bubble_run(pausable, memory_gb=2.0, exclusive=1, host=None):
    host = host or PipelineHostModel(4, 8, gpus_per_stage=2, efficiency=0.6, activation_gb=4.0)
    cluster = host.extend(ClusterSpec.homogeneous(exclusive))
    wl = SyntheticWorkload({"i": grid(list(range(16)))}, unit_time=10.0,
                           demand=Demand(memory_gb=memory_gb))
    alloc = BubbleSqueezer(FifoAllocator(), pausable=pausable)
    exp = nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=5, allocator=alloc,
                      runtime=probed_sim(wl, signature_keys=[], cluster=cluster), validate=True)
    return exp, cluster, host


def test_bubbles_shorten_the_makespan_of_pausable_trials():
    """Hydro §6.5: one exclusive GPU plus a 4-stage host's bubbles."""
    alone = nbtune.tune(
        SyntheticWorkload({"i": grid(list(range(16)))}, unit_time=10.0), algorithm="grid",
        metric="loss", max_budget=5, runtime=SimRuntime(cluster=1))
    exp, cluster, host = _bubble_run(lambda cfg: True)
    assert alone.makespan == pytest.approx(16 * 50.0)
    speedup = alone.makespan / exp.makespan
    assert 1.5 < speedup <= BubbleSqueezer.speedup_bound(host, 1) + 1e-9
    bubble_ids = {g.gpu_id for g in cluster.gpus if g.kind == "bubble"}
    assert set(exp.allocations().gpu_id) & bubble_ids


def test_bubbles_go_only_to_pausable_trials_that_fit():
    exp, cluster, _ = _bubble_run(lambda cfg: cfg["i"] % 2 == 0)
    bubble_ids = {g.gpu_id for g in cluster.gpus if g.kind == "bubble"}
    a = exp.allocations()
    on_bubbles = set(a[a.gpu_id.isin(bubble_ids)].trial_id)
    cfg = {t: exp.engine.trials[t].config for t in on_bubbles}
    assert on_bubbles and all(c["i"] % 2 == 0 for c in cfg.values())
    # 46 GB each: stage 0 leaves 80 − 20 − 4·4 = 44 GB, stages 1..3 leave 48, 52, 56
    exp, cluster, host = _bubble_run(lambda cfg: True, memory_gb=46.0)
    gpus = cluster.by_id()
    a = exp.allocations()
    for g in set(a.gpu_id):
        assert gpus[g].kind != "bubble" or gpus[g].memory_gb >= 46.0
    assert set(a.gpu_id) & bubble_ids
    assert not (set(a.gpu_id) & {g.gpu_id for g in cluster.gpus if g.node == "host0"})


def test_wrapping_dynamic_fluid_keeps_bubbles_out_of_its_plan():
    host = PipelineHostModel(2, 4, gpus_per_stage=1)
    cluster = host.extend(ClusterSpec.homogeneous(2))
    wl = SyntheticWorkload({"i": grid([0, 1, 2])}, unit_time=lambda c: [1.0, 2.0, 8.0][c["i"]])
    alloc = BubbleSqueezer(DynamicFluidAllocator(c=2, d=2))
    exp = nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=6, allocator=alloc,
                      runtime=SimRuntime(cluster=cluster), validate=True)
    a = exp.allocations()
    gpus = cluster.by_id()
    # every multi-GPU or fractional placement is on exclusive GPUs
    for r in a.itertuples():
        if r.share < 1:
            assert gpus[r.gpu_id].kind != "bubble"
    assert (exp.results().state == "completed").all()
