"""Resume on the real Dask runtime: the kernel dies mid-run, a new one continues from checkpoints.

A LocalCluster of two workers (no mocks standing in for Dask). The "crash"
drops the recorder's unflushed buffer and kills the runtime with its trial
processes, which is what a dead kernel leaves behind; the new runtime's wall
clock starts again at 0 and the engine carries on the experiment's timeline.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import cloudpickle
import pytest

import nbtune
from nbtune.core.space import uniform
from nbtune.runtimes.dask import DaskRuntime  # noqa: E402
from nbtune.store import Store
from tests.dask_cluster import local_client  # noqa: E402

pytestmark = pytest.mark.integration
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def gate(checkpoint_dir: str) -> Path:
    """A file under the store: trials other than 0 wait for it before their 4th step."""
    return Path(checkpoint_dir).parent.parent / "gate-open"


def train_counting(config, trial):
    """Checkpoints every step, so a restart continues where the last checkpoint is.

    Trial 0 runs through; the others hold before step 4 until the test opens the
    gate, so the "crash" always finds them mid-run with steps 1-3 checkpointed
    and reported, however loaded the machine is.
    """
    state = trial.restore() or {"w": 0.0}
    for step in trial.steps():
        while trial.trial_id != 0 and step > 3 and not gate(trial.checkpoint_dir).exists():
            time.sleep(0.05)
        time.sleep(0.25)
        state["w"] += config["lr"]
        trial.report(step=step, loss=1.0 / (1.0 + state["w"]), restored=trial.restore_step or 0.0)
        trial.checkpoint(state)


@pytest.fixture(scope="module")
def client():
    with local_client() as c:
        yield c


def runtime(client):
    return DaskRuntime(client, preload=(), sample_interval=0.25, warm_processes=1)


@pytest.mark.parametrize("how", ["runtime given", "as a user writes it"])
def test_a_dead_kernel_resumes_from_checkpoints_without_rerunning(client, tmp_path, how):
    """``as a user writes it``: ``nbtune.resume(name, store=..., trainable=train)``, which goes
    back to the runtime the experiment ran on (here: Dask, the process's kept cluster)."""
    rt = runtime(client)
    exp = nbtune.tune(train_counting, {"lr": uniform(0.1, 1.0)}, algorithm="random",
                      metric="loss", max_budget=8, num_trials=4, runtime=rt,
                      store=tmp_path / "st", name="dead", seed=1)
    assert rt.checkpoint_dir == tmp_path / "st" / "checkpoints" / "dead"
    deadline = time.monotonic() + 120
    st = Store(tmp_path / "st")
    while time.monotonic() < deadline:
        # the crash comes once the store holds trial 0's completion and step 3 of a trial
        # still running (held at the gate), so there is something both to keep and to continue
        reports = [e for events, _ in st.event_log("dead") for e in events
                   if type(e).__name__ == "TrialReported"]
        done = {e.trial_id for e in reports if e.budget >= 8}  # its last report completes it
        held = {e.trial_id for e in reports if e.budget >= 3 and e.trial_id != 0}
        # ... whose step-3 checkpoint is recorded too (it is written after the report)
        saved = {t for t in held if st.checkpoint("dead", t) != st.checkpoint("dead", t, 2)}
        if 0 in done and saved:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the store never held trial 0's completion and a held trial's step 3 "
                    "(report and checkpoint) in 120 s")
    exp.recorder.abandon()  # the kernel dies: whatever was not committed is gone
    rt.close()

    assert st.experiment("dead").trainable == f"{__name__}:train_counting"
    log = st.event_log("dead")
    crash_time = max(e.time for events, _ in log for e in events)
    gate(str(rt.checkpoint_dir)).touch()
    if how == "runtime given":
        rt2 = runtime(client)
        again = nbtune.resume("dead", store=tmp_path / "st", runtime=rt2, validate=True)
    else:
        again = nbtune.resume("dead", store=tmp_path / "st", trainable=train_counting,
                              validate=True)
        rt2 = again.runtime
        assert rt2.live_workers and rt2 is not rt
    try:
        assert again.wait(120)
    finally:
        rt2.close()
    assert again.engine.time_offset >= crash_time > 0  # the new wall clock started at 0
    res = again.results()
    assert set(res["state"]) == {"completed"} and (res["budget_used"] == 8).all()
    curves = again.learning_curves()
    for _, g in curves.groupby("trial_id"):
        # nothing went back to the start; a step whose report landed but whose checkpoint
        # had not when the kernel died is trained once more, hence not strictly increasing
        assert g["budget"].is_monotonic_increasing
    restarted = curves[(curves["time"] > crash_time) & (curves["restored"] > 0)]
    assert not restarted.empty, "no trial continued from its checkpoint"
    assert set(restarted["restored"]) >= {3.0}  # the held trials went on from step 3
    assert not ((curves["trial_id"] == 0) & (curves["time"] > crash_time)).any(), \
        "the completed trial ran again"
    before = {tid for events, _ in log for e in events if type(e).__name__ == "TrialReported"
              for tid in [e.trial_id]}
    # a trial's first run after the crash continues from a checkpoint only if the dead run
    # had recorded its reports; a later relaunch in the new run (a worker joined, the
    # allocator moved it) restores from the checkpoints the new run wrote, which is fine
    first_after = curves[curves["time"] > crash_time].groupby("trial_id").first()
    assert set(first_after.index[first_after["restored"] > 0]) <= before
    assert st.experiment("dead").state == "done"
    assert st.checkpoint("dead", int(res["trial_id"].iloc[0])) is not None
