"""The simulator runtime: virtual clock, rates, resizes, traces, determinism."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator
from nbtune.allocators.fifo import FifoAllocator
from nbtune.core import events as ev
from nbtune.core.resources import ClusterSpec
from nbtune.core.space import uniform
from nbtune.core.trial import TrialState
from nbtune.engine import Engine
from nbtune.experiment import Experiment
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload, TraceWorkload
from tests.engine.toy import OneShot

SPACE = {"x": uniform(0, 1), "y": uniform(0, 1)}
TRACE = Path(__file__).resolve().parents[2].parent / "shared/traces/hydro-artifact/ray_trials.csv"


def run(workload, *, n=8, gpus=4, budget=5, allocator=None, sim=None, seed=0, **algo_kw):
    algo = OneShot(workload.space, metric=workload.metric, max_budget=budget, num_trials=n,
                   seed=seed, **algo_kw)
    eng = Engine(algo, allocator or FifoAllocator(), validate=True)
    sim = sim or SimRuntime(cluster=gpus)
    sim.start(eng, workload)
    return Experiment("t", eng, sim, workload)


def test_fifo_makespan_is_the_list_schedule_of_unit_times():
    wl = SyntheticWorkload(SPACE, unit_time=lambda c: 1.0, launch_overhead=0.5)
    exp = run(wl, n=8, gpus=4, budget=5)
    # two waves of 4 trials: 2 x (0.5 launch + 5 units x 1 s)
    assert exp.makespan == pytest.approx(11.0)
    assert exp.mean_utilization() == pytest.approx(1.0)
    assert set(exp.results()["state"]) == {"completed"}


def test_same_seed_same_experiment():
    wl = SyntheticWorkload(SPACE, unit_time=lambda c: 1 + 3 * c["x"], noise=0.05, seed=3)
    a, b = run(wl, seed=7), run(wl, seed=7)
    pd_a, pd_b = a.results(), b.results()
    assert pd_a.equals(pd_b)
    assert a.learning_curves().equals(b.learning_curves())
    c = run(wl, seed=8)
    assert not c.results()[["config/x"]].equals(pd_a[["config/x"]])


def test_reports_happen_every_budget_unit_with_curve_metrics():
    wl = SyntheticWorkload(SPACE, unit_time=2.0, noise=0.0)
    exp = run(wl, n=1, gpus=1, budget=4)
    lc = exp.learning_curves()
    assert list(lc["budget"]) == [1, 2, 3, 4]
    assert list(lc["time"]) == [2, 4, 6, 8]
    assert lc["loss"].is_monotonic_decreasing  # noise-free power law


class GrowOnFree(BaseAllocator):
    """Test allocator: one trial per GPU, and when a GPU frees up, the running trial takes it."""

    name = "grow"

    def capacity(self, view):
        return len(view.idle_gpus)

    def allocate(self, view):
        idle = sorted(view.idle_gpus)
        launch = {}
        for spec in list(view.pending)[: len(idle)]:
            launch[spec.trial_id] = ((idle.pop(0), 1.0),)
        resize = {}
        if idle and not view.pending and len(view.running) == 1:
            (tid, pl), = view.running.items()
            resize[tid] = pl + tuple((g, 1.0) for g in idle)
        return Allocation(launch, resize)

    def allocate_when_free(self, view):
        return self.allocate(view)


def test_resize_mid_trial_speeds_it_up_and_pays_epsilon():
    # trial 0: 10 units x 1 s; trial 1: 2 units. At t=2 trial 1 ends, trial 0 grows to 2 GPUs.
    wl = SyntheticWorkload(SPACE, unit_time=1.0, noise=0.0)
    algo_specs = []

    class Two(OneShot):
        def ask(self, max_trials):
            if self._asked:
                return []
            self._asked = True
            s0 = self.new_spec({"x": 0.1, "y": 0.1}, 10)
            s1 = self.new_spec({"x": 0.2, "y": 0.2}, 2)
            algo_specs.extend([s0, s1])
            return [self.new_group([s0, s1])]

    algo = Two(SPACE, metric="loss", max_budget=10, num_trials=2, seed=0)
    eng = Engine(algo, GrowOnFree(), validate=True)
    sim = SimRuntime(cluster=2, resize_overhead=0.5)
    sim.start(eng, wl)
    # 2 units alone, 0.5 s resize, then 8 units at width 2 (beta=1: 0.5 s each) = 2 + .5 + 4
    assert eng.trials[0].end_time == pytest.approx(6.5)
    assert eng.trials[0].gpu_seconds == pytest.approx(2 + 2 * 4.5)


def test_failures_are_injected_and_do_not_take_the_experiment_down():
    wl = SyntheticWorkload(SPACE, unit_time=1.0, failure_rate=0.5, max_budget_hint=5, seed=1)
    exp = run(wl, n=10, gpus=2, budget=5)
    states = exp.results()["state"].value_counts().to_dict()
    assert states.get("error", 0) > 0 and states.get("completed", 0) > 0
    assert exp.engine.done


def test_cluster_shrink_requeues_the_trial_that_lost_its_gpu():
    wl = SyntheticWorkload(SPACE, unit_time=1.0, noise=0.0)
    sim = SimRuntime(cluster=2)
    sim.at(2.5, ev.ResourcesChanged, cluster=ClusterSpec.homogeneous(1))
    exp = run(wl, n=2, budget=5, sim=sim)
    assert all(t.state is TrialState.COMPLETED for t in exp.engine.trials.values())
    # the trial on GPU 1 lost its GPU at 2.5 s with its checkpoint at budget 2; it resumes
    # from there once trial 0 frees GPU 0 at t=5 and needs 3 more units
    assert exp.makespan == pytest.approx(8.0)
    assert exp.engine.trials[1].budget_used == 5


def test_stop_request_from_outside_stops_the_trial():
    wl = SyntheticWorkload(SPACE, unit_time=1.0)
    sim = SimRuntime(cluster=1)
    sim.at(1.5, ev.TrialStopRequested, trial_id=0)
    exp = run(wl, n=2, gpus=1, budget=4, sim=sim)
    r = exp.results().set_index("trial_id")
    assert r.loc[0, "state"] == "stopped" and r.loc[0, "end"] == pytest.approx(1.5)
    assert r.loc[1, "start"] == pytest.approx(1.5)


def test_allocations_and_utilization_record_who_held_what():
    wl = SyntheticWorkload(SPACE, unit_time=1.0, launch_overhead=0.0)
    exp = run(wl, n=3, gpus=2, budget=2)
    alloc = exp.allocations()
    assert list(alloc.columns) == ["trial_id", "gpu_id", "share", "start", "end"]
    assert len(alloc) == 3 and set(alloc["gpu_id"]) == {0, 1}
    util = exp.utilization()
    g1 = util[util.gpu_id == 1].sort_values("time")
    assert list(g1["util"]) == [1.0, 0.0]  # GPU 1 idles after its only trial


@pytest.mark.skipif(not TRACE.exists(), reason=f"Hydro trace not found at {TRACE}")
def test_hydro_trace_replay_under_fifo_reproduces_the_measured_makespan():
    """Ray Tune ran these 50 trials one per GPU on 4 GPUs in 3962 s (Hydro artifact)."""
    wl = TraceWorkload.hydro_ray_trials(TRACE, launch_overhead=4.4)

    from nbtune.algorithms.algorithm_protocol import BaseAlgorithm
    from nbtune.core.space import grid_configs

    class InOrder(BaseAlgorithm):
        name = "in-order"

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._asked = False

        def ask(self, max_trials):
            if self._asked:
                return []
            self._asked = True
            return [self.new_group([self.new_spec(c, self.max_budget)
                                    for c in grid_configs(self.space)])]

        @property
        def finished(self):
            return self._asked

    algo = InOrder(wl.space, metric="final_val_acc", mode="max", max_budget=50)
    eng = Engine(algo, validate=True)
    sim = SimRuntime(cluster=4)
    sim.start(eng, wl)
    exp = Experiment("hydro", eng, sim, wl)
    assert exp.makespan == pytest.approx(3962, rel=0.02)
    best = exp.best
    assert best is not None and best["final_val_acc"] == pytest.approx(0.9161)
    assert wl.config_of(best["config"]["trace_id"])["lr"] == pytest.approx(0.1102)


def test_same_seed_same_result_across_processes_and_hash_seeds():
    """Nothing may depend on str-hash randomization (set order, hash() of strings)."""
    import subprocess
    import sys

    code = (
        "import nbtune\n"
        "from nbtune import SyntheticWorkload, SimRuntime, uniform, loguniform, choice\n"
        "sp={'lr': loguniform(1e-4,1e-1), 'x': uniform(0,1), 'opt': choice(['sgd','adam','lamb'])}\n"
        "wl=SyntheticWorkload(sp, unit_time=lambda c: 1+3*c['x'], noise=0.05, seed=0)\n"
        "for a, al in [('bohb','waterfill'), ('asha','knapsack-ffd'), ('pbt','fifo')]:\n"
        "    e=nbtune.tune(wl, algorithm=a, metric='loss', max_budget=9, num_trials=20, seed=0,\n"
        "                  allocator=al, runtime=SimRuntime(cluster=3))\n"
        "    print(a, repr(e.makespan), e.best['trial_id'], repr(e.best['loss']))\n"
    )
    outs = set()
    for hs in ("1", "2"):
        env = {**__import__("os").environ, "PYTHONHASHSEED": hs}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=120, check=True)
        outs.add(r.stdout)
    assert len(outs) == 1, outs


def test_events_closer_than_eps_reach_the_engine_in_one_handle_call():
    """A replayed run's times are sums that rounding splits by an ulp or so; the engine must
    get events a real runtime handed it together (one time, one ``handle`` call) together,
    so its decisions, taken after each call, match the real run's."""
    wl = SyntheticWorkload(SPACE, unit_time=lambda c: 1.0 + (1e-12 if c["x"] > 0.5 else 0.0),
                           noise=0.0)
    algo = OneShot(wl.space, metric=wl.metric, max_budget=1, num_trials=2, seed=0)
    eng = Engine(algo, FifoAllocator(), validate=True)
    calls: list[list[tuple[int, float]]] = []
    eng.subscribe(lambda events, _: calls.append(
        [(e.trial_id, e.budget) for e in events if isinstance(e, ev.TrialReported)]))
    sim = SimRuntime(cluster=2)
    sim.start(eng, wl)
    xs = sorted(t.config["x"] > 0.5 for t in eng.trials.values())
    assert xs == [False, True]  # one trial on each side of the ulp
    assert [sorted(c) for c in calls if c] == [[(0, 1.0), (1, 1.0)]]
    assert len({r[0] for t in eng.trials.values() for r in t.results}) == 1  # one time


def test_full_gc_passes_held_off_only_while_the_loop_runs():
    """The loop runs with the oldest generation's threshold out of reach (young ones as
    set) and puts the thresholds back after, also when the run raises."""
    import gc

    seen: list[tuple[int, ...]] = []

    class Watching(SyntheticWorkload):
        def metrics(self, trial_id, config, budget):
            seen.append(gc.get_threshold())
            return super().metrics(trial_id, config, budget)

    before = gc.get_threshold()
    run(Watching({"x": uniform(0, 1)}, unit_time=1.0), n=4, gpus=2, budget=3)
    assert gc.get_threshold() == before
    assert seen and all(t[:2] == before[:2] and t[2] > 10**8 for t in seen)

    class Failing(SyntheticWorkload):
        def metrics(self, trial_id, config, budget):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run(Failing({"x": uniform(0, 1)}, unit_time=1.0), n=2, gpus=1, budget=2)
    assert gc.get_threshold() == before


def test_the_runaway_guard_counts_quiet_reports():
    """Reports that change nothing (the loop's fast path) count toward ``max_events``."""
    from nbtune.runtimes.sim import SimulationError

    wl = SyntheticWorkload(SPACE, unit_time=1.0, noise=0.0)
    with pytest.raises(SimulationError, match="more than 5 events"):
        run(wl, n=1, gpus=1, budget=20, sim=SimRuntime(cluster=1, max_events=5))
    exp = run(wl, n=1, gpus=1, budget=20, sim=SimRuntime(cluster=1, max_events=40))
    assert exp.runtime.events_processed == 25  # started, 4 GPU samples, a report per unit
