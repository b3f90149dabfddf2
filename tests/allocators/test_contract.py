"""The allocator contract, for every name in the registry (``bubbles+...`` wrappers included).

What the engine relies on from any allocator, checked on random hand-built
views: it launches only pending trials, each once, on GPUs of the cluster
with positive shares; it resizes only running trials; running + launched
shares stay within ``max_share`` of every GPU; ``capacity`` is a count >= 0.
And in a whole simulated run under ``validate=True`` (every invariant after
every event) every trial ends completed.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbtune
from nbtune import SimRuntime, SyntheticWorkload, uniform
from nbtune.allocators import ALLOCATORS, make_allocator
from nbtune.core.resources import GPU, ClusterSpec
from nbtune.core.trial import TrialRecord, TrialSpec, TrialState
from tests.allocators.fluid_views import View

NAMES = sorted(ALLOCATORS)


@st.composite
def views(draw) -> View:
    n_gpus = draw(st.integers(1, 6))
    cluster = ClusterSpec.of([GPU(g, f"n{g % 2}") for g in range(n_gpus)])
    trials: dict[int, TrialRecord] = {}
    running = {}
    free = list(range(n_gpus))
    for tid in range(draw(st.integers(0, n_gpus))):
        g = free.pop(draw(st.integers(0, len(free) - 1)))
        trials[tid] = TrialRecord(tid, {"x": 0.5}, TrialState.RUNNING, target_budget=9.0,
                            budget_used=float(draw(st.integers(0, 8))))
        running[tid] = ((g, 1.0),)
    pending = []
    for tid in range(100, 100 + draw(st.integers(0, 8))):
        used = float(draw(st.integers(0, 3)))
        trials[tid] = TrialRecord(tid, {"x": 0.5}, TrialState.PENDING, target_budget=9.0,
                            budget_used=used)
        pending.append(TrialSpec(tid, {"x": 0.5}, draw(st.sampled_from([4.0, 9.0]))))
    return View(cluster, trials, running, pending, max_budget=9.0, time=10.0)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=15)
@given(view=views())
def test_every_allocator_keeps_the_contract(name, view):
    alloc = make_allocator(name)
    assert alloc.name == name
    room = alloc.capacity(view)
    assert isinstance(room, int) and room >= 0
    out = alloc.allocate(view)
    pending = {s.trial_id for s in view.pending}
    ids = {g.gpu_id for g in view.cluster.gpus}
    assert set(out.launch) <= pending
    assert set(out.resize) <= set(view.running)
    placed = {**view.running, **out.resize, **out.launch}
    load = {g: 0.0 for g in ids}
    for pl in placed.values():
        assert pl, "an empty placement"
        for g, share in pl:
            assert g in ids and share > 0
            load[g] += share
    for g, v in load.items():
        assert v <= alloc.max_share(view, g) + 1e-9, (g, v)


@pytest.mark.parametrize("name", NAMES)
def test_every_allocator_runs_a_sha_run_to_the_end(name):
    wl = SyntheticWorkload({"m": uniform(0, 1)}, unit_time=lambda c: 1.0 + 4.0 * c["m"], seed=0)
    exp = nbtune.tune(wl, algorithm="sha", metric="loss", num_trials=9, max_budget=9, seed=0,
                      allocator=name, runtime=SimRuntime(cluster=3), validate=True)
    res = exp.results()
    assert exp.engine.done and len(res) == 9
    assert set(res.state) <= {"completed", "stopped"} and (res.state == "completed").any()
