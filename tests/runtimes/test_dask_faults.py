"""A Dask worker dies mid-trial: its trial restarts from its checkpoint, no result is lost.

Its own cluster: killing a worker disturbs it (the nanny restarts the worker
under the same name, so the engine sees the cluster shrink, then grow back).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time

import cloudpickle
import pytest

from nbtune.core import events as ev
from nbtune.core.space import uniform
from nbtune.core.trial import TrialState
from nbtune.engine.engine import Engine
from nbtune.runtimes.dask import DaskRuntime  # noqa: E402
from tests.dask_cluster import local_client, wait_for_budget, watched_engine  # noqa: E402
from tests.engine.toy import OneShot

pytestmark = pytest.mark.integration
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client():
    with local_client() as c:
        yield c


def wait_for_gate(gate: str | None) -> None:
    """Block until ``gate`` (a path) exists: the test opens it once it has killed a worker,
    so the trials are still mid-run at the kill however slow the machine."""
    deadline = time.monotonic() + 1200  # never outlive the test by much
    while gate is not None and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)


def train_steady(config, trial, gate=None):
    state = trial.restore() or {"done": []}
    for step in trial.steps():
        if step > 3:
            wait_for_gate(gate)
        time.sleep(0.25)
        state["done"].append(step)
        trial.report(step=step, loss=1.0 / step, restored=trial.restore_step or 0.0,
                     worker=os.environ["NBTUNE_WORKER"], history=len(state["done"]))
        trial.checkpoint(state)


def test_killed_worker_restarts_trial_from_checkpoint(client, tmp_path):
    algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=12, num_trials=2, seed=0)
    eng, seen = watched_engine(algo)
    rt = DaskRuntime(client, checkpoint_dir=tmp_path, preload=(), warm_processes=1,
                     sample_interval=0.5)
    gate = tmp_path / "gate"
    rt.start(eng, functools.partial(train_steady, gate=str(gate)))
    try:
        wait_for_budget(eng, 1, 3, 90)  # and held before step 4 until the gate opens
        victim = rt.inventory.slots[eng.running[1][0][0]].worker
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        gate.touch()
        assert rt.wait(120)
    finally:
        gate.touch()
        rt.close()

    t = eng.trials[1]
    assert t.state is TrialState.COMPLETED, t.error
    assert t.failures == 0  # a lost worker is not the trial's fault
    lost = [e for e in seen if isinstance(e, ev.TrialFailed) and e.trial_id == 1]
    assert len(lost) == 1 and lost[0].worker_lost
    sizes = [e.cluster.n_gpus for e in seen if isinstance(e, ev.ResourcesChanged)]
    assert sizes and sizes[0] == 1  # the engine saw the cluster shrink
    # every unit trained exactly once as far as the engine and the checkpoint know
    budgets = [b for _, b, _ in t.results]
    assert budgets == sorted(set(budgets)) and budgets[-1] == 12
    restarted = [m for _, _, m in t.results if m["restored"] > 0]
    assert restarted and restarted[0]["restored"] >= 3
    # the checkpointed history survived (one unit may be lost if the kill fell between a
    # report and its checkpoint)
    assert restarted[-1]["history"] >= 11
    assert eng.trials[0].state is TrialState.COMPLETED


def train_two_steps(config, trial):
    for step in trial.steps():
        trial.report(step=step, loss=config["lr"])


def test_runtime_started_cluster_is_shut_down_with_its_experiment(tmp_path):
    algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=2, num_trials=1, seed=0)
    eng = Engine(algo, validate=True)
    rt = DaskRuntime(n_workers=1, dashboard_address=None, preload=(), warm_processes=1,
                     checkpoint_dir=tmp_path)
    rt.start(eng, train_two_steps)
    try:
        assert rt.wait(120)
        assert rt.gpus is False  # no NVML here: one CPU worker stands for one GPU
        assert eng.trials[0].state is TrialState.COMPLETED
        assert rt.client.status in ("closing", "closed") and rt._cluster is None
    finally:
        rt.close()


def test_killed_worker_mid_ddp_trial_kills_the_other_rank_and_restarts(client, tmp_path):
    """One rank's worker dies: the surviving rank (stuck in a collective) is killed, the trial
    goes back to the queue without a failure and continues from its checkpoint."""
    from tests.runtimes.test_dask_runtime import Gang, train_ddp

    algo = OneShot({"lr": uniform(0.01, 0.1)}, metric="loss", max_budget=8, num_trials=1, seed=0)
    eng, seen = watched_engine(algo, Gang())
    rt = DaskRuntime(client, checkpoint_dir=tmp_path, preload=("torch",), warm_processes=1,
                     sample_interval=0.5)
    gate = tmp_path / "gate"
    rt.start(eng, functools.partial(train_ddp, gate=str(gate)))
    try:
        wait_for_budget(eng, 0, 2, 120)  # and held before step 3 until the gate opens
        assert len(eng.running[0]) == 2
        victim = rt.inventory.slots[eng.running[0][1][0]].worker  # rank 1's worker
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        gate.touch()
        assert rt.wait(180)
    finally:
        gate.touch()
        rt.close()
    t = eng.trials[0]
    assert t.state is TrialState.COMPLETED, t.error
    assert t.failures == 0
    lost = [e for e in seen if isinstance(e, ev.TrialFailed) and e.trial_id == 0]
    assert len(lost) == 1 and lost[0].worker_lost
    budgets = [b for _, b, _ in t.results]
    assert budgets == sorted(set(budgets)) and budgets[-1] == 8
    assert any(m["restored"] >= 2 for _, _, m in t.results)  # went on from its checkpoint
