"""Input stalls on a real LocalCluster: a trial that waits on its data gets a second one beside it.

The training function sleeps most of each step (its "data loader") and
computes a little: the runtime's profiler measures its utilization with
psutil while it runs alone, ``allocator="bubbles"`` sees u well below 1 and
packs the trials waiting for a worker into that idle compute. Same seed with
``fifo`` and with ``bubbles`` on the same one-worker cluster: identical
configurations and reports, trials overlapping on the worker only with
``bubbles``. How much shorter the packed run is depends on the machine's load:
benchmarks/stall_packing.py measures it (medians of rounds).
"""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

import nbtune
from nbtune.core.space import uniform
from nbtune.runtimes.dask import DaskRuntime
from tests.dask_cluster import local_client

pytestmark = [pytest.mark.slow, pytest.mark.integration]
cloudpickle.register_pickle_by_value(sys.modules[__name__])

WAIT = 120


def waits_on_data(config, trial):
    """Each step: 0.3 s waiting on I/O, ~0.03 s of computing."""
    for step in trial.steps():
        for _ in range(2):
            time.sleep(0.15)
            t = time.process_time()
            while time.process_time() - t < 0.015:
                pass
        if trial.report(step=step, loss=(config["x"] - 0.3) ** 2 + 1.0 / step):
            return


def run(client, allocator):
    # as many warm trial processes as the stall can hold (1/u ≤ 4): a cold one starts in seconds
    rt = DaskRuntime(client, preload=(), warm_processes=4, sample_interval=0.2)
    exp = nbtune.tune(waits_on_data, {"x": uniform(0, 1)}, algorithm="random", num_trials=8,
                      max_budget=3, metric="loss", seed=1, allocator=allocator, runtime=rt,
                      validate=True)
    try:
        assert rt.wait(WAIT), f"{allocator}: the experiment did not end in {WAIT} s"
    finally:
        rt.close()
    return exp


def outcome(exp):
    return [(t.config, t.state.value, [(b, m) for _, b, m in t.results])
            for t in sorted(exp.engine.trials.values(), key=lambda t: t.trial_id)]


def most_at_once(exp) -> int:
    log = exp.engine.ledger.log
    return max(sum(o.start <= r.start < (o.end if o.end is not None else 1e18) for o in log)
               for r in log)


def test_a_data_waiting_trial_gets_a_second_one_packed_beside_it():
    with local_client(n_workers=1) as client:
        fifo = run(client, "fifo")
        packed = run(client, "bubbles")
    assert outcome(packed) == outcome(fifo)
    assert most_at_once(fifo) == 1
    assert most_at_once(packed) >= 2  # packed into the measured stall
    prof = packed.engine.hints["profiles"].get(
        packed.engine.hints["profiles"].signature(packed.engine.trials[0].config))
    assert prof.demand.compute < 0.5  # what the decision read: measured, mostly waiting
