"""The recorder under the simulator: what tune(store=...) writes equals what the Experiment shows."""

from __future__ import annotations

import time

import pandas as pd
import pytest

import nbtune
from nbtune.core import events as ev
from nbtune.core.resources import ClusterSpec
from nbtune.core.space import loguniform, uniform
from nbtune.engine import Engine
from nbtune.runtimes.sim import SimRuntime
from nbtune.store import Recorder, Store, open_store, start_recording
from nbtune.store.store import DEFAULT_DIR, DEFAULT_FILE
from nbtune.workloads import SyntheticWorkload
from tests.engine.toy import OneShot

SPACE = {"lr": loguniform(1e-4, 1e-1), "m": uniform(0, 1)}


def workload(**kw):
    return SyntheticWorkload(SPACE, unit_time=10.0, **kw)


@pytest.mark.parametrize("algorithm,kw,effective", [
    ("random", {"num_trials": 10}, {}),
    ("asha", {"num_trials": 16, "eta": 3}, {"stop_rule": "rank"}),  # the default, recorded
])
def test_tune_with_a_store_writes_what_the_experiment_shows(tmp_path, algorithm, kw, effective):
    exp = nbtune.tune(workload(failure_rate=0.2), algorithm=algorithm, metric="loss",
                      max_budget=9, runtime=SimRuntime(cluster=3), store=tmp_path / "s.db",
                      name="e2e", seed=1, max_failures=1, **kw)
    assert exp.done and exp.store is not None
    st = Store(tmp_path / "s.db")  # a second handle, as another kernel would open it
    pd.testing.assert_frame_equal(st.results("e2e"), exp.results(), check_dtype=False)
    pd.testing.assert_frame_equal(st.learning_curves("e2e"), exp.learning_curves(),
                                  check_dtype=False)
    pd.testing.assert_frame_equal(st.allocations("e2e"), exp.allocations(), check_dtype=False)
    row = st.experiment("e2e")
    assert (row.state, row.algorithm, row.seed, row.max_failures) == ("done", algorithm, 1, 1)
    assert row.time == pytest.approx(exp.engine.time)
    assert row.algorithm_options == {**{k: v for k, v in kw.items() if k != "num_trials"},
                                     **effective}


def test_without_a_seed_one_is_drawn_and_stored(tmp_path):
    exp = nbtune.tune(workload(), algorithm="random", metric="loss", max_budget=3,
                      num_trials=3, runtime=SimRuntime(cluster=2), store=tmp_path)
    row = Store(tmp_path / DEFAULT_FILE).experiment(exp.name)
    assert row.seed is not None and row.seed == exp.engine.algorithm.seed


def test_store_locations(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert open_store(None) is None and open_store(False) is None
    assert open_store(True).path == tmp_path / DEFAULT_DIR / DEFAULT_FILE
    assert open_store(tmp_path / "runs").path == tmp_path / "runs" / DEFAULT_FILE
    assert open_store(str(tmp_path / "x.sqlite")).path == tmp_path / "x.sqlite"
    assert open_store("sqlite://").path is None
    st = Store(tmp_path / "y.db")
    assert open_store(st) is st
    with pytest.raises(TypeError, match="store= takes"):
        open_store(3.5)


def test_the_sqlite_file_runs_in_wal_mode(tmp_path):
    st = Store(tmp_path / "w.db")
    with st.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def test_utilization_samples_are_stored(tmp_path):
    st = Store(tmp_path / "u.db")
    algo = OneShot(SPACE, metric="loss", max_budget=2, num_trials=1, seed=0)
    eng = Engine(algo)
    rec = start_recording(st, "u", eng, algorithm=OneShot, background=False)
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    eng.handle(ev.UtilizationSampled(1.0, {0: 0.9, 1: 0.0}, {0: 5.5}))
    rec.close()
    u = st.utilization("u")
    assert u.to_dict("records") == [
        {"time": 1.0, "gpu_id": 0, "util": 0.9, "memory_gb": 5.5},
        {"time": 1.0, "gpu_id": 1, "util": 0.0, "memory_gb": 0.0}]
    assert st.experiment("u").algorithm == "tests.engine.toy:OneShot"


def test_quiet_reports_are_buffered_state_changes_are_written_at_once(tmp_path):
    """At most the reports since the last state change are ever waiting (a crash's loss)."""
    st = Store(tmp_path / "b.db")
    algo = OneShot(SPACE, metric="loss", max_budget=5, num_trials=2, seed=0)
    eng = Engine(algo, validate=True)
    st.create_experiment("b", algorithm="oneshot", metric="loss", mode="min", max_budget=5.0,
                         space={}, allocator="fifo")
    rec = Recorder(st, "b", eng, background=False, flush_interval=1e9, max_rows=10**9)
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))  # two launches
    assert rec.pending_rows == 0 and len(st.results("b")) == 2
    for b in (1, 2, 3):
        eng.handle(ev.TrialReported(float(b), 0, float(b), {"loss": 1.0 / b}))
    assert rec.pending_rows == 3  # three quiet reports: nothing changed state
    assert len(st.learning_curves("b")) == 0
    eng.handle(ev.TrialStopRequested(4.0, 1))  # a state change flushes everything before it
    assert rec.pending_rows == 0
    assert len(st.learning_curves("b")) == 3
    assert st.results("b").set_index("trial_id").loc[1, "state"] == "stopped"
    eng.handle(ev.TrialReported(5.0, 0, 4.0, {"loss": 0.2}))
    rec.abandon()  # the process is killed: the one buffered report is what is lost
    assert len(st.learning_curves("b")) == 3
    assert len(st.event_log("b")) == 5


def test_the_background_writer_flushes_on_its_own(tmp_path):
    st = Store(tmp_path / "t.db")
    algo = OneShot(SPACE, metric="loss", max_budget=50, num_trials=1, seed=0)
    eng = Engine(algo)
    rec = start_recording(st, "t", eng, algorithm=OneShot, background=True)
    rec.flush_interval = 0.05
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))
    eng.handle(ev.TrialReported(1.0, 0, 1.0, {"loss": 0.5}))
    reader = Store(tmp_path / "t.db")
    deadline = time.monotonic() + 120
    while reader.learning_curves("t").empty and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(reader.learning_curves("t")) == 1
    rec.close()
    assert rec.error is None and rec.commits >= 1


def test_checkpoint_references_of_a_dask_runtime_are_recorded(tmp_path):
    """The Dask runtime writes under the store's directory; the recorder keeps the references."""
    from nbtune.runtimes.dask import DaskRuntime
    from nbtune.runtimes.dask.checkpoints import checkpoint_path, save_state
    from nbtune.store.registration import runtime_checkpoints

    st = Store(tmp_path / "ck.db")
    rt = DaskRuntime()  # not started: only its checkpoint bookkeeping is used here
    algo = OneShot(SPACE, metric="loss", max_budget=4, num_trials=1, seed=0)
    eng = Engine(algo)
    rec = start_recording(st, "ck", eng, algorithm=OneShot, background=False,
                          checkpoints=runtime_checkpoints(st, "ck", rt))
    assert rt.checkpoint_dir == tmp_path / "checkpoints" / "ck"
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))
    for b in (1.0, 2.0):
        save_state({"w": b}, checkpoint_path(rt.checkpoint_dir, 0, b))
        eng.handle(ev.TrialReported(b, 0, b, {"loss": 1 / b}))
    eng.handle(ev.TrialStopRequested(3.0, 0))
    rec.close()
    assert st.checkpoint("ck", 0).endswith("trial-0/budget-2.pt")
    assert st.checkpoint("ck", 0, budget=1.5) is None  # budget 1 fell between two snapshots
    with st.engine.connect() as conn:
        ref = conn.exec_driver_sql("SELECT checkpoint FROM trials").scalar()
    assert ref.endswith("budget-2.pt")



def test_a_failed_commit_keeps_its_rows_and_retries_in_order(tmp_path, caplog):
    st = Store(tmp_path / "f.db")
    algo = OneShot(SPACE, metric="loss", max_budget=5, num_trials=2, seed=0)
    eng = Engine(algo, validate=True)
    rec = start_recording(st, "f", eng, algorithm=OneShot, background=False)
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    with st.engine.begin() as conn:  # the table vanishes under the recorder
        conn.exec_driver_sql("ALTER TABLE metrics RENAME TO metrics_away")
    eng.handle(ev.TrialReported(1.0, 0, 1.0, {"loss": 0.5}))
    eng.handle(ev.TrialStopRequested(2.0, 0))  # urgent: the commit is tried and fails
    assert rec.error is not None and "write failed" in caplog.text
    assert len(st.event_log("f")) == 1  # nothing of the failed transaction landed
    with st.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE metrics_away RENAME TO metrics")
    eng.handle(ev.TrialStopRequested(3.0, 1))
    assert rec.pending_rows == 0
    log = st.event_log("f")
    assert [type(e).__name__ for events, _ in log for e in events] == [
        "ExperimentStarted", "TrialReported", "TrialStopRequested", "TrialStopRequested"]
    assert list(st.learning_curves("f")["loss"]) == [0.5]
    assert st.experiment("f").state == "done"


def test_two_processes_recording_one_experiment_do_not_interleave(tmp_path, caplog):
    """The old kernel was not dead after all: its next write conflicts and it stops recording."""
    from nbtune.store import RestartableEngine, replay
    from nbtune.store.recorder import RecordingConflict

    def algo():
        return OneShot(SPACE, metric="loss", max_budget=5, num_trials=2, seed=0)

    old_eng = Engine(algo(), validate=True)
    old = start_recording(Store(tmp_path / "two.db"), "two", old_eng, algorithm=OneShot,
                          background=False)
    old_eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    st = Store(tmp_path / "two.db")  # the new kernel resumes it
    new_eng = RestartableEngine(algo(), validate=True)
    replay(new_eng, st.event_log("two"))
    new = Recorder(st, "two", new_eng, background=False)
    new_eng.handle(ev.ExperimentStarted(10.0, ClusterSpec.homogeneous(2)))
    old_eng.handle(ev.TrialStopRequested(11.0, 0))  # the old one writes again: a clash
    assert isinstance(old.error, RecordingConflict) and "another process" in caplog.text
    old_eng.handle(ev.TrialStopRequested(12.0, 1))  # its engine goes on, unrecorded
    assert old_eng.done
    new_eng.handle(ev.TrialReported(13.0, 0, 1.0, {"loss": 0.3}))
    new.flush()
    kinds = [type(e).__name__ for events, _ in st.event_log("two") for e in events]
    assert kinds == ["ExperimentStarted", "ExperimentStarted", "TrialReported"]
    assert new.error is None


def test_observers_after_the_recorder_still_see_the_finish(tmp_path):
    """Closing on Finish inside the engine's subscriber loop must not hide the batch from others."""
    from nbtune.core.commands import Finish

    algo = OneShot(SPACE, metric="loss", max_budget=2, num_trials=2, seed=0)
    eng = Engine(algo)
    rec = start_recording(Store(tmp_path / "o.db"), "o", eng, algorithm=OneShot)
    seen = []
    eng.subscribe(lambda events, cmds: seen.extend(type(c) for c in cmds))
    SimRuntime(cluster=2).start(eng, workload())
    assert Finish in seen and rec.commits >= 1


def test_a_run_that_never_started_leaves_no_stored_experiment(tmp_path):
    from nbtune.runtimes.dask import DaskRuntime

    with pytest.raises(TypeError, match=r"train\(config, trial\)"):
        nbtune.tune(lambda: None, SPACE, algorithm="random", num_trials=1, metric="loss",
                    max_budget=1, runtime=DaskRuntime(cluster=42), store=tmp_path, name="x")
    assert "x" not in Store(tmp_path).names()  # the name stays free for the corrected call
