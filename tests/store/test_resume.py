"""Resume after a crash: replay rebuilds the engine exactly, nothing completed is rerun."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nbtune
from nbtune.algorithms import make_algorithm
from nbtune.allocators import make_allocator
from nbtune.core import events as ev
from nbtune.core.commands import Launch
from nbtune.core.resources import ClusterSpec
from nbtune.core.space import grid, loguniform, uniform
from nbtune.core.trial import TrialState
from nbtune.engine import Engine
from nbtune.runtimes.sim import SimRuntime, SimulationError
from nbtune.store import (
    ExperimentExistsError,
    ExperimentFinishedError,
    RestartableEngine,
    ResumeError,
    Store,
    UnknownExperimentError,
    rebuild_algorithm,
    rebuild_allocator,
    replay,
    start_recording,
)
from nbtune.store.store import command_payload
from nbtune.workloads import SyntheticWorkload
from tests.engine.toy import OneShot

SPACE = {"lr": loguniform(1e-4, 1e-1), "m": uniform(0, 1)}
WL = SyntheticWorkload(SPACE, unit_time=10.0)
GRID_WL = SyntheticWorkload({"lr": grid([0.1, 0.01, 0.001]), "m": grid([0.2, 0.7])},
                            unit_time=7.0)
STABLE = ["trial_id", "config/lr", "config/m", "state", "loss", "last", "budget_used",
          "failures", "error"]


def uninterrupted(wl, algorithm, **kw):
    return nbtune.tune(wl, algorithm=algorithm, metric="loss", runtime=SimRuntime(cluster=2),
                       seed=5, **kw)


def crash(wl, store, name, n, algorithm, **kw):
    with pytest.raises(SimulationError):
        nbtune.tune(wl, algorithm=algorithm, metric="loss", seed=5, store=store, name=name,
                    runtime=SimRuntime(cluster=2, max_events=n), **kw)


def launches_after_restart(store, name):
    """Trial ids and start budgets launched after the last restart, from the stored log."""
    log = store.event_log(name)
    starts = [i for i, (events, _) in enumerate(log)
              if any(isinstance(e, ev.ExperimentStarted) for e in events)]
    return [(p["trial_id"], p["start_budget"]) for _, cmds in log[starts[-1]:]
            for kind, p in cmds if kind == "Launch"]


# ------------------------------------------------------------------ pure layer
def test_a_second_experiment_started_requeues_running_trials_from_their_checkpoints():
    algo = OneShot(SPACE, metric="loss", max_budget=5, num_trials=3, seed=0)
    eng = RestartableEngine(algo, validate=True)
    first = eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    assert [c.trial_id for c in first if isinstance(c, Launch)] == [0, 1]
    eng.handle(ev.TrialReported(3.0, 0, 2.0, {"loss": 0.4}))
    cmds = eng.handle(ev.ExperimentStarted(10.0, ClusterSpec.homogeneous(2)))
    relaunched = [(c.trial_id, c.start_budget) for c in cmds if isinstance(c, Launch)]
    assert relaunched == [(0, 2.0), (1, 0.0)]  # first launched first, from its own budget
    assert eng.trials[0].failures == 0 and eng.restarts == 1
    assert [s.trial_id for s in eng.pending] == [2]
    with pytest.raises(Exception, match="fed twice"):
        Engine(OneShot(SPACE, metric="loss", max_budget=5, seed=0)).handle(
            ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)),
            ev.ExperimentStarted(1.0, ClusterSpec.homogeneous(1)))


def test_a_runtime_whose_clock_restarts_at_zero_continues_the_timeline():
    """A wall clock cannot be wound forward: the engine offsets its times, and replays them."""
    seen = []

    def fresh():
        eng = RestartableEngine(OneShot(SPACE, metric="loss", max_budget=5, num_trials=2,
                                        seed=0), validate=True)
        eng.subscribe(lambda events, cmds: seen.append(
            (list(events), [command_payload(c) for c in cmds])))
        return eng

    eng = fresh()
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))
    eng.handle(ev.TrialReported(30.0, 0, 3.0, {"loss": 0.5}))
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))  # the new runtime's t=0
    assert eng.time_offset == 30.0 and eng.time == 30.0
    eng.handle(ev.TrialReported(20.0, 0, 5.0, {"loss": 0.4}))  # 20 s after the restart
    t0 = eng.trials[0]
    assert t0.state is TrialState.COMPLETED and t0.end_time == 50.0
    assert t0.gpu_seconds == pytest.approx(50.0)
    assert [e.time for e in seen[-1][0]] == [50.0]  # the recorder sees the experiment's time
    log, seen[:] = list(seen), []
    twin = RestartableEngine(OneShot(SPACE, metric="loss", max_budget=5, num_trials=2, seed=0),
                             validate=True)
    replay(twin, log)
    assert twin.trials == eng.trials and twin.time == eng.time


def test_replay_rebuilds_the_very_same_engine_and_algorithm():
    batches = []
    algo = make_algorithm("asha", SPACE, metric="loss", max_budget=9, num_trials=12, seed=2)
    eng = Engine(algo, validate=True, hints={"workload": WL})
    eng.subscribe(lambda events, cmds: batches.append(
        (list(events), [command_payload(c) for c in cmds])))
    SimRuntime(cluster=3).start(eng, WL)
    twin = RestartableEngine(
        make_algorithm("asha", SPACE, metric="loss", max_budget=9, num_trials=12, seed=2),
        validate=True, hints={"workload": WL})
    assert replay(twin, batches) == len(batches)
    assert twin.done and twin.trials == eng.trials
    assert twin.ledger.log == eng.ledger.log
    assert twin.algorithm.history == eng.algorithm.history
    other = RestartableEngine(
        make_algorithm("asha", SPACE, metric="loss", max_budget=9, num_trials=12, seed=3))
    with pytest.raises(ResumeError, match="diverged at batch 0"):
        replay(other, batches)


# ------------------------------------------------------------- through a store
@pytest.mark.parametrize("algorithm,kw", [("asha", {"num_trials": 12}), ("bohb", {"num_trials": 12}),
                                          ("hyperband", {})])
def test_the_stored_log_rebuilds_the_crashed_engine_bit_for_bit(tmp_path, algorithm, kw):
    """Through SQLite and JSON and back: same trials, allocations, algorithm history and RNG."""
    st = Store(tmp_path / "bits.db")

    def build():
        algo = make_algorithm(algorithm, SPACE, metric="loss", max_budget=9, seed=4, **kw)
        return RestartableEngine(algo, make_allocator("fifo"), hints={"workload": WL})

    dead = build()
    rec = start_recording(st, "bits", dead, algorithm=algorithm, algorithm_options=kw,
                          background=False)
    with pytest.raises(SimulationError):
        SimRuntime(cluster=3, max_events=30).start(dead, WL)
    rec.close()
    row = st.experiment("bits")  # rebuilt from what was stored, not from this test's code
    twin = RestartableEngine(rebuild_algorithm(row), rebuild_allocator(row),
                             hints={"workload": WL})
    replay(twin, st.event_log("bits"))
    assert twin.trials == dead.trials and twin.ledger.log == dead.ledger.log
    assert twin.algorithm.history == dead.algorithm.history
    assert twin.algorithm.rng.bit_generator.state == dead.algorithm.rng.bit_generator.state
    assert list(twin.pending) == list(dead.pending) and twin.time == dead.time


@pytest.mark.parametrize("n", [3, 15, 30])
@pytest.mark.parametrize("wl,algorithm,kw", [
    (WL, "random", {"num_trials": 7, "max_budget": 6}),
    (GRID_WL, "grid", {"max_budget": 5}),
], ids=["random", "grid"])
def test_resume_after_a_crash_ends_as_if_nothing_happened(tmp_path, n, wl, algorithm, kw):
    st = Store(tmp_path / "r.db")
    crash(wl, st, "run", n, algorithm, **kw)
    before = st.results("run")
    done_before = set(before.loc[before["state"] == "completed", "trial_id"])
    used_before = dict(zip(before["trial_id"], before["budget_used"], strict=True))
    exp = nbtune.resume("run", store=st, trainable=wl, runtime=SimRuntime(cluster=2),
                        validate=True)
    assert exp.done
    full = uninterrupted(wl, algorithm, **kw)
    pd.testing.assert_frame_equal(exp.results()[STABLE], full.results()[STABLE])
    relaunched = launches_after_restart(st, "run")
    assert not done_before & {t for t, _ in relaunched}, "a completed trial ran again"
    for t, start in relaunched:  # running ones continue from their last recorded budget
        assert start == used_before.get(t, 0.0)
    pd.testing.assert_frame_equal(st.results("run"), exp.results(), check_dtype=False)
    assert st.experiment("run").state == "done" and st.experiment("run").restarts == 1


def test_a_resumed_run_can_crash_and_resume_again(tmp_path):
    st = Store(tmp_path / "twice.db")
    kw = {"num_trials": 7, "max_budget": 6}
    crash(WL, st, "twice", 20, "random", **kw)
    with pytest.raises(SimulationError):
        nbtune.resume("twice", store=st, trainable=WL, runtime=SimRuntime(cluster=2, max_events=15))
    exp = nbtune.resume("twice", store=st, trainable=WL, runtime=SimRuntime(cluster=2))
    assert exp.done and st.experiment("twice").restarts == 2
    full = uninterrupted(WL, "random", **kw)
    pd.testing.assert_frame_equal(exp.results()[STABLE], full.results()[STABLE])


def test_resume_as_a_user_writes_it_goes_back_to_the_simulator_it_ran_on(tmp_path):
    """``nbtune.resume(name, store=..., trainable=wl)``: no runtime given, the run continues
    on the simulator with the GPUs it had, and ends as the uninterrupted run does."""
    st = Store(tmp_path / "auto.db")
    kw = {"num_trials": 7, "max_budget": 6}
    crash(WL, st, "auto", 20, "random", **kw)
    exp = nbtune.resume("auto", store=st, trainable=WL)
    assert exp.done and exp.runtime.name == "sim" and exp.engine.cluster.n_gpus == 2
    full = uninterrupted(WL, "random", **kw)
    pd.testing.assert_frame_equal(exp.results()[STABLE], full.results()[STABLE])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 70), lose_buffer=st.booleans(), gpus=st.integers(1, 3))
def test_any_crash_point_and_lost_buffer_resume_to_the_same_end(tmp_path_factory, n, lose_buffer,
                                                                gpus):
    """A killed process loses its unflushed buffer: the stored log is a prefix, and any prefix works."""
    st = Store(tmp_path_factory.mktemp("prop") / "p.db")

    def engine():
        algo = make_algorithm("random", SPACE, metric="loss", max_budget=5, num_trials=6, seed=9)
        return Engine(algo, make_allocator("fifo"), validate=True, hints={"workload": WL})

    eng = engine()
    rec = start_recording(st, "p", eng, algorithm="random", allocator="fifo", background=False)
    try:
        SimRuntime(cluster=gpus, max_events=n).start(eng, WL)
    except SimulationError:
        rec.abandon() if lose_buffer else rec.close()
    finished = eng.done  # the simulator may raise just after the last event
    full = engine()
    SimRuntime(cluster=gpus).start(full, WL)
    if finished:
        with pytest.raises(ExperimentFinishedError):
            nbtune.resume("p", store=st, trainable=WL)
        return
    exp = nbtune.resume("p", store=st, trainable=WL, runtime=SimRuntime(cluster=gpus),
                        validate=True, background=False)
    assert exp.done
    for tid, t in full.trials.items():
        r = exp.engine.trials[tid]
        assert (r.config, r.state, r.best, r.budget_used) == (t.config, t.state, t.best,
                                                              t.budget_used)
        assert [b for _, b, _ in r.results] == [b for _, b, _ in t.results]  # no budget twice
    # and the store holds exactly what the resumed experiment shows, lost buffer or not
    pd.testing.assert_frame_equal(st.results("p"), exp.results(), check_dtype=False)
    pd.testing.assert_frame_equal(st.allocations("p"), exp.allocations(), check_dtype=False)
    pd.testing.assert_frame_equal(st.learning_curves("p"), exp.learning_curves(),
                                  check_dtype=False)


def test_asha_resumes_without_rerunning_completed_trials(tmp_path):
    st = Store(tmp_path / "a.db")
    crash(WL, st, "asha", 40, "asha", num_trials=12, max_budget=9)
    before = st.results("asha")
    ended = set(before.loc[before["state"].isin(["completed", "stopped"]), "trial_id"])
    exp = nbtune.resume("asha", store=st, trainable=WL, runtime=SimRuntime(cluster=2),
                        validate=True)
    assert exp.done and len(exp.results()) >= 12
    assert not ended & {t for t, _ in launches_after_restart(st, "asha")}
    assert all(TrialState(s).is_terminal for s in exp.results()["state"])


def test_asha_resumes_under_the_stop_rule_it_ran_with(tmp_path):
    from nbtune.store.resume import algorithm_options, rebuild_algorithm

    st = Store(tmp_path / "r.db")
    crash(WL, st, "ray", 40, "asha", num_trials=12, max_budget=9, stop_rule="ray")
    crash(WL, st, "default", 40, "asha", num_trials=12, max_budget=9)
    # the effective rule is recorded, also where the default chose it
    assert algorithm_options(st.experiment("ray"))["stop_rule"] == "ray"
    assert algorithm_options(st.experiment("default"))["stop_rule"] == "rank"
    assert rebuild_algorithm(st.experiment("default")).stop_rule == "rank"
    exp = nbtune.resume("ray", store=st, trainable=WL, runtime=SimRuntime(cluster=2),
                        validate=True)
    assert exp.engine.algorithm.stop_rule == "ray" and exp.done
    # a run recorded before the rule was stored ran under the default of then
    old = st.experiment("default")
    old.algorithm_options = {}
    assert rebuild_algorithm(old).stop_rule == "ray"


# ---------------------------------------------------------------- bad input
def test_unknown_names_list_what_the_store_holds(tmp_path):
    st = Store(tmp_path / "u.db")
    with pytest.raises(UnknownExperimentError, match="the store is empty"):
        nbtune.resume("ghost", store=st, trainable=WL)
    nbtune.tune(WL, algorithm="random", metric="loss", max_budget=2, num_trials=2, store=st,
                name="real", runtime=SimRuntime(cluster=2))
    with pytest.raises(UnknownExperimentError, match=r"known experiments: \['real'\]"):
        nbtune.resume("ghost", store=st, trainable=WL)


def test_a_name_clash_on_a_new_tune_points_to_resume(tmp_path):
    path = tmp_path / "c.db"
    nbtune.tune(WL, algorithm="random", metric="loss", max_budget=2, num_trials=2, store=path,
                name="mine", runtime=SimRuntime(cluster=2))
    with pytest.raises(ExperimentExistsError, match=r"nbtune\.resume\('mine'"):
        nbtune.tune(WL, algorithm="random", metric="loss", max_budget=2, num_trials=2,
                    store=path, name="mine", runtime=SimRuntime(cluster=2))
    with pytest.raises(ExperimentFinishedError, match="already finished"):
        nbtune.resume("mine", store=path, trainable=WL)


def test_a_rebuilt_algorithm_that_drifted_is_caught(tmp_path):
    st = Store(tmp_path / "d.db")
    crash(WL, st, "drift", 10, "random", num_trials=5, max_budget=4)
    with st.engine.begin() as conn:  # someone edits the stored seed
        conn.exec_driver_sql("UPDATE experiments SET seed = seed + 1 WHERE name = 'drift'")
    with pytest.raises(ResumeError, match="diverged"):
        nbtune.resume("drift", store=st, trainable=WL)


def test_instances_and_workloads_must_be_passed_again(tmp_path):
    st = Store(tmp_path / "i.db")
    algo = OneShot(SPACE, metric="loss", max_budget=4, num_trials=4, seed=1)
    with pytest.raises(SimulationError):
        nbtune.tune(WL, algorithm=algo, metric="loss", max_budget=4, store=st, name="inst",
                    runtime=SimRuntime(cluster=2, max_events=10))
    with pytest.raises(ResumeError, match="pass trainable="):
        nbtune.resume("inst", store=st)
    with pytest.raises(ResumeError, match="pass algorithm="):
        nbtune.resume("inst", store=st, trainable=WL)
    with pytest.raises(ResumeError, match="fresh algorithm"):
        nbtune.resume("inst", store=st, trainable=WL, algorithm=algo)
    again = OneShot(SPACE, metric="loss", max_budget=4, num_trials=4, seed=1)
    exp = nbtune.resume("inst", store=st, trainable=WL, algorithm=again)
    assert exp.done and set(exp.results()["state"]) == {"completed"}


def test_resume_works_on_every_backend(store, uname):
    name = uname("any")
    crash(WL, store, name, 12, "random", num_trials=4, max_budget=3)
    exp = nbtune.resume(name, store=store, trainable=WL, runtime=SimRuntime(cluster=2))
    assert exp.done and store.experiment(name).state == "done"
    pd.testing.assert_frame_equal(store.results(name), exp.results(), check_dtype=False)
