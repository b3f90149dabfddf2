"""exp.wait() in a script: a status line every few seconds; Ctrl-C says the run goes on."""

from __future__ import annotations

import io
import sys
import time

import cloudpickle
import pytest

from nbtune.core.space import uniform

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.integration
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def slow(config, trial):

    for step in range(1, 4):
        time.sleep(0.4)
        trial.report(step, loss=config["lr"] / step)


def test_wait_prints_status_lines_and_the_last_one_is_final(tmp_path):
    import nbtune
    from nbtune.runtimes.dask import DaskRuntime
    from nbtune.waiting import wait_with_progress

    rt = DaskRuntime(n_workers=2, checkpoint_dir=tmp_path, preload=(), warm_processes=1)
    try:
        exp = nbtune.tune(slow, {"lr": uniform(0.1, 1.0)}, algorithm="random", metric="loss",
                          max_budget=3, num_trials=4, runtime=rt, seed=0, name="prog")
        out = io.StringIO()
        assert wait_with_progress(exp, 120, 0.5, out)
    finally:
        rt.close()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3  # a line every 0.5 s of a run of ~2.5 s, and the final one
    assert all(line.startswith("[") and "prog: " in line for line in lines)
    assert "4/4 ended, 0 running" in lines[-1] and "best loss" in lines[-1]
    best = exp.best
    assert f"(trial {best['trial_id']})" in lines[-1]


def test_ctrl_c_during_the_wait_says_the_experiment_goes_on(tmp_path):
    import nbtune
    from nbtune.runtimes.dask import DaskRuntime
    from nbtune.waiting import wait_with_progress

    rt = DaskRuntime(n_workers=2, checkpoint_dir=tmp_path, preload=(), warm_processes=1)
    try:
        exp = nbtune.tune(slow, {"lr": uniform(0.1, 1.0)}, algorithm="random", metric="loss",
                          max_budget=3, num_trials=4, runtime=rt, seed=0, name="ctrlc")
        real_wait = exp.runtime.wait
        calls = {"n": 0}

        def interrupted(timeout=None):  # Ctrl-C arrives in the main thread's blocking wait
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt
            return real_wait(timeout)

        exp.runtime.wait = interrupted
        out = io.StringIO()
        with pytest.raises(KeyboardInterrupt):
            wait_with_progress(exp, 120, 0.3, out)
        assert "goes on in the background" in out.getvalue()
        exp.runtime.wait = real_wait
        exp.wait(120, progress=False)  # it did go on: every trial ends
        assert exp.done and len(exp.results()) == 4
        assert set(exp.results()["state"]) == {"completed"}
    finally:
        rt.close()
