"""A worker that dies while the Dask runtime starts must not take the experiment down.

Killed while nbtune waits for the warm processes, it would make
``client.run(wait_pool_ready, ...)`` raise ``CommClosedError`` out of
``rt.start``. The kill is made deterministic by a preload whose import waits
for a gate file: the worker is killed once one of its warm processes exists
(so the runtime is inside the wait), and only then is the gate opened.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import psutil
import pytest

from nbtune.core.space import uniform
from nbtune.core.trial import TrialState
from nbtune.runtimes.dask import DaskRuntime
from tests.dask_cluster import local_client, watched_engine
from tests.engine.toy import OneShot

pytestmark = [pytest.mark.integration, pytest.mark.slow]
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def train_short(config, trial):
    for step in trial.steps():
        trial.report(step=step, loss=config["lr"] / step)


def kill_when_warming(pid: int, killed: threading.Event, gate: Path,
                      timeout: float = 120.0) -> None:
    """SIGKILL worker ``pid`` as soon as its warm pool has started a trial process (held in
    its preload until ``gate`` exists), then open the gate for the other workers' ones."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                kids = psutil.Process(pid).children(recursive=True)
                if any("nbtune.runtimes.dask.trial_side.trial_process" in " ".join(k.cmdline()) for k in kids):
                    os.kill(pid, signal.SIGKILL)
                    killed.set()
                    return
            except psutil.Error:
                return
            time.sleep(0.02)
    finally:
        gate.touch()


def test_worker_killed_while_warm_processes_start(tmp_path, monkeypatch):
    gate = tmp_path / "preload-gate"
    monkeypatch.setenv("NBTUNE_TEST_PRELOAD_GATE", str(gate))  # the workers' processes inherit it
    with local_client(2) as client:
        pids = client.run(os.getpid)
        victim_pid = sorted(pids.values())[0]
        killed = threading.Event()
        killer = threading.Thread(target=kill_when_warming, args=(victim_pid, killed, gate))
        killer.start()
        algo = OneShot({"lr": uniform(0.1, 1.0)}, metric="loss", max_budget=3, num_trials=4,
                       seed=0)
        eng, _ = watched_engine(algo)
        rt = DaskRuntime(client, checkpoint_dir=tmp_path / "ck", warm_processes=1,
                         preload=("tests.reliability.slow_preload",), sample_interval=0.5)
        try:
            rt.start(eng, train_short)  # raised CommClosedError before the fix
            killer.join()
            assert killed.is_set(), "the worker was never killed during start-up"
            assert rt.wait(120)
        finally:
            rt.close()
            killer.join()
    assert [t.state for t in eng.trials.values()] == [TrialState.COMPLETED] * 4
    assert all(t.failures == 0 for t in eng.trials.values())
