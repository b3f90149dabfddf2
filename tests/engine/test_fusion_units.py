"""Fused units in the engine (``tune(..., fusion=F)``): grouping, shares, per-member ends."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.core import events as ev
from nbtune.core.commands import Finish, Launch, Pause, Stop
from nbtune.core.resources import ClusterSpec
from nbtune.core.space import choice, uniform
from nbtune.core.trial import TrialState
from nbtune.engine import Engine, EngineError
from nbtune.engine.fusion_units import enable
from tests.engine.toy import OneShot

SPACE = {"x": uniform(0, 1), "width": choice([8, 16])}


def make(n_trials=10, gpus=2, f=4, keys=("width",), **kw):
    algo = OneShot(SPACE, metric="loss", max_budget=3, num_trials=n_trials, seed=0, **kw)
    eng = Engine(algo, validate=True)
    enable(eng, f, keys)
    cmds = eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(gpus)))
    return eng, cmds


def units_of(cmds):
    out = defaultdict(list)
    for c in cmds:
        if isinstance(c, Launch):
            out[c.unit].append(c)
    return dict(out)


def test_pending_trials_with_equal_shape_keys_launch_as_units_on_one_gpu_each():
    eng, cmds = make()
    units = units_of(cmds)
    assert len(units) == 2  # one unit per idle GPU
    gpus = set()
    for uid, ls in units.items():
        assert uid is not None and 1 <= len(ls) <= 4
        assert {eng.trials[c.trial_id].config["width"] for c in ls} == {ls[0].config["width"]}
        assert all(c.members == tuple(x.trial_id for x in ls) for c in ls)
        (g, share), = ls[0].placement
        assert share == pytest.approx(1 / len(ls))
        assert all(c.placement == ls[0].placement for c in ls)
        assert all(eng.trials[c.trial_id].unit == uid for c in ls)
        gpus.add(g)
    assert gpus == {0, 1} and not eng.idle_gpus
    # the rest wait as trials; the allocator saw units (one per GPU), not 10 trials
    launched = {c.trial_id for ls in units.values() for c in ls}
    assert {s.trial_id for s in eng.pending} == set(range(10)) - launched


def test_a_stopped_member_leaves_and_the_unit_frees_its_gpu_with_its_last_member():
    eng, cmds = make()
    uid, ls = min(units_of(cmds).items())
    ids = [c.trial_id for c in ls]
    gpu = ls[0].placement[0][0]
    out = eng.handle(ev.TrialStopRequested(1.0, ids[0]))
    assert out == [Stop(ids[0])]  # one member out; the unit's GPU stays busy
    assert eng.trials[ids[0]].state is TrialState.STOPPED
    assert all(eng.trials[t].state is TrialState.RUNNING for t in ids[1:])
    assert gpu not in eng.idle_gpus
    for b in (1, 2):
        for t in ids[1:]:
            assert not [c for c in eng.handle(ev.TrialReported(float(b), t, b, {"loss": 1.0}))
                        if isinstance(c, Launch)]
    for t in ids[1:-1]:
        eng.handle(ev.TrialReported(3.0, t, 3, {"loss": 0.5}))
        assert gpu not in eng.idle_gpus
    out = eng.handle(ev.TrialReported(3.0, ids[-1], 3, {"loss": 0.5}))
    assert all(eng.trials[t].state is TrialState.COMPLETED for t in ids[1:])
    nxt = units_of(out)  # the freed GPU takes the next unit
    assert len(nxt) == 1 and next(iter(nxt.values()))[0].placement[0][0] == gpu
    # the first member's GPU-seconds stopped at its stop; the others' at the end, 1/n each
    n = len(ids)
    assert eng.trials[ids[0]].gpu_seconds == pytest.approx(1.0 / n)
    assert eng.trials[ids[-1]].gpu_seconds == pytest.approx(3.0 / n)


def test_algorithm_stops_apply_per_member():
    eng, cmds = make(stop_above=0.5)
    _, ls = min(units_of(cmds).items())
    ids = [c.trial_id for c in ls]
    for b in (1, 2):
        out = [c for t in ids
               for c in eng.handle(ev.TrialReported(float(b), t, b,
                                                    {"loss": 0.9 if t == ids[0] else 0.1}))]
    assert out.count(Stop(ids[0])) == 1 and len([c for c in out if isinstance(c, Stop)]) == 1
    assert eng.trials[ids[0]].state is TrialState.STOPPED
    assert all(eng.trials[t].state is TrialState.RUNNING for t in ids[1:])


def test_f_one_runs_every_trial_alone_and_bad_f_is_refused():
    eng, cmds = make(f=1)
    assert all(len(ls) == 1 for ls in units_of(cmds).values())
    for bad in (0, -1, 1.5, True):
        algo = OneShot(SPACE, metric="loss", max_budget=3, num_trials=2, seed=0)
        with pytest.raises(ValueError, match="F must be an integer"):
            enable(Engine(algo), bad)
    algo = OneShot(SPACE, metric="loss", max_budget=3, num_trials=2, seed=0)
    eng = Engine(algo)
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))
    with pytest.raises(EngineError, match="before the experiment starts"):
        enable(eng, 2)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 24), gpus=st.integers(1, 4), f=st.integers(1, 8), seed=st.integers(0, 99),
       elastic=st.booleans())
def test_every_trial_runs_in_units_of_at_most_f_with_equal_shape_keys(n, gpus, f, seed, elastic):
    """Run to the end (validate=True checks the unit invariants after every event); with
    elastic splits a trial may be relaunched in another unit, never alone twice at once."""
    algo = OneShot(SPACE, metric="loss", max_budget=2, num_trials=n, seed=seed)
    eng = Engine(algo, validate=True)
    enable(eng, f, ("width",), elastic=elastic)
    cmds = eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(gpus)))
    seen: dict[int, int] = {}
    now = 0.0
    running: list[int] = []
    while True:
        for uid, ls in units_of(cmds).items():
            assert len(ls) <= f
            assert len({eng.trials[c.trial_id].config["width"] for c in ls}) == 1
            for c in ls:
                assert elastic or c.trial_id not in seen
                seen[c.trial_id] = uid
                running.append(c.trial_id)
        if any(isinstance(c, Finish) for c in cmds) or not running:
            break
        now += 1.0
        tid = running.pop(0)
        if eng.trials[tid].state is not TrialState.RUNNING:
            continue  # paused by a split: its relaunch comes as a new Launch
        eng.handle(ev.TrialReported(now, tid, 1, {"loss": 0.5}))
        cmds = eng.handle(ev.TrialReported(now, tid, 2, {"loss": 0.4}))
    assert sorted(seen) == list(range(n))
    assert all(t.state is TrialState.COMPLETED for t in eng.trials.values())
    assert eng.done


def test_idle_workers_take_half_of_a_running_unit_when_the_loop_checkpoints():
    """Elastic split (Hydro §5.3): a worker falls idle, nothing is queued, so the biggest
    running unit pauses its second half, which is relaunched as a new unit there."""
    for elastic in (False, True):
        algo = OneShot({"x": uniform(0, 1)}, metric="loss", max_budget=3, num_trials=8, seed=0)
        eng = Engine(algo, validate=True)
        enable(eng, 4, (), elastic=elastic)
        units = units_of(eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2))))
        (ua, a), (ub, b) = sorted(units.items())
        assert len(a) == len(b) == 4 and not eng.pending
        for c in b:
            eng.handle(ev.TrialReported(1.0, c.trial_id, 1, {"loss": 0.5}))
        gpu_a = a[0].placement[0][0]
        for c in a[:-1]:
            assert eng.handle(ev.TrialStopRequested(2.0, c.trial_id)) == [Stop(c.trial_id)]
        out = eng.handle(ev.TrialStopRequested(2.0, a[-1].trial_id))
        moved = [c.trial_id for c in b[2:]]
        if not elastic:
            assert out == [Stop(a[-1].trial_id)] and gpu_a in eng.idle_gpus
            continue
        assert sorted(c.trial_id for c in out if isinstance(c, Pause)) == moved
        new = units_of(out)
        assert len(new) == 1
        (uid, ls), = new.items()
        assert uid not in (ua, ub) and [c.trial_id for c in ls] == moved
        assert all(c.placement == ((gpu_a, 0.5),) and c.start_budget == 1 for c in ls)
        assert all(eng.trials[t].state is TrialState.RUNNING for t in moved)
        assert not eng.idle_gpus


def test_a_concurrency_cap_counts_fused_units():
    algo = OneShot(SPACE, metric="loss", max_budget=3, num_trials=12, seed=0)
    eng = Engine(algo, validate=True)
    enable(eng, 4, ("width",))
    eng.handle(ev.ConcurrencyChanged(0.0, 2))
    units = units_of(eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(4))))
    assert len(units) == 2 and sum(len(ls) for ls in units.values()) > 2


def test_hydro_target_trials_are_never_fused():
    """A target trial trains the full model alone (Hydro §4.3), even beside another target
    with equal shape keys (a replaced target still pending when its successor comes)."""
    from nbtune.core.roles import TARGET_KEY

    algo = OneShot({"x": uniform(0, 1), "width": choice([8]), TARGET_KEY: choice([True])},
                   metric="loss", max_budget=3, num_trials=4, seed=0)
    eng = Engine(algo, validate=True)
    enable(eng, 4, ("width",))
    cmds = eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    units = units_of(cmds)
    assert len(units) == 2 and all(len(ls) == 1 for ls in units.values())
    (g, share), = next(iter(units.values()))[0].placement
    assert share == 1.0
