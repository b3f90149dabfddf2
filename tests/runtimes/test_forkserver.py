"""The fork server: torch imported once per machine, trial processes forked from it.

Real processes throughout: a fork server, warm pools asking it for processes,
jobs run through the trial process's protocol, a "worker" process killed, and a
local cluster started by ``DaskRuntime()`` whose ``tune()`` returns while the
warm processes still import.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import cloudpickle
import psutil
import pytest

from nbtune.runtimes.dask.forkserver_side import forkserver
from nbtune.runtimes.dask.forkserver_side.forkserver import ForkServer, worker_env
from nbtune.runtimes.dask.worker_side.pool import WarmPool, pool_ready_times
from tests.runtimes.test_warm_pool import run_one

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SLOW = ("tests.runtimes.slow_import",)  # 1 s to import: stands for torch


@pytest.fixture
def server():
    made: list[ForkServer] = []
    yield lambda *a: made.append(ForkServer(*a, worker_env())) or made[-1]
    for s in made:
        s.close()


def test_processes_are_forked_from_one_import_and_ready_at_once(server, tmp_path, monkeypatch):
    """Spawned, the second process imports for another second (test_warm_pool); forked, it is
    ready as soon as it exists (it imports nothing), and both are the fork server's children."""
    imports = tmp_path / "imports"
    monkeypatch.setenv("NBTUNE_TEST_IMPORT_LOG", str(imports))  # slow_import logs its importers
    fs = server(SLOW)
    pool = WarmPool(2, SLOW, fork_server=fs.address)
    try:
        t0 = time.monotonic()
        assert pool.wait_ready(60, need=1)
        assert time.monotonic() - t0 >= 1.0  # the server's one import
        assert pool.wait_ready(60)
        assert imports.read_text().split() == [str(fs.proc.pid)], "a process imported again"
        kids = [pool.take(refill=False), pool.take(refill=False)]
        assert [psutil.Process(c.proc.pid).ppid() for c in kids] == [fs.proc.pid] * 2
    finally:
        pool.shutdown()


def env_and_seed(config, trial):
    """What a forked process sees: the asking worker's environment and its own random seed."""
    import numpy as np

    trial.report(1, loss=0.0, env=os.environ.get("NBTUNE_TEST_WORKER_ENV", ""),
                 draw=float(np.random.random()), parent=os.getppid())


def test_a_forked_process_runs_jobs_in_the_workers_environment_with_its_own_seed(
        server, tmp_path, monkeypatch):
    import numpy  # noqa: F401  (in the server: forked processes share its random state)

    fs = server(("numpy",))
    monkeypatch.setenv("NBTUNE_TEST_WORKER_ENV", "set-after-the-server-started")
    pool = WarmPool(2, ("numpy",), fork_server=fs.address)
    try:
        assert pool.wait_ready(60)
        a, b = pool.take(refill=False), pool.take(refill=False)
        ra, rb = run_one(a, tmp_path, env_and_seed), run_one(b, tmp_path, env_and_seed)
        assert ra["env"] == rb["env"] == "set-after-the-server-started"
        assert ra["parent"] == rb["parent"] == fs.proc.pid
        assert ra["draw"] != rb["draw"]  # not the server's one random state
        c = pool.take(refill=False)
        c.proc.kill()
        assert c.proc.wait(60) == -signal.SIGKILL  # the exit code comes back from the server
    finally:
        pool.shutdown()


WORKER = textwrap.dedent("""
    import sys, time
    from nbtune.runtimes.dask.worker_side.pool import WarmPool
    pool = WarmPool(1, (), fork_server=sys.argv[1])
    assert pool.wait_ready(60)
    print(pool.take(refill=False).proc.pid, flush=True)
    time.sleep(120)
""")


def test_a_forked_process_exits_when_the_worker_that_asked_for_it_dies(server):
    """Its parent is the fork server, so it watches the worker's pid: a killed worker's trial
    processes must not live on."""
    fs = server(())
    worker = subprocess.Popen([sys.executable, "-c", WORKER, fs.address], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        pid = int(worker.stdout.readline())
        trial = psutil.Process(pid)
        assert trial.ppid() == fs.proc.pid and trial.is_running()
        worker.kill()
        worker.wait(10)
        deadline = time.monotonic() + 60
        while trial.is_running() and trial.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the trial process outlived its worker"
            time.sleep(0.05)
        assert fs.proc.poll() is None  # the server lives on for the other workers
    finally:
        worker.kill()


def test_the_pool_starts_processes_itself_when_the_fork_server_is_gone(server):
    fs = server(())
    fs.close()
    pool = WarmPool(1, (), fork_server=fs.address)
    try:
        assert pool.wait_ready(60)
        c = pool.take(refill=False)
        assert psutil.Process(c.proc.pid).ppid() == os.getpid()
        assert pool.fork_server is None
    finally:
        pool.shutdown()


def test_a_server_that_fails_removes_its_directory_so_workers_do_not_wait_for_it(
        tmp_path, monkeypatch):
    where = tmp_path / ("d" * 120)  # a Unix socket path this long cannot be bound
    where.mkdir()
    address = str(where / "sock")
    out = subprocess.run([sys.executable, "-m", "nbtune.runtimes.dask.forkserver_side.forkserver", address, ""],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode != 0 and not where.exists()
    # connect retries for an hour here: only the missing directory can end them before the
    # wait below gives up
    monkeypatch.setattr(forkserver, "CONNECT_TIMEOUT", 3600.0)
    pool = WarmPool(1, (), fork_server=address)
    try:
        assert pool.wait_ready(120)
        assert pool.fork_server is None  # started here instead
    finally:
        pool.shutdown()


def test_a_server_whose_driver_died_while_it_started_ends(tmp_path):
    """Orphaned before its loop began, it must not take its new parent (init) for the driver
    and live on with torch imported: the driver's pid is given on its command line."""
    (tmp_path / "s").mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = subprocess.run([sys.executable, "-m", "nbtune.runtimes.dask.forkserver_side.forkserver",
                          str(tmp_path / "s" / "sock"), "", str(dead.pid)],
                         timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0


def report_parent(config, trial):
    trial.report(1, loss=config["lr"], parent=os.getppid())


@pytest.mark.integration
def test_tune_returns_before_the_warm_processes_are_ready_and_the_first_trials_run(
        tmp_path, monkeypatch):
    """A local CPU cluster: the fork server starts before the workers and imports while they
    come up; ``tune()`` does not wait for it; the trials take its processes once ready."""
    import nbtune
    from nbtune import uniform
    from nbtune.runtimes.dask import DaskRuntime

    gate = tmp_path / "gate"
    monkeypatch.setenv("NBTUNE_TEST_GATE", str(gate))
    rt = DaskRuntime(n_workers=2, warm_processes=1, preload=("tests.runtimes.gated_import",),
                     checkpoint_dir=tmp_path / "ckpt", sample_interval=0.5)
    try:
        exp = nbtune.tune(report_parent, {"lr": uniform(0.1, 1.0)}, algorithm="random",
                          metric="loss", max_budget=1, num_trials=3, runtime=rt, seed=0)
        ready = rt.client.run(pool_ready_times)
        assert len(ready) == 2 and not any(ready.values()), "tune() waited for warm processes"
        forks = psutil.Process(rt._forks.proc.pid)
        workers = [psutil.Process(p) for p in rt.client.run(os.getpid).values()]
        assert all(forks.create_time() <= w.create_time() for w in workers)
        gate.touch()  # the preload's import ends: the trials get their processes
        assert exp.wait(120)
    finally:
        rt.close()
    assert [t.state.value for t in exp.engine.trials.values()] == ["completed"] * 3
    assert {m["parent"] for t in exp.engine.trials.values() for _, _, m in t.results} == {
        forks.pid}
    assert not forks.is_running() or forks.status() == psutil.STATUS_ZOMBIE  # closed with it


def pandas_seen(config, trial):
    """Whether the process was born with pandas (before anything in the job imported it)."""
    trial.report(1, loss=0.0, pandas=float("pandas" in sys.modules))


def test_trial_processes_are_born_with_pandas_spawned_or_forked(server, tmp_path):
    """``import nbtune`` no longer imports pandas; a trial process still does at its
    preload, once in the fork server (scikit-learn and data loading need it: imported in
    each first trial, it cost every warm process's first epoch)."""
    fs = server(("numpy",))
    forked = WarmPool(1, ("numpy",), fork_server=fs.address)
    spawned = WarmPool(1, ("numpy",))
    try:
        assert forked.wait_ready(60) and spawned.wait_ready(60)
        for pool in (forked, spawned):
            assert run_one(pool.take(refill=False), tmp_path, pandas_seen)["pandas"] == 1.0
    finally:
        forked.shutdown()
        spawned.shutdown()


def test_a_fork_server_started_early_is_taken_once_and_only_for_its_preload():
    """``tune()`` starts the fork server before importing ``distributed`` (start_early); the
    runtime's cluster start takes that one instead of starting another, if the preload agrees."""
    from nbtune.runtimes.dask.forkserver_side.forkserver import start_early, take_early

    start_early(SLOW)
    start_early(SLOW)  # a second call while one waits starts nothing
    first = take_early(SLOW)
    try:
        assert first is not None and first.proc.poll() is None
        assert take_early(SLOW) is None  # taken once
    finally:
        first.close()
    start_early(SLOW)
    other = take_early(("numpy",))
    assert other is None  # another preload: closed, not handed over
    assert take_early(SLOW) is None


def test_a_cold_tune_starts_the_fork_server_before_importing_distributed():
    code = textwrap.dedent("""
        import sys
        from nbtune.runtimes.dask.forkserver_side import forkserver
        seen = []
        real = forkserver.ForkServer.__init__
        def init(self, *a, **k):
            seen.append('distributed' in sys.modules)
            real(self, *a, **k)
        forkserver.ForkServer.__init__ = init
        from nbtune.runtimes.dask.driver_side.shared import shared_runtime
        rt = shared_runtime()
        assert seen == [False], seen
        early = forkserver.take_early(forkserver.DEFAULT_PRELOAD)
        assert early is not None  # not taken yet: the runtime takes it when it connects
        early.close()
        rt.close()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
