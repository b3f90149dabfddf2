"""The driver's direct links to the workers (launch, control, message stream) when they break.

A worker whose stream breaks while it stays alive may have lost messages on
the way: its runs count as lost (requeued, no failure), and the worker comes
back as GPUs once the stream is reopened. A launch a worker cannot carry out
fails that trial, not the experiment. Its own cluster: these tests tamper
with the workers' handlers.
"""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

from nbtune.core import events as ev
from nbtune.core.space import uniform
from nbtune.core.trial import TrialState
from nbtune.engine.engine import Engine
from tests.engine.toy import OneShot

distributed = pytest.importorskip("distributed")

from nbtune.runtimes.dask import DaskRuntime  # noqa: E402
from tests.dask_cluster import local_client, wait_for_budget, watched_engine  # noqa: E402

pytestmark = pytest.mark.integration
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client():
    with local_client() as c:
        yield c


def train_steady(config, trial):
    state = trial.restore() or {"n": 0}
    for step in trial.steps():
        time.sleep(0.2)
        state["n"] += 1
        trial.report(step=step, loss=1.0 / step, restored=trial.restore_step or 0.0)
        trial.checkpoint(state)


async def _end_stream(topic: str) -> bool:
    """On a worker: end the runtime's stream from the worker's side, as a network fault would."""
    from nbtune.runtimes.dask import handlers

    q = handlers._STREAMS.get(topic)
    if q is None:
        return False
    q.put_nowait(None)
    return True


def _drop_launch_handler(dask_worker) -> None:
    dask_worker.handlers.pop("nbtune_launch", None)


def _reinstall(dask_worker) -> None:
    from nbtune.runtimes.dask.handlers import install

    install(dask_worker)


def test_broken_stream_requeues_its_runs_and_the_worker_comes_back(client, tmp_path):
    algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=10, num_trials=2, seed=0)
    eng, seen = watched_engine(algo)
    rt = DaskRuntime(client, checkpoint_dir=tmp_path, preload=(), warm_processes=1,
                     sample_interval=0.5)
    rt.start(eng, train_steady)
    try:
        wait_for_budget(eng, 0, 2, 60)
        victim = rt.inventory.slots[eng.running[0][0][0]].worker
        assert client.run(_end_stream, rt._topic, workers=[victim])[victim]
        assert rt.wait(90)
    finally:
        rt.close()
    t = eng.trials[0]
    assert t.state is TrialState.COMPLETED and t.failures == 0, t.error
    lost = [e for e in seen if isinstance(e, ev.TrialFailed) and e.trial_id == 0]
    assert len(lost) == 1 and lost[0].worker_lost and victim in lost[0].error
    sizes = [e.cluster.n_gpus for e in seen if isinstance(e, ev.ResourcesChanged)]
    assert sizes[:2] == [1, 2]  # the worker left the engine's cluster, then came back
    budgets = [b for _, b, _ in t.results]
    assert budgets == sorted(set(budgets)) and budgets[-1] == 10
    assert any(m["restored"] >= 2 for _, _, m in t.results)
    assert eng.trials[1].state is TrialState.COMPLETED


def test_a_launch_the_worker_cannot_carry_out_fails_the_trial_not_the_experiment(
        client, tmp_path):
    algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=3, num_trials=4, seed=0)
    eng = Engine(algo, validate=True)
    rt = DaskRuntime(client, checkpoint_dir=tmp_path, preload=(), warm_processes=1,
                     sample_interval=0.5)
    rt.connect()
    broken = sorted(client.scheduler_info()["workers"])[0]
    client.run(_drop_launch_handler, workers=[broken])
    try:
        rt.start(eng, train_steady)
        assert rt.wait(90)
    finally:
        rt.close()
        client.run(_reinstall, workers=[broken])
    states = {tid: t.state for tid, t in eng.trials.items()}
    failed = [t for t in eng.trials.values() if t.state is TrialState.ERROR]
    assert failed, states
    assert all("could not start the trial" in t.error for t in failed)
    assert any(s is TrialState.COMPLETED for s in states.values()), states
