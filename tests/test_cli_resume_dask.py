"""``nbtune resume``: a real tuning job on Dask dies mid-run, the command line continues it.

The first run uses a LocalCluster of two workers (tests.dask_cluster); the
"crash" drops the recorder's unflushed buffer and kills the runtime with its
trial processes, as a dead kernel does. ``nbtune resume`` (no ``--runtime``: the
runtime the run recorded) then starts its own LocalCluster (``--workers 2``), imports
the training function the store recorded by name and finishes the job from the
checkpoints. No mocks.
"""

from __future__ import annotations

import re
import time

import pytest

import nbtune
from nbtune.cli import main
from nbtune.core.space import uniform
from nbtune.runtimes.dask import DaskRuntime  # noqa: E402
from nbtune.store import Store
from tests.dask_cluster import local_client  # noqa: E402

# trials but 0 hold before step 4 until the gate opens, so the crash finds them mid-run
from tests.store.test_resume_dask import gate, train_counting  # noqa: E402

pytestmark = pytest.mark.integration

BUDGET = 6


def test_resume_on_dask_from_the_command_line(tmp_path, capsys):
    store = tmp_path / "st"
    with local_client() as client:
        rt = DaskRuntime(client, preload=(), sample_interval=0.25, warm_processes=1)
        exp = nbtune.tune(train_counting, {"lr": uniform(0.1, 1.0)}, algorithm="random",
                          metric="loss", max_budget=BUDGET, num_trials=3, runtime=rt,
                          store=store, name="dead", seed=1)
        st = Store(store)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            reports = [e for events, _ in st.event_log("dead") for e in events
                       if type(e).__name__ == "TrialReported"]
            done = {e.trial_id for e in reports if e.budget >= BUDGET}
            held = {e.trial_id for e in reports if e.budget >= 2 and e.trial_id != 0}
            # ... with a checkpoint past step 1 recorded (it is written after the report)
            saved = {t for t in held
                     if st.checkpoint("dead", t) != st.checkpoint("dead", t, 1)}
            if 0 in done and saved:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the store never held trial 0's completion and a held trial's step 2")
        exp.recorder.abandon()  # the kernel dies: whatever was not committed is gone
        rt.close()
    capsys.readouterr()
    gate(str(rt.checkpoint_dir)).touch()
    crash_time = max(e.time for events, _ in st.event_log("dead") for e in events)

    # no --runtime: it goes back to the runtime it ran on, as nbtune.resume does
    code = main(["resume", "dead", "--store", str(store), "--workers", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"^cluster up after [\d.]+ s$", out, re.M)
    assert re.search(r"^\[ *[\d.]+s\] trial +\d+ promote \d+ -> 6 on slot", out, re.M), out
    # GPUs only on GPUs: the CPU workers that stand in for them are named workers
    assert re.search(r"^job\s+random resumed on 2 (CPU workers on Dask \(standing in for "
                     r"GPUs\)|GPUs on Dask), allocator auto$", out, re.M)
    res = st.results("dead")
    assert set(res["state"]) == {"completed"} and (res["budget_used"] == BUDGET).all()
    best = res.loc[res["loss"].idxmin()]
    assert re.search(rf"^best loss\s+{best['loss']:.4f} \(trial {best['trial_id']}, ", out, re.M)
    curves = st.learning_curves("dead")
    later = curves[curves["time"] > crash_time]
    assert not (later["trial_id"] == 0).any(), "the completed trial ran again"
    assert (later["restored"] >= 2).any(), "no trial continued from its checkpoint"
    row = st.experiment("dead")
    assert row.state == "done" and row.restarts == 1
