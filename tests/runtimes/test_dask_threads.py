"""Thread mode on a real LocalCluster: trials in a thread of their worker, same protocol.

``DaskRuntime(execution="thread")`` runs the training function in the Dask
worker's own process (``nbtune.runtimes.dask.worker_side.threads``): the same ``trial``
API, reports and verdicts as in a trial process; an exception fails that
trial only; a stop is obeyed at the next report, a kill ends the run at once.
``execution="auto"`` measures and picks threads for tiny steps.
"""

from __future__ import annotations

import os
import sys
import time

import cloudpickle
import pytest

pytestmark = pytest.mark.integration
distributed = pytest.importorskip("distributed")
cloudpickle.register_pickle_by_value(sys.modules[__name__])

from nbtune.runtimes.dask import DaskRuntime  # noqa: E402
from tests.dask_cluster import client  # noqa: E402, F401 (client: a fixture)

# Ray's loop (report every epoch, no checkpoint, never checks) as the process-mode tests run it
from tests.runtimes.test_dask_semantics import EPOCHS, SPACE, ray_style  # noqa: E402

#: generous deadline for a wait that normally ends within seconds (a loaded CI box)
PATIENCE = 120.0


def run(client, tmp_path, fn, execution, algorithm="asha", **kw):  # noqa: F811
    import nbtune

    rt = DaskRuntime(client, checkpoint_dir=tmp_path / execution, preload=(), warm_processes=1,
                     sample_interval=0.5, execution=execution,
                     shutdown_grace=kw.pop("shutdown_grace", 30.0))
    try:
        exp = nbtune.tune(fn, SPACE, algorithm=algorithm, metric="loss", max_budget=EPOCHS,
                          num_trials=kw.pop("num_trials", 9), runtime=rt, validate=True,
                          seed=3, **({"eta": 3} if algorithm != "random" else {}), **kw)
        assert exp.wait(PATIENCE) and exp.done
        launched = dict(rt._driver.settings.execution.launched)
    finally:
        rt.close()
    return exp, launched


def errors(exp):
    return [t.error for t in exp.engine.trials.values() if t.state.value == "error"]


def test_thread_mode_runs_a_ray_style_loop_like_process_mode(client, tmp_path):  # noqa: F811
    """Under ASHA: 0 errors, every launch in a thread, and each trial's results equal the
    process run's (same seed: same configs; a step both runs trained reports the same loss)."""
    threaded, t_launched = run(client, tmp_path, ray_style, "thread")
    proc, p_launched = run(client, tmp_path, ray_style, "process")
    assert errors(threaded) == [] == errors(proc)
    assert t_launched["process"] == 0 and t_launched["thread"] >= 9
    assert p_launched["thread"] == 0
    a, b = threaded.engine.trials, proc.engine.trials
    assert {i: t.config for i, t in a.items()} == {i: t.config for i, t in b.items()}
    assert all(t.state.is_terminal for t in a.values())
    assert max(t.budget_used for t in a.values()) == EPOCHS  # trained on past the rungs
    assert any(t.state.value == "stopped" and t.budget_used < EPOCHS for t in a.values())
    for i in a:
        ra = {step: m["loss"] for _, step, m in a[i].results}
        rb = {step: m["loss"] for _, step, m in b[i].results}
        both = ra.keys() & rb.keys()
        assert ra and both and {s: ra[s] for s in both} == {s: rb[s] for s in both}
        assert sorted(ra) == [float(s) for s in range(1, len(ra) + 1)]  # nothing skipped


def test_a_thread_trial_waits_at_a_synchronous_rung_and_is_promoted(client, tmp_path):  # noqa: F811
    """Hyperband: a trial with no checkpoint is held in ``report`` (in its thread) at its
    rung until promoted (``go``) or stopped, as a trial process is."""
    exp, launched = run(client, tmp_path, ray_style, "thread", "hyperband")
    trials = exp.engine.trials.values()
    assert errors(exp) == [] and launched["process"] == 0
    assert all(t.state.is_terminal for t in trials)
    assert max(t.budget_used for t in trials) == EPOCHS
    assert any(1 < t.budget_used < EPOCHS for t in trials)  # promoted once, stopped after
    assert exp.engine.held == {}


def raising(config, trial):
    for epoch in range(1, EPOCHS + 1):
        if config["lr"] > 0.5 and epoch == 2:
            raise ZeroDivisionError(f"bad lr {config['lr']}")
        trial.report(epoch, loss=config["lr"] + 1.0 / epoch)


def test_an_exception_in_thread_mode_fails_that_trial_only(client, tmp_path):  # noqa: F811
    workers = set(client.scheduler_info()["workers"])
    exp, _ = run(client, tmp_path, raising, "thread", algorithm="random", num_trials=8,
                 max_failures=0)
    trials = exp.engine.trials.values()
    bad = [t for t in trials if t.config["lr"] > 0.5]
    assert bad and all(t.state.value == "error" and "ZeroDivisionError: bad lr" in t.error
                       for t in bad)
    good = [t for t in trials if t.config["lr"] <= 0.5]
    assert good and all(t.state.value == "completed" and t.budget_used == EPOCHS for t in good)
    assert set(client.scheduler_info()["workers"]) == workers  # no worker died or restarted


def endless(config, trial):
    """Reports every few ms for ever, until told: only a stop at a report ends it."""
    step = 0
    while True:
        step += 1
        time.sleep(0.005)
        if trial.report(step, loss=1.0 / step):
            return


def test_a_stop_reaches_a_thread_trial_at_its_next_report(client, tmp_path):  # noqa: F811
    import nbtune

    rt = DaskRuntime(client, checkpoint_dir=tmp_path / "c", preload=(), warm_processes=1,
                     execution="thread")
    try:
        exp = nbtune.tune(endless, SPACE, algorithm="random", metric="loss", max_budget=10**6,
                          num_trials=1, runtime=rt, seed=1)
        deadline = time.monotonic() + PATIENCE
        while not exp.engine.trials or exp.engine.trials[0].budget_used < 5:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        exp.stop_trial(0)
        assert exp.wait(PATIENCE)  # the trial never ends by itself: only the stop ended it
        t = exp.engine.trials[0]
        assert t.state.value in ("stopped", "completed") and 5 <= t.budget_used < 10**6
        assert errors(exp) == []
    finally:
        rt.close()


def silent_until(flag):
    """A training function that works, without a report, until ``flag`` (a path) exists: a
    thread no stop can reach in the meantime."""

    def silent(config, trial):
        deadline = time.monotonic() + 10 * PATIENCE  # never outlive the test by much
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.01)
        trial.report(1, loss=1.0)

    return silent


def test_a_kill_ends_a_thread_run_at_once_though_the_thread_runs_on(client, tmp_path):  # noqa: F811
    """After Finish's grace the run is killed: the driver is told at once (a thread cannot be
    killed; it is dropped and raises at its next report), so the experiment ends."""
    import nbtune

    flag = tmp_path / "let-it-report"
    rt = DaskRuntime(client, checkpoint_dir=tmp_path / "k", preload=(), warm_processes=1,
                     execution="thread", shutdown_grace=0.2)
    try:
        exp = nbtune.tune(silent_until(str(flag)), SPACE, algorithm="random", metric="loss",
                          max_budget=1, num_trials=1, runtime=rt, seed=1)
        deadline = time.monotonic() + PATIENCE
        while not rt.runs or not next(iter(rt.runs.values())).started:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        exp.stop()
        # the experiment ends while its thread still works: the thread cannot end before the
        # flag below, so only the kill can have ended the run
        assert exp.wait(PATIENCE)
        assert not flag.exists() and exp.engine.trials[0].results == []
    finally:
        flag.touch()  # the dropped thread may go on to its report (and raise there)
        rt.close()


def instant(config):
    """Ray's loop with steps of microseconds: a process's ~0.4 ms per report is most of it."""
    from nbtune import report

    for epoch in range(1, EPOCHS + 1):
        report({"loss": config["lr"] + 1.0 / epoch})


def test_auto_measures_and_runs_tiny_steps_in_threads(client, tmp_path):  # noqa: F811
    """auto: a runtime's first experiment runs trials in processes and, once it ended,
    the overhead of a process is measured on a worker; in the next experiment the first
    trials measure the work per report, and tiny steps then go to threads."""
    import time

    import nbtune

    rt = DaskRuntime(client, checkpoint_dir=tmp_path / "a", preload=(), warm_processes=1,
                     execution="auto", keep=True)
    try:
        first = nbtune.tune(ray_style, SPACE, algorithm="random", metric="loss", max_budget=2,
                            num_trials=2, runtime=rt, seed=2)
        assert first.wait(PATIENCE)
        assert rt._driver.settings.execution.launched["thread"] == 0  # not measured yet
        deadline = time.monotonic() + PATIENCE
        while rt.process_overhead is None:
            assert time.monotonic() < deadline, "the process overhead was never measured"
            time.sleep(0.1)
        exp = nbtune.tune(instant, SPACE, algorithm="asha", metric="loss", max_budget=EPOCHS,
                          num_trials=16, runtime=rt, validate=True, seed=3, eta=3)
        assert exp.wait(PATIENCE)
        choice = rt._driver.settings.execution
        assert errors(exp) == []
        # the overhead measured after the first experiment is what this one decides with, and
        # its reports brought their work intervals; whether threads then pay off on this
        # machine is a measurement (benchmarks/tiny_trials.py), and `choose` has unit tests
        assert choice.overhead == rt.process_overhead and len(choice.work) > 0
        assert choice.launched["process"] >= 1  # the first trials measure in processes
        assert sum(choice.launched.values()) >= 16
    finally:
        rt.close()


def spins(config, trial):
    """A CPU-bound step, as training is (its thread holds the GIL most of the time)."""
    for step in trial.steps():
        t = time.thread_time()
        while time.thread_time() - t < 0.3:
            pass
        trial.report(step, loss=config["lr"] / step)


def test_a_thread_trials_cpu_share_is_measured(client, tmp_path):  # noqa: F811
    """The utilization panel and the profiler read a thread trial's own CPU time: before, only
    trial processes were measured and a worker busy with thread trials read 0 %."""
    exp, launched = run(client, tmp_path, spins, "thread", algorithm="random", num_trials=2)
    assert launched["thread"] == 2 and errors(exp) == []
    u = exp.utilization()
    # a spinning thread's CPU time is read (before: 0 %). How much of its stand-in it fills
    # depends on the machine's load, so only "measured" is asserted here
    assert u["util"].max() > 0.0, u
