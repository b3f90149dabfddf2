"""The kernel slot on a real local cluster: the process that called ``tune()`` is one worker.

``DaskRuntime(kernel_slot=True)`` on a local CPU cluster it starts itself runs
trials in threads of the calling process from the first moment (the cluster's
``n - 1`` Dask workers join as they come up, each taking over an interim lane the
kernel ran for it meanwhile), through the same messages as any worker: the first
trials run there, later ones on both, a failing one fails
alone, the utilization of its lane is sampled, a kept runtime's next experiment
has it again, and a runtime closed while its cluster starts leaves nothing behind.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import cloudpickle
import pytest

pytestmark = pytest.mark.integration
distributed = pytest.importorskip("distributed")
cloudpickle.register_pickle_by_value(sys.modules[__name__])

import nbtune  # noqa: E402
from nbtune.runtimes.dask import DaskRuntime  # noqa: E402

PATIENCE = 120.0
SPACE = {"x": nbtune.uniform(0.0, 1.0)}


def pid_loop(config, trial):
    """Reports the process it runs in, with a little CPU work per step; with ``gate`` in
    its config, waits at step 2 for that file (so the workers are sure to join meanwhile)."""
    for step in trial.steps():
        while step == 2 and config.get("gate") and not os.path.exists(config["gate"]):
            time.sleep(0.02)
        t = time.process_time()
        while time.process_time() - t < 0.05:
            pass
        trial.report(step, loss=config["x"] / step, pid=float(os.getpid()))


def fails_on_kernel(config, trial):
    """Raises where it runs in the calling process (the kernel slot), trains elsewhere."""
    if os.getpid() == config["kernel_pid"]:
        raise RuntimeError("boom in the kernel")
    pid_loop(config, trial)


def pids(exp):
    return {int(m["pid"]) for t in exp.engine.trials.values() for _, _, m in t.results}


def wait_until(cond, timeout=PATIENCE):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_first_trials_run_in_the_calling_process_then_on_the_workers_too(tmp_path):
    rt = DaskRuntime(n_workers=2, kernel_slot=True, keep=True, checkpoint_dir=tmp_path,
                     sample_interval=0.3, warm_processes=1, preload=())
    gate = tmp_path / "go"
    try:
        exp = nbtune.tune(pid_loop, {**SPACE, "gate": nbtune.choice([str(gate)])},
                          algorithm="random", metric="loss", max_budget=6, num_trials=6, seed=0,
                          runtime=rt)
        # until its worker has joined, the kernel runs that worker's lane too (interim)
        wait_until(lambda: len(exp.engine.trials) >= 2 and all(
            exp.engine.trials[t].results for t in (0, 1)))
        assert {int(m["pid"]) for t in (exp.engine.trials[0], exp.engine.trials[1])
                for _, _, m in t.results} == {os.getpid()}
        wait_until(lambda: any(s.worker.startswith("tcp://")
                               for s in rt.inventory.slots.values()))
        # the worker has taken the interim lane's GPU id over: the same two slots
        assert sorted(rt.inventory.slots) == [0, 1]
        gate.touch()  # the worker has joined: the first trials, in the kernel, may go on
        assert exp.wait(PATIENCE) and exp.done
        trials = exp.engine.trials
        assert [t.error for t in trials.values() if t.error] == []
        assert all(t.state.value == "completed" for t in trials.values())
        kernel = [s for s in rt.inventory.slots.values() if s.worker.startswith("kernel://")]
        assert len(kernel) == 1 and len(rt.inventory.slots) == 2  # the kernel and one worker
        first = trials[0]
        assert {int(m["pid"]) for _, _, m in first.results} == {os.getpid()}
        assert os.getpid() in pids(exp) and len(pids(exp)) >= 2  # the worker's trials too
        util = rt.utilization(exp.engine)
        assert (util[util.gpu_id == kernel[0].gpu_id].util > 0).any()  # its lane is sampled

        # a kept runtime's next experiment: the cluster is up, the kernel slot is there again
        exp2 = nbtune.tune(fails_on_kernel, {**SPACE, "kernel_pid": nbtune.choice([os.getpid()])},
                           algorithm="random", metric="loss", max_budget=3, num_trials=6,
                           seed=1, runtime=rt)
        assert exp2.wait(PATIENCE) and exp2.done
        ended = list(exp2.engine.trials.values())
        failed = [t for t in ended if t.state.value == "error"]
        assert failed and all("boom in the kernel" in t.error for t in failed)
        done = [t for t in ended if t.state.value != "error"]
        assert done and all(t.state.value == "completed" for t in done)  # each failed alone
        assert os.getpid() not in pids(exp2)
    finally:
        rt.close()


def test_closed_while_its_cluster_starts_leaves_no_cluster(tmp_path):
    rt = DaskRuntime(n_workers=2, kernel_slot=True, checkpoint_dir=tmp_path, preload=())
    nbtune.tune(pid_loop, SPACE, algorithm="random", metric="loss", max_budget=50,
                num_trials=2, seed=0, runtime=rt)
    rt.close()
    wait_until(lambda: not any(t.name == "nbtune-dask-connect" for t in threading.enumerate()))
    assert rt.dask_cluster is None and rt.closed


@pytest.mark.parametrize("kw", [{"execution": "process"}, {"trial_timeout": 60.0}])
def test_no_kernel_slot_where_trials_need_a_process(tmp_path, kw):
    rt = DaskRuntime(n_workers=2, kernel_slot=True, checkpoint_dir=tmp_path, preload=(), **kw)
    try:
        exp = nbtune.tune(pid_loop, SPACE, algorithm="random", metric="loss", max_budget=2,
                          num_trials=2, seed=0, runtime=rt)
        assert exp.wait(PATIENCE)
        assert not any(s.worker.startswith("kernel://") for s in rt.inventory.slots.values())
        assert os.getpid() not in pids(exp)
    finally:
        rt.close()
