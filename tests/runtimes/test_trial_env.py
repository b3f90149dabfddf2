"""Trial processes are born without the malloc setting Dask's nanny gives its workers.

``MALLOC_TRIM_THRESHOLD_=65536`` (``distributed.nanny.pre-spawn-environ``) is read by
glibc once per process and made vs_peers' CNN train 1.33x slower in a trial process than
in the driver (:mod:`nbtune.runtimes.dask.trial_env`). What glibc read is the
environment the process was *executed* with, ``/proc/self/environ``: for a forked
process the fork server's, for a spawned one its own. Both are checked, on the two real
paths a run takes (a cluster nbtune starts, with a fork server; a user's cluster, whose
workers spawn), with the workers themselves shown to hold the nanny's value.
"""

from __future__ import annotations

import os
import sys

import cloudpickle
import pytest

from nbtune.runtimes.dask.trial_env import DASK_MEMORY_KEYS, trial_env, worker_env

cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEY = "MALLOC_TRIM_THRESHOLD_"


def test_the_nanny_value_is_dropped_and_a_users_own_kept(monkeypatch):
    import dask

    pytest.importorskip("distributed")  # its defaults in the config
    assert KEY in DASK_MEMORY_KEYS
    nanny = str(dask.config.get("distributed.nanny.pre-spawn-environ")[KEY])
    monkeypatch.delenv(KEY, raising=False)
    assert KEY not in worker_env()  # the fork server: not born with the nanny's value
    assert worker_env()["OMP_NUM_THREADS"] == "1"  # the rest of the nanny's environment stays
    monkeypatch.setenv(KEY, "1048576")
    assert worker_env()[KEY] == "1048576"  # the user's own goes on
    assert trial_env({KEY: nanny, "A": "1"}) == {"A": "1"}
    assert trial_env({KEY: "1048576", "A": "1"}) == {KEY: "1048576", "A": "1"}


def born_with(config, trial):
    """Whether the process was executed with the key (what glibc read), and sees it now."""
    with open("/proc/self/environ", "rb") as f:
        born = f"{KEY}=".encode() in f.read()
    trial.report(1, loss=0.0, born=float(born), sees=float(KEY in os.environ),
                 parent=os.getppid())


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/environ")
@pytest.mark.parametrize("own_cluster", [True, False], ids=["forked", "spawned"])
def test_trial_processes_are_not_born_with_the_nannys_malloc_setting(own_cluster, tmp_path,
                                                                     monkeypatch):
    import nbtune
    from nbtune import uniform
    from nbtune.runtimes.dask import DaskRuntime
    from tests.dask_cluster import local_client

    monkeypatch.delenv(KEY, raising=False)  # the driver's environment has none of its own
    kw = dict(warm_processes=1, preload=(), checkpoint_dir=tmp_path / "ckpt")

    def run(rt):
        exp = nbtune.tune(born_with, {"x": uniform(0, 1)}, algorithm="random", metric="loss",
                          max_budget=1, num_trials=2, runtime=rt, seed=0)
        assert KEY in next(iter(rt.client.run(lambda: dict(os.environ)).values()))  # the worker's
        forks = rt._forks.proc.pid if rt._forks is not None else None
        assert exp.wait(120)
        return forks, [m for t in exp.engine.trials.values() for _, _, m in t.results]

    if own_cluster:
        rt = DaskRuntime(n_workers=1, **kw)
        try:
            forks, got = run(rt)
            assert {m["parent"] for m in got} == {forks}  # forked there
        finally:
            rt.close()
    else:
        with local_client(n_workers=1) as client:
            rt = DaskRuntime(client, **kw)
            try:
                forks, got = run(rt)
                assert forks is None  # a user's cluster: its workers spawn
            finally:
                rt.close()
    assert len(got) == 2 and all(m["born"] == 0.0 and m["sees"] == 0.0 for m in got), got


EARLY = """
import sys
from nbtune.runtimes.dask.forkserver_side import forkserver as fs
fs.start_early(("json",))
print("dask imported by start_early:", "dask" in sys.modules)
import distributed  # what the runtime imports next: the config's values
from nbtune.runtimes.dask.trial_env import nanny_env
forks = fs.take_early(("json",))
print("defaults == config:", fs.nanny_env(read_config=False) == nanny_env() or "n/a")
print("taken:", forks is not None)
forks.close()
fs.start_early(("json",))
import dask
with dask.config.set({"distributed.nanny.pre-spawn-environ": {"OMP_NUM_THREADS": 2}}):
    print("taken under another config:", fs.take_early(("json",)) is not None)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork server: Linux")
def test_the_early_fork_server_starts_without_dask_and_a_config_that_differs_replaces_it():
    """``tune()`` starts the fork server before anything imports ``dask`` (0.15 s of the
    start-up's critical path): it assumes distributed's default nanny environment, and
    one taken under a config that sets another (OpenMP's threads) is not used."""
    import subprocess

    pytest.importorskip("distributed")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", EARLY], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": root}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "dask imported by start_early: False", "defaults == config: True", "taken: True",
        "taken under another config: False"], out.stdout
