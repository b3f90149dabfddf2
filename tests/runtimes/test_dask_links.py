"""The driver's direct links to the workers (launch, control, message stream) when they break.

A worker whose stream breaks while it stays alive may have lost messages on
the way: its runs count as lost (requeued, no failure), and the worker comes
back as GPUs once the stream is reopened. A launch a worker cannot carry out
fails that trial, not the experiment. Its own cluster: these tests tamper
with the workers' handlers.
"""

from __future__ import annotations

import functools
import os
import sys
import time

import cloudpickle
import distributed
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


def wait_for(path: str | None) -> None:
    """Block until ``path`` exists (the test creates it once it has done what it must do
    while the trial is mid-run, however slow the machine); None: at once."""
    deadline = time.monotonic() + 1200  # never outlive the test by much
    while path is not None and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def train_steady(config, trial, gate=None):
    state = trial.restore() or {"n": 0}
    for step in trial.steps():
        if step > 2:
            wait_for(gate)
        time.sleep(0.2)
        state["n"] += 1
        trial.report(step=step, loss=1.0 / step, restored=trial.restore_step or 0.0)
        trial.checkpoint(state)


async def _end_stream(topic: str, dask_worker=None) -> bool:
    """On a worker: end the runtime's stream from the worker's side, as a network fault would."""
    from nbtune.runtimes.dask.worker_side import handlers

    q = handlers._STREAMS.get((dask_worker.address, topic))
    if q is None:
        return False
    q.put_nowait(None)
    return True


def _active() -> list[str]:
    """On a worker: the ranks it runs now (``run_key/rank``)."""
    from nbtune.runtimes.dask.worker_side import rank_runner as executor

    with executor._LOCK:
        return [k for k, e in executor._ACTIVE.items() if e.child is not None and e.child.alive()]


def _busy_loop(here: str) -> None:
    """On a worker, on its event loop (``client.run`` of a plain function): no service from
    before the trial's last report until its process has exited."""
    import psutil

    open(os.path.join(here, "blocked"), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(here, "pid")) and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(os.path.join(here, "pid")) as f:
        pid = int(f.read())
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.01)


def _break_free_port() -> None:
    """On a worker: rank 0 cannot bind a rendezvous port (a contact address it does not own)."""
    from nbtune.runtimes.dask.trial_side import ddp

    def free_port(host: str) -> int:
        raise OSError(99, "Cannot assign requested address")

    ddp.free_port = free_port


def _mend_free_port() -> None:
    import importlib

    from nbtune.runtimes.dask.trial_side import ddp

    importlib.reload(ddp)


def _drop_launch_handler(dask_worker) -> None:
    dask_worker.handlers.pop("nbtune_launch", None)


def _reinstall(dask_worker) -> None:
    from nbtune.runtimes.dask.worker_side.handlers import install

    install(dask_worker)


def test_broken_stream_requeues_its_runs_and_the_worker_comes_back(client, tmp_path):
    algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=10, num_trials=2, seed=0)
    eng, seen = watched_engine(algo)
    rt = DaskRuntime(client, checkpoint_dir=tmp_path, preload=(), warm_processes=1,
                     sample_interval=0.5)
    gate = tmp_path / "gate"
    rt.start(eng, functools.partial(train_steady, gate=str(gate)))
    try:
        wait_for_budget(eng, 0, 2, 60)  # and held before step 3 until the gate opens
        victim = rt.inventory.slots[eng.running[0][0][0]].worker
        old_run = f"{rt.runs[0].run_key}/0"
        assert client.run(_end_stream, rt._topic, workers=[victim])[victim]
        # the worker is alive: the old run's process must not train on beside the relaunch
        deadline = time.monotonic() + 60
        while old_run in client.run(_active, workers=[victim])[victim]:
            assert time.monotonic() < deadline, "the run cut off by the broken stream lives on"
            time.sleep(0.1)
        gate.touch()
        assert rt.wait(90)
    finally:
        gate.touch()
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


def train_short(config, trial):
    for step in trial.steps():
        time.sleep(0.5)
        trial.report(step=step, loss=1.0 / step)


def train_short_ending_while_blocked(config, trial, here):
    """train_short whose last report (and exit) wait until its worker's loop is blocked."""
    for step in trial.steps():
        time.sleep(0.5)
        if step >= trial.max_budget:
            wait_for(os.path.join(here, "blocked"))
        trial.report(step=step, loss=1.0 / step)
    with open(os.path.join(here, "pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(here, "pid.tmp"), os.path.join(here, "pid"))


def test_a_clean_end_while_the_worker_loop_is_busy_is_not_a_crash(client, tmp_path):
    """The process reports for the last time and exits (not reused) while its worker's event
    loop is blocked: its last report and exit must still come through, not "died with exit
    code 0"."""
    algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=3, num_trials=1, seed=0)
    eng, seen = watched_engine(algo)
    rt = DaskRuntime(client, checkpoint_dir=tmp_path / "ck", preload=(), warm_processes=1,
                     sample_interval=0.5, reuse_processes=False)
    rt.start(eng, functools.partial(train_short_ending_while_blocked, here=str(tmp_path)))
    try:
        wait_for_budget(eng, 0, 2, 60)
        victim = rt.inventory.slots[eng.running[0][0][0]].worker
        client.run(_busy_loop, str(tmp_path), workers=[victim])
        assert rt.wait(60)
    finally:
        rt.close()
    t = eng.trials[0]
    assert t.state is TrialState.COMPLETED and t.failures == 0, t.error
    assert [b for _, b, _ in t.results] == [1.0, 2.0, 3.0]


def test_an_os_error_in_the_launch_handler_fails_the_trial_instead_of_looping(client, tmp_path):
    """Rank 0's worker cannot pick a rendezvous port: that is the launch's error, not a lost
    worker, so the trial fails (and is not requeued forever)."""
    from tests.runtimes.test_dask_runtime import Gang

    algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=2, num_trials=1, seed=0)
    eng, seen = watched_engine(algo, Gang())
    client.run(_break_free_port)
    rt = DaskRuntime(client, checkpoint_dir=tmp_path, preload=(), warm_processes=1,
                     sample_interval=0.5)
    try:
        rt.start(eng, train_steady)
        assert rt.wait(60)
    finally:
        rt.close()
        client.run(_mend_free_port)
    failed = [e for e in seen if isinstance(e, ev.TrialFailed)]
    assert failed and not any(e.worker_lost for e in failed)
    assert len(failed) == 1  # max_failures=0: failed once, never requeued as "lost"
    assert eng.trials[0].state is TrialState.ERROR
    assert "Cannot assign requested address" in eng.trials[0].error


def train_slow_steps(config, trial, gate=None):
    """``gate``: trial 0 does not finish its step 2 before the path exists."""
    for step in trial.steps():
        if step > 1 and trial.trial_id == 0:
            wait_for(gate)
        time.sleep(1.5)
        trial.report(step=step, loss=1.0 / step)


def test_workers_sharing_one_process_each_keep_their_stream(tmp_path):
    """LocalCluster(processes=False), common in notebooks: two workers in one process must not
    take each other's stream (each opening would end the other's, forever)."""
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=None, resources={"GPU": 1},
                                       scheduler_kwargs={"dashboard_address": ":0"})
    c = distributed.Client(cluster, set_as_default=False)
    algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=3, num_trials=2, seed=0)
    eng, seen = watched_engine(algo)
    rt = DaskRuntime(c, checkpoint_dir=tmp_path, preload=(), warm_processes=1,
                     sample_interval=0.5)
    try:
        rt.start(eng, train_short)
        assert rt.wait(60)
    finally:
        rt.close()
        c.close()
        cluster.close()
    assert not [e for e in seen if isinstance(e, ev.TrialFailed)]
    assert all(t.state is TrialState.COMPLETED for t in eng.trials.values())


def test_workers_the_client_cannot_reach_are_driven_through_the_scheduler(
        client, tmp_path, monkeypatch):
    """A client that reaches only the scheduler (Dask Gateway, some Kubernetes set-ups): no
    direct stream opens, and trials still run, launched and reporting via the scheduler."""
    from nbtune.runtimes.dask.driver_side.links import WorkerLinks

    async def unreachable(self, address, timeout):
        raise OSError(f"{address} is not reachable from here")

    monkeypatch.setattr(WorkerLinks, "_open", unreachable)
    algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=3, num_trials=3, seed=0)
    eng, seen = watched_engine(algo)
    rt = DaskRuntime(client, checkpoint_dir=tmp_path, preload=(), warm_processes=1,
                     sample_interval=0.5)
    try:
        rt.start(eng, train_short)
        assert rt.wait(60)
        relayed = set(rt._links.relayed)
    finally:
        rt.close()
    assert relayed == set(client.scheduler_info()["workers"])
    assert not [e for e in seen if isinstance(e, ev.TrialFailed)]
    assert all(t.state is TrialState.COMPLETED for t in eng.trials.values())


# last: it kills a worker of the module's cluster
def test_a_worker_lost_after_finish_does_not_hang_the_experiment(client, tmp_path):
    """Stop the experiment, then kill the worker of a trial still finishing its step: the
    runtime must still finish (nothing will ever come from that worker)."""
    import os
    import signal

    algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=20, num_trials=2, seed=0)
    eng, seen = watched_engine(algo)
    # the grace outlasts the test and trial 0 never finishes its step 2 (the gate stays
    # shut): only its lost worker can end that run
    gate = tmp_path / "gate"
    rt = DaskRuntime(client, checkpoint_dir=tmp_path / "ck", preload=(), warm_processes=1,
                     sample_interval=0.5, shutdown_grace=600.0)
    rt.start(eng, functools.partial(train_slow_steps, gate=str(gate)))
    try:
        wait_for_budget(eng, 0, 1, 60)
        victim = rt.inventory.slots[eng.running[0][0][0]].worker
        pid = client.run(os.getpid, workers=[victim])[victim]
        rt.submit(ev.ExperimentStopRequested(rt.clock.now()))
        deadline = time.monotonic() + 120
        while not rt.finishing:
            assert time.monotonic() < deadline, "the stop never reached Finish"
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        assert rt.wait(60), "the runtime waited forever for a run on a dead worker"
    finally:
        gate.touch()
        rt.close()
