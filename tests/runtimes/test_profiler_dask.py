"""The profiler on a real LocalCluster: CPU workers measure c = 1, and the job history persists.

Two worker processes on this machine's cores, each standing for one "GPU".
Packing two CPU-bound trials onto one worker's slot puts two processes on
one core's worth of work: each runs at half speed, so packing gains nothing
(O^2 ≈ 0) and the measured c is 1; the next run of the same function reads
that from the store and water-filling never packs. The machine is shared
with other sessions (load averages of 15 on 2 cores were seen), and the
kernel's per-process fair share would then hand two packed processes more
of the machine than one, and its load swings from one run to the next: so
each worker's core is a lock (one file per worker process) taken in 10 ms
slices, 0.2 s per step: a core that two trials can only take turns on.
"""

from __future__ import annotations

import sys

import cloudpickle
import pytest

import nbtune
from nbtune.core.space import loguniform

pytest.importorskip("distributed")

from nbtune.runtimes.dask import DaskRuntime  # noqa: E402
from nbtune.store import SqlProfileStore, open_store  # noqa: E402
from tests.dask_cluster import local_client  # noqa: E402

SPACE = {"lr": loguniform(1e-3, 1e-1)}
pytestmark = pytest.mark.slow
# by value: a warm process that never ran this module's function would import it (and
# pytest, distributed...) first, ~2.5 s during which its packed partner ran alone, and
# no packed interval was timed (a CI flake)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def train_cpu(config, trial):
    """One step at a time on its worker's core; it checkpoints, as water-filling resizes trials."""
    import fcntl
    import os
    import tempfile
    import time

    start = trial.restore() or 0
    core = os.path.join(tempfile.gettempdir(), f"nbtune-test-core-{os.getppid()}")
    planned = time.time()  # when this trial's last slice was due to end
    for step in range(start + 1, 6):
        for _ in range(20):  # a step's compute in 10 ms slices, as a core time-slices
            # this worker's one core: each slice is booked after the last one booked, so
            # trials sharing the core take turns in request order (a plain flock held for
            # the slice is not fair: on a loaded machine one trial starved its partner).
            # A slice follows the one this trial had planned, not its late wake-up, so a
            # loaded machine's oversleeping does not slow a trial that runs alone
            with os.fdopen(os.open(core, os.O_RDWR | os.O_CREAT), "r+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                booked = float(f.read() or 0.0)
                begin = max(booked, planned, time.time() - 0.05)
                f.seek(0)
                f.truncate()
                f.write(repr(begin + 0.01))
                fcntl.flock(f, fcntl.LOCK_UN)
            planned = begin + 0.01
            time.sleep(max(planned - time.time(), 0.0))
        trial.checkpoint(step, step=step)
        if trial.report(step, loss=config["lr"] / step):
            return


@pytest.fixture(scope="module")
def client():
    with local_client() as c:
        yield c


def _tune(client, tmp_path, db, allocator, trials, seed):
    rt = DaskRuntime(client, checkpoint_dir=tmp_path / f"ckpt{seed}", preload=(),
                     warm_processes=2, sample_interval=0.25)
    exp = nbtune.tune(train_cpu, SPACE, algorithm="random", metric="loss", max_budget=5,
                      num_trials=trials, allocator=allocator, runtime=rt, seed=seed, store=db,
                      allocator_options={"c": 2} if allocator == "waterfill" else None)
    try:
        assert exp.wait(180), "the experiment did not finish in time"
    finally:
        rt.close()
    bad = {t.trial_id: (t.state.value, t.error) for t in exp.engine.trials.values()
           if t.state.value != "completed"}
    assert not bad, bad
    return exp, rt.profiler


def test_cpu_workers_measure_c_1_and_the_next_run_reads_it(client, tmp_path):
    db = tmp_path / "nb.db"
    _, prof = _tune(client, tmp_path, db, "fifo", 2, 0)  # alone: time, CPU share, memory
    p = prof.get("{}")
    assert p.unit_time and p.unit_time >= 0.18 and 1 in p.packing  # 20 slices of 10 ms
    assert 0.0 < p.demand.compute <= 1.0 and p.demand.memory_gb > 0.01  # (a loaded machine)
    exp, prof = _tune(client, tmp_path, db, "waterfill", 6, 1)  # packs 2 per worker first
    p = prof.get("{}")
    assert p.c_measured and p.packing[2] > 1.6 * p.packing[1]
    assert p.c == 1  # packing gains nothing
    stored = SqlProfileStore(open_store(db))
    assert len(stored) == 1
    exp, prof = _tune(client, tmp_path, db, "waterfill", 4, 2)  # starts knowing c = 1
    assert prof.get("{}").c == 1
    assert (exp.allocations().share == 1.0).all()  # never packed
