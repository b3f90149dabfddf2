"""Barrier filling on a real two-worker LocalCluster: same results, no hang, real fill.

SHA's rungs wait for their stragglers (a step takes 0.005–0.065 s by config);
with ``fill_barriers=True`` the engine continues the rung's likely promotions
on the workers that idle meanwhile. A promotion goes on only where it paused.
Trial 0, the first launched, is the straggler that says so for certain: its first
step waits for a gate the test opens only once the other worker has run the rest
of rung 0 (and, filling, once a fill launch started), so the idle worker holds
paused likely promotions whatever the machine's load (timing alone once let the
last two reports of a rung arrive together, and nothing was filled). Each test runs the same seed with and
without filling: the configurations and every report (budget and metrics)
must be the same, each run must end within its timeout, and the fill launches
in ``engine.fill_log`` must have held an idle worker in the allocation log.
Two training functions: one that checkpoints (a fill launch resumes from the
rung's checkpoint) and one that does not (its process waits at the rung and
goes on in place).
"""

from __future__ import annotations

import os
import sys
import time

import cloudpickle
import pytest

import nbtune
from nbtune.core.space import uniform
from nbtune.runtimes.dask import DaskRuntime
from tests.dask_cluster import local_client

pytestmark = pytest.mark.integration
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SPACE = {"m": uniform(0.0, 1.0)}
WAIT = 60
#: the file trial 0's first step waits for (set per run; pickled by value with the functions)
GATE = ""


def _straggle(trial, step):
    while trial.trial_id == 0 and step == 1 and not os.path.exists(GATE):
        time.sleep(0.02)


def _loss(config, w, step):
    return (config["m"] - 0.35) ** 2 + 1.0 / (1.0 + w + step)


def train_checkpointed(config, trial):
    state = trial.restore() or {"w": 0.0}
    for step in trial.steps():
        _straggle(trial, step)
        time.sleep(0.005 + 0.06 * config["m"])
        state["w"] += config["m"]
        trial.checkpoint(state, step=step)
        if trial.report(step=step, loss=_loss(config, state["w"], step), w=state["w"]):
            return


def train_in_place(config, trial):
    w = 0.0
    for step in trial.steps():
        _straggle(trial, step)
        time.sleep(0.005 + 0.06 * config["m"])
        w += config["m"]
        if trial.report(step=step, loss=_loss(config, w, step), w=w):
            return


@pytest.fixture(scope="module")
def client():
    with local_client() as c:
        yield c


def rung0_reported(exp) -> int:
    """Trials other than 0 that reported (read from the test's thread: retried if it moved)."""
    for _ in range(100):
        try:
            return sum(1 for t in list(exp.engine.trials.values()) if t.trial_id and t.results)
        except RuntimeError:  # the driver thread added a trial meanwhile
            continue
    return 0


def run(client, tmp_path, fn, fill):
    global GATE
    gate = tmp_path / f"gate-{fill}"
    GATE = str(gate)
    rt = DaskRuntime(client, checkpoint_dir=tmp_path / f"ckpt-{fill}", preload=(),
                     warm_processes=1, sample_interval=0.25)
    exp = nbtune.tune(fn, SPACE, algorithm="sha", metric="loss", num_trials=27, max_budget=9,
                      seed=3, allocator="auto", runtime=rt, fill_barriers=fill, validate=True)
    try:
        # the rest of rung 0 done on the other worker, and (filling) its idle time filled
        end = time.monotonic() + WAIT
        while not (rung0_reported(exp) >= 26 and (not fill or exp.engine.fill_log)):
            assert time.monotonic() < end and not exp.done, (
                f"fill_barriers={fill}: rung 0 did not reach trial 0's gate in {WAIT} s")
            time.sleep(0.05)
        gate.touch()
        assert rt.wait(WAIT), f"fill_barriers={fill}: the experiment did not end in {WAIT} s"
    finally:
        rt.close()
    return exp


def outcome(exp):
    return [(t.trial_id, t.config, t.state.value, [(b, m) for _, b, m in t.results])
            for t in sorted(exp.engine.trials.values(), key=lambda t: t.trial_id)]


@pytest.mark.parametrize("fn", [train_checkpointed, train_in_place])
def test_filling_keeps_results_and_runs_on_idle_workers(client, tmp_path, fn):
    off = run(client, tmp_path, fn, False)
    on = run(client, tmp_path, fn, True)
    assert outcome(on) == outcome(off), (outcome(on), outcome(off))
    assert not off.engine.fill_log
    eng = on.engine
    assert eng.fill_log, "no fill launch: the rungs never left a worker idle"
    log = eng.ledger.log
    for rec in eng.fill_log:
        mine = log[rec.log_index:rec.log_index + len(rec.placement)]
        assert [(r.trial_id, r.gpu_id) for r in mine] == [(rec.trial_id, g)
                                                        for g, _ in rec.placement]
        assert all(r.start == rec.time for r in mine)
        # the worker was idle: no other trial held it when the fill work started
        for r in mine:
            assert not any(o.gpu_id == r.gpu_id and o.trial_id != rec.trial_id
                           and o.start <= r.start and (o.end is None or o.end > r.start)
                           for o in log)
    # every speculation was settled when its rung closed: adopted (a winner: its work counted)
    # or retired (a straggler displaced it: its work dropped, its worker given back)
    assert all(rec.outcome in ("adopted", "retired", "yielded") for rec in eng.fill_log), \
        eng.fill_log
    held = sum((eng.time if r.end is None else r.end) - r.start
               for rec in eng.fill_log for r in log[rec.log_index:rec.log_index + 1])
    assert held > 0, eng.fill_log
