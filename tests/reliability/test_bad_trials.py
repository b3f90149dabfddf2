"""What only a running trial can get wrong, on a real LocalCluster (the bad-input corpus).

Each case: trial 0 misbehaves, trials 1 and 2 are healthy. The bad trial
fails with an error that says what to fix, the others complete, and the
metrics the bad trial reported before it went wrong are kept. One cluster
for the module; each test its own runtime on it.
"""

from __future__ import annotations

import math
import os
import sys
import time

import cloudpickle
import pytest

import nbtune
from nbtune.core.trial import TrialState
from nbtune.runtimes.dask import DaskRuntime
from tests.dask_cluster import client  # noqa: F401  (the module's cluster)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SPACE = {"lr": nbtune.uniform(0.1, 1.0)}


def bad() -> bool:
    return os.environ["NBTUNE_TRIAL_ID"] == "0"


def run(client, fn, tmp_path, **kw):  # noqa: F811
    rt = DaskRuntime(client, checkpoint_dir=tmp_path, warm_processes=1, preload=(),
                     sample_interval=0.5)
    args = dict(algorithm="random", metric="loss", max_budget=3, num_trials=3, seed=0,
                runtime=rt)
    args.update(kw)
    exp = nbtune.tune(fn, SPACE, **args)
    try:
        exp.wait(120)
    finally:
        rt.close()
    return exp


def check_others_completed(exp):
    trials = exp.engine.trials
    assert trials[1].state is TrialState.COMPLETED and trials[2].state is TrialState.COMPLETED
    assert exp.engine.done


def healthy(config, trial):
    for step in trial.steps():
        trial.report(step=step, loss=config["lr"] / step)


def raises_mid_run(config, trial):
    for step in trial.steps():
        if bad() and step == 2:
            raise ValueError("the data loader ran dry")
        trial.report(step=step, loss=config["lr"])


def test_trial_that_raises_mid_run(client, tmp_path):  # noqa: F811
    exp = run(client, raises_mid_run, tmp_path)
    t = exp.engine.trials[0]
    assert t.state is TrialState.ERROR and "ValueError: the data loader ran dry" in t.error
    assert [b for _, b, _ in t.results] == [1.0]  # its step-1 report is kept
    check_others_completed(exp)


def never_reports(config, trial):
    if not bad():
        for step in trial.steps():
            trial.report(step=step, loss=config["lr"])


def test_trial_that_never_reports(client, tmp_path):  # noqa: F811
    exp = run(client, never_reports, tmp_path)
    t = exp.engine.trials[0]
    assert t.state is TrialState.ERROR
    assert "returned at step 0 before reaching the budget" in t.error
    assert "trial.report() returns True" in t.error  # what to write instead
    check_others_completed(exp)


def reports_nan(config, trial):
    for step in trial.steps():
        trial.report(step=step, loss=math.nan if bad() else (math.inf if step == 1 else 0.5))


def test_trial_that_reports_nan_or_inf(client, tmp_path):  # noqa: F811
    exp = run(client, reports_nan, tmp_path)
    assert all(t.state is TrialState.COMPLETED for t in exp.engine.trials.values())
    assert exp.best["trial_id"] != 0 and exp.best["loss"] == 0.5  # NaN never ranks best
    assert math.isnan(exp.engine.trials[0].results[-1][2]["loss"])  # but it is recorded


def wrong_metric(config, trial):
    for step in trial.steps():
        trial.report(step=step, **({"accuracy": 0.9} if bad() else {"loss": config["lr"]}))


def test_trial_that_reports_the_wrong_metric_name(client, tmp_path):  # noqa: F811
    exp = run(client, wrong_metric, tmp_path)
    t = exp.engine.trials[0]
    assert t.state is TrialState.ERROR
    assert "reported ['accuracy'] but not the experiment's metric 'loss'" in t.error
    check_others_completed(exp)


def text_metric(config, trial):
    for step in trial.steps():
        trial.report(step=step, loss="low" if bad() and step == 2 else config["lr"])


def test_trial_that_reports_a_non_numeric_metric(client, tmp_path):  # noqa: F811
    exp = run(client, text_metric, tmp_path)
    t = exp.engine.trials[0]
    assert t.state is TrialState.ERROR
    assert "reported loss='low' (str); the experiment's metric must be a number" in t.error
    assert [b for _, b, _ in t.results] == [1.0]
    check_others_completed(exp)


def hangs(config, trial):
    for step in trial.steps():
        if bad() and step == 2:
            time.sleep(3600)  # past run()'s wait: only the kill can end it in time
        trial.report(step=step, loss=config["lr"])


def test_trial_that_hangs_is_killed_after_trial_timeout(client, tmp_path):  # noqa: F811
    exp = run(client, hangs, tmp_path, trial_timeout=4)
    t = exp.engine.trials[0]
    assert t.state is TrialState.ERROR
    assert "past trial_timeout=4 s, and was killed" in t.error
    assert [b for _, b, _ in t.results] == [1.0]
    check_others_completed(exp)


def test_trial_that_raises_at_import(client, tmp_path):  # noqa: F811
    mod = tmp_path / "needs_driver_env.py"
    mod.write_text(
        "import os\n"
        "if 'NBTUNE_TRIAL_ID' in os.environ:\n"
        "    raise ImportError('this module only imports in the notebook')\n"
        "def train(config, trial):\n"
        "    for step in trial.steps():\n"
        "        trial.report(step=step, loss=1.0)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import needs_driver_env

        with pytest.raises(nbtune.experiment.TrialsFailed,
                           match="ImportError: this module only imports in the notebook"):
            run(client, needs_driver_env.train, tmp_path / "ck")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("needs_driver_env", None)


def test_gpu_mode_on_a_cluster_without_gpus(client):  # noqa: F811
    rt = DaskRuntime(client, gpus=True, warm_processes=0, preload=())
    with pytest.raises(RuntimeError, match="offers no GPUs to run trials on"):
        rt.connect()
    assert client.status == "running"  # the user's cluster is left alone


def test_gpu_request_larger_than_any_worker_and_one_that_fits(client, tmp_path):  # noqa: F811
    with pytest.raises(Exception, match=r"gpus_per_trial=3 asks for more GPUs than the cluster "
                                        r"has \(2; on CPU each Dask worker stands for one\)"):
        run(client, raises_mid_run, tmp_path / "a", gpus_per_trial=3)
    assert client.status == "running"  # the user's cluster is left alone
    exp = run(client, healthy, tmp_path / "b", gpus_per_trial=2)  # Ray's resources={"gpu": 2}
    assert (exp.results()["state"] == "completed").all()
    spans = exp.allocations().groupby("trial_id")["gpu_id"].nunique()
    assert list(spans) == [2, 2, 2]  # every trial ran across both workers (DDP)


def test_cluster_address_that_does_not_answer():
    from nbtune.runtimes.dask.driver_side.cluster import DaskConnectError

    # its own connect_timeout, not the 30 s default (the error says which it waited)
    with pytest.raises(DaskConnectError,
                       match=r"no Dask scheduler answered at tcp://127.0.0.1:1 within 1 s"):
        DaskRuntime("tcp://127.0.0.1:1", connect_timeout=1).connect()


def test_unpicklable_training_function_fails_before_any_trial(client, tmp_path):  # noqa: F811
    import threading

    lock = threading.Lock()

    def locked(config, trial):
        with lock:
            trial.report(step=1, loss=1.0)

    rt = DaskRuntime(client, checkpoint_dir=tmp_path, warm_processes=0, preload=())
    with pytest.raises(TypeError, match="cannot be pickled"):
        nbtune.tune(locked, SPACE, metric="loss", max_budget=1, runtime=rt)
    rt.close()
