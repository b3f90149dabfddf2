"""``nbtune.resume`` of a fused run (``tune(..., fusion=4)``) on a real LocalCluster.

The kernel dies while every fused member is held before step 4 (steps 1-3 reported and
checkpointed); the resumed run fuses again with the stored settings, each member restored
from its own checkpoint, and every trial ends where uninterrupted training ends.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from nbtune.core.space import choice
from tests.dask_cluster import local_client
from tests.fusion.test_trial import ckpt_train

pytestmark = pytest.mark.integration
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SPACE = {"seed": choice([0, 1, 2, 3]), "hidden": choice([16]), "lr": choice([0.3, 0.03]),
         "momentum": choice([0.0, 0.9])}


def _wait_for_gate(trial, step):
    gate = Path(trial.members[0].checkpoint_dir).parent.parent / "gate-open"
    while step > 3 and not gate.exists():
        time.sleep(0.05)


def gated_train(config, trial):
    """``tests.fusion.test_trial.ckpt_train`` that waits before step 4 until the test
    opens a gate file beside the store's checkpoints."""
    ckpt_train(config, trial, before_step=_wait_for_gate)


def test_a_fused_run_resumes_fused_from_each_members_checkpoint(tmp_path):
    import nbtune
    from nbtune.core.commands import Launch
    from nbtune.fusion.fusion_trial import run_group
    from nbtune.resumption import prepare_resume
    from nbtune.runtimes.dask import DaskRuntime
    from nbtune.store import Store
    from tests.fusion.test_trial import Recorder

    with local_client() as client:
        rt = DaskRuntime(client, preload=("torch",), warm_processes=1, dashboard_address=None)
        exp = nbtune.tune(gated_train, SPACE, algorithm="random", metric="loss", mode="min",
                          max_budget=6, num_trials=4, runtime=rt, store=tmp_path / "st",
                          name="fused", seed=0, fusion=4, validate=True)
        st = Store(tmp_path / "st")
        def saved_step_3(tid: int) -> bool:  # a checkpoint past step 2 is recorded (the gate
            latest = st.checkpoint("fused", tid)  # holds them before step 4: it is step 3's)
            return latest is not None and latest != st.checkpoint("fused", tid, 2)

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # every member reported and stored step 3
            reports = [e for events, _ in st.event_log("fused") for e in events
                       if type(e).__name__ == "TrialReported" and e.budget >= 3]
            if ({e.trial_id for e in reports} == set(range(4))
                    and all(saved_step_3(t) for t in range(4))):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the members never reached step 3 (reported and stored) in 120 s")
        exp.recorder.abandon()  # the kernel dies
        rt.close()
        assert st.experiment("fused").fusion == {"f_max": 4, "shape_keys": [],
                                                 "elastic": True, "memory": False,
                                                 "margin": 0.1}
        (tmp_path / "st" / "gate-open").touch()
        rt2 = DaskRuntime(client, preload=("torch",), warm_processes=1, dashboard_address=None)
        prep = prepare_resume("fused", store=tmp_path / "st", validate=True)
        assert prep.engine.fusion is not None and prep.engine.fusion.f_max == 4
        launches: list[Launch] = []
        prep.engine.subscribe(lambda events, cmds: launches.extend(
            c for c in cmds if isinstance(c, Launch)))
        again = prep.start(rt2)
        try:
            assert again.wait(120)
        finally:
            rt2.close()
    df = again.results()
    assert (df["state"] == "completed").all() and (df["budget_used"] == 6).all(), df
    assert launches and all(c.unit is not None for c in launches), launches
    assert any(len(c.members) > 1 and c.start_budget >= 3 for c in launches), launches
    for row in df.to_dict("records"):  # ends where uninterrupted training ends
        cfg = {k.split("/", 1)[1]: v for k, v in row.items() if k.startswith("config/")}
        rec = Recorder()
        run_group(ckpt_train, [cfg], [rec], budget=6)
        assert rec.rows[-1][1]["loss"] == pytest.approx(row["last"], abs=1e-4)
