"""exp.wait() in a script: a status line every few seconds; Ctrl-C says the run goes on."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from nbtune.core.space import uniform

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.integration
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def slow_after(flag: str):
    """A training function that starts once ``flag`` (a path) exists, then works 1.2 s: the
    test decides when the run can end, so how many status lines come before it is known."""

    def slow(config, trial):
        deadline = time.monotonic() + 600  # never outlive the test by much
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.01)
        for step in range(1, 4):
            time.sleep(0.4)
            trial.report(step, loss=config["lr"] / step)

    return slow


class Lines(io.StringIO):
    """What wait_with_progress prints; once ``release_after`` lines are out, touches ``flag``."""

    def __init__(self, flag: Path, release_after: int) -> None:
        super().__init__()
        self.flag, self.release_after = flag, release_after

    def write(self, s: str) -> int:
        n = super().write(s)
        if self.getvalue().count("\n") >= self.release_after:
            self.flag.touch()
        return n


def test_wait_prints_status_lines_and_the_last_one_is_final(tmp_path):
    import nbtune
    from nbtune.console import wait_with_progress
    from nbtune.runtimes.dask import DaskRuntime

    flag = tmp_path / "go"
    rt = DaskRuntime(n_workers=2, checkpoint_dir=tmp_path, preload=(), warm_processes=1)
    try:
        exp = nbtune.tune(slow_after(str(flag)), {"lr": uniform(0.1, 1.0)}, algorithm="random",
                          metric="loss", max_budget=3, num_trials=4, runtime=rt, seed=0,
                          name="prog")
        out = Lines(flag, release_after=2)  # the trials start after two status lines
        assert wait_with_progress(exp, 600, 0.5, out)
    finally:
        flag.touch()
        rt.close()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3  # two lines while the trials waited, and the final one
    assert all(line.startswith("[") and "prog: " in line for line in lines)
    assert all("0/4 ended" in line for line in lines[:2])
    assert "4/4 ended, 0 running" in lines[-1] and "best loss" in lines[-1]
    best = exp.best
    assert f"(trial {best['trial_id']})" in lines[-1]


def test_ctrl_c_during_the_wait_says_the_experiment_goes_on(tmp_path):
    import nbtune
    from nbtune.console import wait_with_progress
    from nbtune.runtimes.dask import DaskRuntime

    flag = tmp_path / "go"
    rt = DaskRuntime(n_workers=2, checkpoint_dir=tmp_path, preload=(), warm_processes=1)
    try:
        exp = nbtune.tune(slow_after(str(flag)), {"lr": uniform(0.1, 1.0)}, algorithm="random",
                          metric="loss", max_budget=3, num_trials=4, runtime=rt, seed=0,
                          name="ctrlc")
        real_wait = exp.runtime.wait
        calls = {"n": 0}

        def interrupted(timeout=None):  # Ctrl-C arrives in the main thread's blocking wait
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt
            return real_wait(timeout)

        exp.runtime.wait = interrupted
        out = io.StringIO()
        with pytest.raises(KeyboardInterrupt):  # the trials wait for the flag: still running
            wait_with_progress(exp, 600, 0.3, out)
        assert "goes on in the background" in out.getvalue()
        exp.runtime.wait = real_wait
        flag.touch()
        assert exp.wait(600, progress=False)  # it did go on: every trial ends
        assert exp.done and len(exp.results()) == 4
        assert set(exp.results()["state"]) == {"completed"}
    finally:
        flag.touch()
        rt.close()
