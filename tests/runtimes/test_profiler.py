"""The runtime's profiler: what it measures, in the simulator and on a real LocalCluster."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbtune
from nbtune.allocators.profile_summary import summarize
from nbtune.allocators.profiling import InMemoryProfileStore, Profile
from nbtune.core import events as ev
from nbtune.core.resources import Demand
from nbtune.core.space import grid, loguniform
from nbtune.runtimes.model_key import model_key
from nbtune.runtimes.profiler import Profiler
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload

SPACE = {"lr": loguniform(1e-3, 1e-1), "layers": grid([2])}


def _run(wl, allocator, profiler, n=2, trials=12):
    rt = SimRuntime(cluster=n, profiler=profiler)
    exp = nbtune.tune(wl, SPACE, algorithm="random", metric="loss", max_budget=4,
                      num_trials=trials, allocator=allocator, runtime=rt, seed=0, validate=True)
    return exp, rt


def test_simulated_packing_that_pays_is_measured_and_kept():
    # a light model (a quarter of a GPU): four packed run as fast as one alone
    # FIFO measures it alone (time, demand); water-filling packs c = 4 and measures that
    wl = SyntheticWorkload(SPACE, unit_time=2.0, demand=Demand(0.25, 3.0))
    hist = InMemoryProfileStore()
    _run(wl, "fifo", Profiler(hist))
    alone = Profiler(hist)
    alone.model = model_key(wl)
    prof = alone.get('{"layers": 2}')
    assert not prof.c_measured and prof.unit_time == pytest.approx(2.0)
    assert prof.demand.compute == pytest.approx(0.25) and prof.demand.memory_gb == 3.0
    exp, rt = _run(wl, "waterfill", Profiler(hist))
    prof = rt.profiler.get('{"layers": 2}')
    assert prof.c_measured and prof.c == 4 and prof.packing[4] == pytest.approx(2.0)
    assert exp.engine.hints["profiles"] is rt.profiler  # what the allocators read


def test_packing_that_gains_nothing_gives_c_1_and_waterfill_stops_packing():
    # a whole-GPU model whose packed trials slow down as much as they share (alpha = 2)
    wl = SyntheticWorkload(SPACE, unit_time=2.0, alpha=2.0)
    hist = InMemoryProfileStore()
    _run(wl, "fifo", Profiler(hist))  # the time alone, the baseline of marginal benefit
    exp, rt = _run(wl, "waterfill", Profiler(hist), trials=16)
    prof = rt.profiler.get('{"layers": 2}')
    assert prof.c_measured and prof.c == 1 and prof.alpha > 1.5
    assert exp.engine.allocator.c == 1  # adopted: later trials get whole GPUs
    a = exp.allocations()
    last = a[a.start >= a.start.max() - 1e-9]
    assert (last.share == 1.0).all()


def test_a_second_run_starts_with_the_first_runs_profile(tmp_path):
    wl = SyntheticWorkload(SPACE, unit_time=2.0, alpha=2.0)
    db = tmp_path / "nb.db"
    nbtune.tune(wl, SPACE, algorithm="random", metric="loss", max_budget=4, num_trials=4,
                runtime=SimRuntime(cluster=2), seed=0, store=db, allocator="fifo")
    first = nbtune.tune(wl, SPACE, algorithm="random", metric="loss", max_budget=4,
                        num_trials=16, allocator="waterfill", runtime=SimRuntime(cluster=2),
                        seed=0, store=db)
    assert first.engine.hints["profiles"].get('{"layers": 2}').c == 1
    from nbtune.store import SqlProfileStore, open_store

    stored = SqlProfileStore(open_store(db))
    assert len(stored) == 1
    second = nbtune.tune(wl, SPACE, algorithm="random", metric="loss", max_budget=4,
                         num_trials=16, allocator="waterfill", runtime=SimRuntime(cluster=2),
                         seed=1, store=db)
    a = second.allocations()
    assert (a.share == 1.0).all()  # c = 1 known from the start: never packed


def test_model_key_tells_models_apart_not_hyperparameters():
    a = SyntheticWorkload(SPACE, unit_time=2.0)
    assert model_key(a) == model_key(SyntheticWorkload(SPACE, unit_time=2.0))
    assert model_key(a) != model_key(SyntheticWorkload(SPACE, unit_time=3.0))
    assert model_key(_run) != model_key(test_model_key_tells_models_apart_not_hyperparameters)


@settings(max_examples=60, deadline=None)
@given(t1=st.floats(0.01, 100.0), alpha=st.floats(1.0, 3.0), ps=st.integers(2, 6))
def test_summarize_fluid_bounds(t1, alpha, ps):
    """α ≥ 1 and 1 ≤ c ≤ the largest p measured; c = 1 exactly when O^2 ≤ O_th (§4.2.2)."""
    pack = {p: t1 * alpha ** (p - 1) for p in range(1, ps + 1)}
    prof = summarize(Profile("s"), pack, {}, Demand(), None)
    assert prof.alpha >= 1.0 and 1 <= prof.c <= ps
    o2 = 1 - 0.5 * pack[2] / pack[1]
    assert (prof.c == 1) == (o2 <= 0.05)
    assert math.isclose(prof.alpha, alpha, rel_tol=1e-6)


def test_summarize_keeps_the_history_where_nothing_was_measured():
    past = Profile("s", unit_time=3.0, c=1, demand=Demand(0.5, 4.0, 2.0), packing={1: 3.0, 2: 6.0})
    prof = summarize(past, {}, {2: 1.0}, past.demand, None)
    assert prof.c == 1 and prof.unit_time == 3.0 and prof.demand.cpus == 2.0
    assert prof.d == 2 and prof.scaling == {1: 3.0, 2: 1.0}


def test_probe_puts_profiles_into_the_job_history():
    hist = InMemoryProfileStore()
    wl = SyntheticWorkload(SPACE, unit_time=2.0, beta=1.5)
    out = Profiler(hist).probe(wl, [{"layers": 2}])
    assert len(hist) == 1 and out[0].unit_time == pytest.approx(2.0)
    assert out[0].d == 2 and out[0].beta == pytest.approx(1.5)  # 4 GPUs: 2/4·1.5³ > 0.9·2/2·1.5


def test_resize_cost_is_measured_from_the_first_interval_after_a_resize():
    # one long trial and short ones on 4 GPUs: DynamicFluid widens the long one as GPUs free
    wl = SyntheticWorkload({"i": grid(list(range(4)))}, unit_time=lambda c: 8.0 if c["i"] == 0
                           else 1.0)
    prof = Profiler(signature_keys=[])
    rt = SimRuntime(cluster=4, resize_overhead=3.0, profiler=prof)
    exp = nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=8, runtime=rt,
                      allocator="waterfill", allocator_options={"c": 1}, validate=True)
    a = exp.allocations()
    assert a.groupby("trial_id").start.nunique().max() > 1  # someone was resized
    measured = prof.get("{}").resize_cost
    assert measured == pytest.approx(3.0, rel=0.05)  # the simulator charged ε = 3 s


def one_trial_started(max_budget: float, kind: str = "generic") -> tuple[object, Profiler]:
    """An engine with one trial running on one GPU (of ``kind``; ``"cpu"``: a CPU stand-in)
    since t = 0.1, its profiler attached."""
    from nbtune.core.resources import ClusterSpec
    from nbtune.core.space import uniform
    from nbtune.engine import Engine
    from tests.engine.toy import OneShot

    eng = Engine(OneShot({"x": uniform(0, 1)}, metric="loss", max_budget=max_budget,
                         num_trials=1, seed=0), validate=True)
    prof = Profiler()
    prof.attach(eng, OneShot)
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1, kind=kind)))
    eng.handle(ev.TrialStarted(0.1, 0))
    return eng, prof


def test_samples_before_a_trials_first_report_are_its_start_up_not_its_demand():
    """HyperSack skips a trial's start-up: on a CPU stand-in imports read busy, data loading
    idle; neither is what the trial needs. Kept, a busy start-up sample made an idle trial
    look like it filled its CPU stand-in (runnable 1.0 -> c = 1 -> compute 1.0)."""
    eng, prof = one_trial_started(max_budget=3, kind="cpu")
    eng.handle(ev.UtilizationSampled(0.5, {0: 1.0}, {0: 0.3}, {0: 1.0}))  # importing
    eng.handle(ev.UtilizationSampled(0.7, {0: 0.0}, {0: 0.3}, {0: 0.0}))  # reading its data
    sig = prof.signature(eng.trials[0].config)
    assert prof.get(sig).demand.compute == 1.0 and prof.runnable(sig) is None  # nothing yet
    eng.handle(ev.TrialReported(1.0, 0, 1, {"loss": 1.0}))
    for t in (1.2, 1.4, 1.6):
        eng.handle(ev.UtilizationSampled(t, {0: 0.1}, {0: 0.4}, {0: 0.1}))
    prof_ = prof.get(sig)
    assert prof_.demand.compute == pytest.approx(0.1)
    assert prof_.demand.memory_gb == pytest.approx(0.4)  # memory: the peak, start-up included
    assert prof.runnable(sig) == pytest.approx(0.1)


def test_a_trial_whose_function_returned_is_not_measured_any_more():
    """TrialReturned ends a trial without a Stop: the profiler must let go of it as it does on
    a failure, or the next samples of its GPU (idle, or another trial's) count as its own."""
    eng, prof = one_trial_started(max_budget=9)
    eng.handle(ev.TrialReported(1.0, 0, 1, {"loss": 1.0}))
    for t in (1.2, 1.4, 1.6):
        eng.handle(ev.UtilizationSampled(t, {0: 0.3}, {0: 0.4}, {0: 0.3}))
    sig = prof.signature(eng.trials[0].config)
    assert prof.get(sig).demand.compute == pytest.approx(0.3)
    eng.handle(ev.TrialReturned(2.0, 0))
    for t in (2.2, 2.4, 2.6, 2.8):
        eng.handle(ev.UtilizationSampled(t, {0: 0.9}, {0: 2.0}, {0: 0.9}))
    assert prof.get(sig).demand.compute == pytest.approx(0.3)
    assert prof.get(sig).demand.memory_gb == pytest.approx(0.4)


def test_a_busy_gpu_before_the_first_report_is_the_trials_first_epoch():
    """NVML counts only a GPU's kernels: a busy sample before the first report is the
    trial's own first epoch, not its imports, and gives GPU room early (most trials of a
    successive-halving run end at their first report). An idle one may be data loading."""
    from nbtune.runtimes.profile_samples import ROOM_SAMPLES

    eng, prof = one_trial_started(max_budget=3)
    sig = prof.signature(eng.trials[0].config)
    eng.handle(ev.UtilizationSampled(0.2, {0: 0.0}, {0: 0.3}))  # loading its data: skipped
    for i in range(ROOM_SAMPLES):
        eng.handle(ev.UtilizationSampled(0.3 + 0.1 * i, {0: 0.1}, {0: 0.4}))
    assert prof.gpu_room(sig) == pytest.approx(10.0)  # before any report
    assert prof.get(sig).demand.compute == pytest.approx(0.1)


def test_the_simulator_stops_sampling_a_model_the_profiler_has_enough_samples_of():
    from nbtune.algorithms.random_search import RandomSearch
    from nbtune.engine import Engine
    from nbtune.runtimes.profile_samples import SAMPLES

    # 200 trials of one model on 4 GPUs: 4 samples per launch would be 800
    wl = SyntheticWorkload(SPACE, unit_time=2.0, demand=Demand(0.5, 3.0))
    engine = Engine(RandomSearch(SPACE, metric="loss", max_budget=2, num_trials=200, seed=0),
                    validate=True)
    seen: list[ev.TrialSampled] = []
    engine.subscribe(lambda events, cmds: seen.extend(
        e for e in events if isinstance(e, ev.TrialSampled)))
    prof = Profiler()
    rt = SimRuntime(cluster=4, profiler=prof)
    rt.start(engine, wl)
    assert engine.done and len(engine.trials) == 200
    measured = prof.get('{"layers": 2}')
    assert measured.demand.compute == pytest.approx(0.5) and measured.demand.memory_gb == 3.0
    assert not prof.wants_sample(199, 3.0) and prof.wants_sample(10_000, 3.0)  # 10,000: unseen
    # the samples stop once utilization and memory hold SAMPLES each (a few were in flight)
    assert SAMPLES <= len(seen) < SAMPLES + 4 * 4
