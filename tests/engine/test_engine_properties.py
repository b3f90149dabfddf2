"""Property: whatever the workload, cluster and failures, the engine keeps its invariants,
every trial ends, and GPU-seconds never exceed what the cluster had."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.core.space import uniform
from nbtune.engine import Engine
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload
from tests.engine.toy import OneShot

SPACE = {"x": uniform(0, 1)}


@settings(max_examples=40, deadline=None)
@given(
    n_trials=st.integers(1, 30),
    gpus=st.integers(1, 6),
    budget=st.integers(1, 8),
    failure_rate=st.sampled_from([0.0, 0.2, 0.6]),
    launch=st.floats(0, 3),
    seed=st.integers(0, 1000),
)
def test_every_trial_ends_and_invariants_hold(n_trials, gpus, budget, failure_rate, launch, seed):
    wl = SyntheticWorkload(SPACE, unit_time=lambda c: 0.5 + c["x"], failure_rate=failure_rate,
                           launch_overhead=launch, max_budget_hint=budget, seed=seed)
    algo = OneShot(SPACE, metric="loss", max_budget=budget, num_trials=n_trials, seed=seed,
                   stop_above=0.9)
    eng = Engine(algo, validate=True, max_failures=1)
    sim = SimRuntime(cluster=gpus)
    sim.start(eng, wl)
    assert eng.done and len(eng.trials) == n_trials
    assert all(t.state.is_terminal for t in eng.trials.values())
    assert sum(t.gpu_seconds for t in eng.trials.values()) <= eng.time * gpus + 1e-6
    assert all(t.budget_used <= budget for t in eng.trials.values())
