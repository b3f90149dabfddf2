"""Failures are never silent: counted in the header and ``%tune_list``, raised when all failed."""

from __future__ import annotations

import warnings

import pytest
from IPython.core.interactiveshell import InteractiveShell

import nbtune
from nbtune import TrialsFailed
from nbtune.build import check_mode
from nbtune.experiment import error_line
from nbtune.ui import Dashboard
from tests.ui.conftest import SPACE

TRACEBACK = """Traceback (most recent call last):
  File "<cell>", line 3, in train
    raise ValueError("lr too large")
ValueError: lr too large

"""


def failing(rate: float) -> nbtune.SyntheticWorkload:
    return nbtune.SyntheticWorkload(SPACE, unit_time=1.0, failure_rate=rate,
                                    max_budget_hint=9, seed=1)


def run(rate: float, name: str) -> nbtune.Experiment:
    return nbtune.tune(failing(rate), SPACE, algorithm="random", metric="loss", max_budget=9,
                       num_trials=12, runtime="sim", name=name, seed=1)


def test_error_line_is_the_exception_not_the_traceback_header():
    assert error_line(TRACEBACK) == "ValueError: lr too large"
    assert error_line(None) == "" and error_line("") == ""


def test_some_trials_in_error_are_counted_in_header_status_and_repr(wire):
    exp = run(0.4, "some-fail")
    errors = int((exp.results()["state"] == "error").sum())
    assert 0 < errors < 12
    exp.wait()  # some trials worked: no exception
    assert exp.errored == errors and exp.state == "done" and not exp.failed
    dash = Dashboard(exp)
    assert f"{errors} errored" in dash.figures.header.text
    assert f"{errors} errored" in dash.status.value and "<b>done</b>" in dash.status.value
    assert f"{errors} errored" in repr(exp)
    shown = dict(zip(dash.figures.table_src.data["trial_id"],
                     dash.figures.table_src.data["error"], strict=True))
    for t in exp.engine.trials.values():
        assert shown[t.trial_id] == error_line(t.error)
    dash.close()


def test_a_traceback_shows_its_last_line_in_the_table(wire):
    exp = run(0.4, "traceback")
    tid = next(t.trial_id for t in exp.engine.trials.values() if t.error)
    exp.engine.trials[tid].error = TRACEBACK  # what a Dask trial's error holds
    dash = Dashboard(exp)
    shown = dict(zip(dash.figures.table_src.data["trial_id"],
                     dash.figures.table_src.data["error"], strict=True))
    assert shown[tid] == "ValueError: lr too large"
    assert exp.results().set_index("trial_id").loc[tid, "error"] == TRACEBACK  # on demand
    dash.close()


def test_every_trial_failed_ends_as_failed_and_wait_raises_the_first_error(wire):
    exp = run(1.0, "all-fail")
    assert exp.done and exp.failed and exp.state == "failed" and exp.errored == 12
    with pytest.raises(TrialsFailed, match="all 12 trials") as info:
        exp.wait()
    assert "simulated failure" in str(info.value) and len(info.value.errors) == 12
    assert isinstance(info.value, RuntimeError)
    dash = Dashboard(exp)
    assert "failed" in dash.figures.header.text and "12 errored" in dash.figures.header.text
    assert "<b>failed</b>" in dash.status.value and dash.progress.bar_style == "danger"
    dash.close()


def test_tune_list_counts_errors():
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nbtune")
    saved = dict(shell.user_ns)
    try:
        shell.user_ns.update(a=run(0.4, "list-some"), b=run(1.0, "list-all"))
        table = shell.run_line_magic("tune_list", "").set_index("name")
        assert table.loc["list-some", "errors"] == shell.user_ns["a"].errored > 0
        assert table.loc["list-some", "state"] == "done"
        assert table.loc["list-all", "errors"] == 12
        assert table.loc["list-all", "state"] == "failed"
    finally:
        shell.user_ns.clear()
        shell.user_ns.update(saved)


@pytest.mark.parametrize("metric, mode, warns", [
    ("accuracy", "min", True), ("val_acc", "min", True), ("loss", "max", True),
    ("val-loss", "max", True), ("accuracy", "max", False), ("loss", "min", False),
    ("score", "min", False), ("loss_over_accuracy", "min", False),
])
def test_a_metric_named_for_the_other_mode_warns(metric, mode, warns):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        msg = check_mode(metric, mode)
    assert (msg is not None) == warns and len(seen) == int(warns)
    if warns:
        assert f"mode={'max' if mode == 'min' else 'min'!r}" in msg and "--mode" in msg


def test_tune_warns_before_minimising_accuracy():
    wl = nbtune.SyntheticWorkload(SPACE, metric="accuracy", unit_time=1.0, max_budget_hint=3)
    with pytest.warns(UserWarning, match="'accuracy' is usually maximised"):
        nbtune.tune(wl, SPACE, algorithm="random", metric="accuracy", max_budget=3,
                    num_trials=2, runtime="sim")


def broken(config, trial):
    raise ValueError(f"lr {config['x']:.2f} is too large")


@pytest.mark.integration
def test_on_dask_every_trial_failing_raises_the_first_traceback(wire):
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(n_workers=2, preload=(), warm_processes=1, sample_interval=0.5)
    try:
        exp = nbtune.tune(broken, {"x": nbtune.uniform(0.0, 1.0)}, algorithm="random",
                          metric="loss", max_budget=3, num_trials=3, runtime=rt)
        with pytest.raises(TrialsFailed, match="ValueError: lr .* is too large"):
            exp.wait(120)
        assert exp.state == "failed"
        dash = Dashboard(exp)
        shown = set(dash.figures.table_src.data["error"])
        assert len(shown) == 3 and all(s.startswith("ValueError: lr ") for s in shown), shown
        assert all("Traceback" in e for e in exp.results()["error"])  # the full one, on demand
        dash.close()
    finally:
        rt.close()
