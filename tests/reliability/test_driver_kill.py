"""Driver restart: SIGKILL the process driving an experiment, then ``nbtune.resume``.

A child process runs ``nbtune.tune`` into a SQLite store (the recorder in
its background thread, as in a notebook) and is SIGKILLed at a random moment
of the run: whatever sat in the recorder's unflushed buffer is gone. The
experiment is resumed in this process and compared with an uninterrupted run
of the same seed: the same trials end the same way, no trial that had
completed is launched again, no metric recorded before the kill is lost, and
the algorithm's state (history, brackets, promotions, BOHB's model, PBT's
population, its random generator) ends identical.

The allocator is FIFO here on purpose. ``allocator="auto"`` decides from what
the profiler measured, and a restart re-reads those measurements from the job
history at a moment the uninterrupted run never had (every running trial
requeued at once): it may then probe packing where the other run did not, and
an order-dependent algorithm such as PBT goes another way from there (found by
this test; docs/reliability.rst). What a restart restores exactly is the
algorithm and every recorded result.
"""

from __future__ import annotations

import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import nbtune
from nbtune import SimRuntime, SyntheticWorkload, loguniform, uniform
from nbtune.core import events as ev
from nbtune.store import Store

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CASES = {
    "asha": {"num_trials": 60, "max_budget": 27},
    "bohb": {"num_trials": 40, "max_budget": 27},
    "pbt": {"num_trials": 8, "max_budget": 200},
    "hyperband": {"max_budget": 81},
}
STABLE = ["trial_id", "config/lr", "config/m", "state", "loss", "last", "budget_used",
          "failures", "error"]

DRIVER = """
import sys, json
import nbtune
from nbtune import SimRuntime, SyntheticWorkload, loguniform, uniform
wl = SyntheticWorkload({"lr": loguniform(1e-4, 1e-1), "m": uniform(0, 1)}, unit_time=10.0)
algo, kw = sys.argv[2], json.loads(sys.argv[3])
print("go", flush=True)
nbtune.tune(wl, algorithm=algo, metric="loss", seed=5, store=sys.argv[1], name=algo,
            runtime=SimRuntime(cluster=4), allocator="fifo", **kw).wait()
print("done", flush=True)
"""


def workload() -> SyntheticWorkload:
    return SyntheticWorkload({"lr": loguniform(1e-4, 1e-1), "m": uniform(0, 1)}, unit_time=10.0)


def events_stored(db: Path) -> int:
    import sqlite3

    if not db.exists():
        return 0
    con = sqlite3.connect(db, timeout=30)
    try:
        return con.execute("SELECT count(*) FROM events").fetchone()[0]
    except sqlite3.OperationalError:  # the tables are not there yet
        return 0
    finally:
        con.close()


def kill_mid_run(db: Path, algo: str, rng: random.Random) -> int:
    """Run the driver in a child and SIGKILL it once the store holds a random number of events.

    Watching the store rather than a clock puts the kill inside the run on a
    loaded machine too; the recorder's unflushed buffer dies with the child.
    Returns the number of events stored when the kill was sent.
    """
    import json

    target = rng.randint(20, 400)
    for _ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(db), algo, json.dumps(CASES[algo])],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
        while child.poll() is None and events_stored(db) < target:
            time.sleep(0.005)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        store = Store(db)
        state = store.experiment(algo).state if algo in store.names() else None
        if state == "running":
            store.close()
            return target
        if state == "done":  # the whole run fitted in fewer events: kill sooner
            store.delete(algo)
        store.close()
        target = max(target // 3, 5)
    raise AssertionError(f"never killed {algo} mid-run")


def canonical(v):
    """A comparable form that ignores dict and set order (a resumed run inserts keys in
    replay order), not what pickle bytes compare."""
    if isinstance(v, dict):
        return ("dict", sorted(((repr(k), canonical(x)) for k, x in v.items()),
                               key=lambda kv: kv[0]))
    if isinstance(v, set | frozenset):
        return ("set", sorted(repr(canonical(x)) for x in v))
    if isinstance(v, list | tuple):
        return (type(v).__name__, [canonical(x) for x in v])
    if hasattr(v, "bit_generator"):
        return ("rng", repr(v.bit_generator.state))
    if isinstance(v, random.Random):
        return ("random", v.getstate())
    if isinstance(v, float):
        return ("float", repr(v))  # NaN == NaN here, as in pickle bytes
    if isinstance(v, int | str | bool | bytes) or v is None:
        return v
    if hasattr(v, "__dict__"):
        return (type(v).__name__, canonical(vars(v)))
    return pickle.dumps(v)


def algorithm_state(algo) -> dict:
    """Everything the algorithm keeps, in a comparable form (its RNG by state)."""
    return {k: canonical(v) for k, v in vars(algo).items()}


@pytest.mark.parametrize("algo", sorted(CASES))
def test_sigkilled_driver_resumes_as_if_nothing_happened(tmp_path, algo):
    db = tmp_path / "nbtune.db"
    kill_mid_run(db, algo, random.Random(algo))
    store = Store(db)
    before = store.results(algo)
    curves_before = store.learning_curves(algo)
    completed = set(before.loc[before["state"] == "completed", "trial_id"])

    exp = nbtune.resume(algo, store=store, trainable=workload(), runtime=SimRuntime(cluster=4),
                        background=False)
    assert exp.done
    full = nbtune.tune(workload(), algorithm=algo, metric="loss", seed=5,
                       runtime=SimRuntime(cluster=4), allocator="fifo", **CASES[algo])
    pd.testing.assert_frame_equal(exp.results()[STABLE], full.results()[STABLE])

    log = store.event_log(algo)
    restart = max(i for i, (events, _) in enumerate(log)
                  if any(isinstance(e, ev.ExperimentStarted) for e in events))
    relaunched = {p["trial_id"] for _, cmds in log[restart:] for kind, p in cmds
                  if kind == "Launch"}
    assert not completed & relaunched, "a completed trial ran again"
    curves_after = store.learning_curves(algo)
    kept = curves_before.merge(curves_after, on=["trial_id", "budget"], how="left",
                               suffixes=("", "_after"), indicator=True)
    assert (kept["_merge"] == "both").all(), "a recorded metric was lost"
    assert algorithm_state(exp.engine.algorithm) == algorithm_state(full.engine.algorithm)
    assert store.experiment(algo).restarts == 1
