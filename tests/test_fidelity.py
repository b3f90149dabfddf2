"""Trace replay of a finished run (TraceWorkload.from_experiment) and per-launch costs, on the simulator.

A simulated run replayed from its own trace must reproduce itself: same
configs, promotions, final states, winner and makespan. This is the pure
half of the sim-vs-real check; tests/test_demo.py does it against Dask.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbtune
from nbtune.core.space import choice, loguniform
from nbtune.replay import decisions, replay_in_simulator
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload, TraceWorkload
from nbtune.workloads.trace import segment_times

SPACE = {"lr": loguniform(1e-4, 1e-1), "batch_size": choice([32, 64, 128])}


def real_like_run(seed: int, gpus: int, launch: float, trials: int = 12):
    wl = SyntheticWorkload(SPACE, metric="loss", seed=seed, launch_overhead=launch,
                           unit_time=lambda cfg: 0.5 + cfg["batch_size"] / 64.0)
    return nbtune.tune(wl, SPACE, algorithm="asha", metric="loss", max_budget=9,
                       num_trials=trials, allocator="fifo", seed=seed,
                       runtime=SimRuntime(cluster=gpus), type="promotion")


@given(seed=st.integers(0, 10_000), gpus=st.integers(1, 3),
       launch=st.sampled_from([0.0, 0.3, 2.0]))
def test_a_run_replayed_from_its_own_trace_reproduces_itself(seed, gpus, launch) -> None:
    run = real_like_run(seed, gpus, launch)
    sim = replay_in_simulator(run, algorithm="asha", seed=seed, max_budget=9, num_trials=12,
                              allocator="fifo", type="promotion")
    assert not decisions(run).differences(decisions(sim))
    assert sim.makespan == pytest.approx(run.makespan, rel=1e-6, abs=1e-6)


def test_each_launch_keeps_its_own_cost() -> None:
    run = real_like_run(seed=1, gpus=2, launch=1.5)
    trace = TraceWorkload.from_experiment(run)
    assert trace.launch_overhead == pytest.approx(1.5)
    promoted = 0
    for tid, tr in trace.trials.items():
        cfg = run.engine.trials[int(tid)].config
        unit = 0.5 + cfg["batch_size"] / 64.0
        first = trace.launch_time(int(tid), cfg, 0.0)
        assert trace.launch_time(int(tid), cfg, 123.0) is None  # never launched there
        if tr.budget > 1:  # measured between two reports: launch and unit apart
            promoted += 1
            assert first == pytest.approx(1.5) and tr.unit_time == pytest.approx(unit)
        else:  # one report only: the split is a guess, the first report's time is exact
            assert first + tr.unit_time == pytest.approx(1.5 + unit)
    assert promoted > 0


def test_segments_split_at_launches() -> None:
    run = real_like_run(seed=2, gpus=1, launch=1.0)
    seg = segment_times(run.learning_curves(), run.allocations())
    launches = run.allocations().groupby("trial_id").size()
    firsts = seg[seg["first"]].groupby("trial_id").size()
    assert (firsts == launches.loc[firsts.index]).all()
    assert (seg["gap"] >= 0).all()


def test_replay_with_another_seed_is_refused() -> None:
    run = real_like_run(seed=3, gpus=2, launch=0.0)
    with pytest.raises(KeyError, match="same algorithm, space and seed"):
        replay_in_simulator(run, algorithm="asha", seed=4, max_budget=9, num_trials=12,
                            allocator="fifo", type="promotion")


def test_an_empty_experiment_has_nothing_to_replay() -> None:
    run = real_like_run(seed=5, gpus=1, launch=0.0, trials=1)
    run.engine.trials.clear()
    with pytest.raises(ValueError, match="no reports"):
        TraceWorkload.from_experiment(run)
