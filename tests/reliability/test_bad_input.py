"""Bad input, one case per test: a clear error that says what to fix, early.

Argument errors are checked on the simulator or before any runtime starts
(fast). What only a running trial can get wrong (it raises, never reports,
reports NaN, a wrong metric name or text, hangs) runs on a real LocalCluster
in :mod:`tests.reliability.test_bad_trials`; there the experiment and the
other trials must go on and nothing recorded may be lost.
"""

from __future__ import annotations

import pytest

import nbtune
from nbtune import SimRuntime, SyntheticWorkload, choice, loguniform, uniform
from nbtune.algorithms import AlgorithmError
from nbtune.core.space import SearchSpaceError
from nbtune.store import ExperimentExistsError, Store, StoreOpenError, UnknownExperimentError

SPACE = {"lr": uniform(0.0, 1.0)}


def wl() -> SyntheticWorkload:
    return SyntheticWorkload(SPACE, unit_time=1.0)


def train(config, trial):  # a valid training function (never run here)
    for step in trial.steps():
        trial.report(step=step, loss=config["lr"])


def tune_sim(**kw):
    args = dict(metric="loss", max_budget=3, num_trials=2, runtime=SimRuntime(cluster=2))
    args.update(kw)
    trainable = args.pop("trainable", wl())
    return nbtune.tune(trainable, **args)


# --------------------------------------------------------------- search spaces
def test_empty_search_space():
    with pytest.raises(SearchSpaceError, match="empty: give at least one hyperparameter"):
        nbtune.tune(train, {}, metric="loss", max_budget=3)


def test_search_space_that_is_not_a_mapping():
    with pytest.raises(SearchSpaceError, match="dict of name -> domain, got list"):
        nbtune.tune(train, [uniform(0, 1)], metric="loss", max_budget=3)


def test_missing_search_space_for_a_function():
    with pytest.raises(ValueError, match="give a search space"):
        nbtune.tune(train, metric="loss", max_budget=3)


def test_uniform_with_reversed_bounds():
    with pytest.raises(SearchSpaceError, match="low must be < high"):
        uniform(1.0, 0.0)


def test_loguniform_from_zero():
    with pytest.raises(SearchSpaceError, match="low must be > 0"):
        loguniform(0.0, 1.0)


def test_choice_of_nothing():
    with pytest.raises(SearchSpaceError, match="at least one option"):
        choice([])


# ------------------------------------------------------------------- names
def test_unknown_algorithm_name():
    with pytest.raises(AlgorithmError, match="unknown algorithm 'ashaa'; valid names: .*asha"):
        nbtune.tune(train, SPACE, algorithm="ashaa", metric="loss", max_budget=3)


def test_unknown_allocator_name():
    with pytest.raises(ValueError, match="unknown allocator 'nope'; choose one of"):
        nbtune.tune(train, SPACE, allocator="nope", metric="loss", max_budget=3)


def test_unknown_runtime_name():
    with pytest.raises(ValueError, match="runtime must be 'auto', 'sim', 'dask'"):
        tune_sim(runtime="ray")


def test_unknown_algorithm_option():
    with pytest.raises(AlgorithmError, match=r"unknown option\(s\) \['etaa'\]; valid options"):
        tune_sim(algorithm="asha", etaa=3)


# ----------------------------------------------------------------- numbers
def test_negative_budget():
    with pytest.raises(AlgorithmError, match="max_budget must be a number > 0, got -1"):
        nbtune.tune(train, SPACE, metric="loss", max_budget=-1)


def test_zero_budget():
    with pytest.raises(AlgorithmError, match="max_budget must be a number > 0, got 0"):
        nbtune.tune(train, SPACE, metric="loss", max_budget=0)


def test_nan_budget():
    with pytest.raises(AlgorithmError, match="max_budget must be a number > 0, got nan"):
        tune_sim(max_budget=float("nan"))


def test_min_budget_above_max_budget():
    with pytest.raises(AlgorithmError, match=r"min_budget must be in \(0, max_budget=3\]"):
        tune_sim(min_budget=5)


def test_zero_trials():
    with pytest.raises(AlgorithmError, match="num_trials must be a positive integer, got 0"):
        tune_sim(algorithm="random", num_trials=0)


def test_negative_max_failures():
    with pytest.raises(ValueError, match="max_failures must be an integer >= 0"):
        tune_sim(max_failures=-1)


def test_negative_trial_timeout():
    with pytest.raises(ValueError, match="trial_timeout must be a number of seconds > 0"):
        tune_sim(trial_timeout=-5)


def test_trial_timeout_on_the_simulator():
    with pytest.raises(ValueError, match="trial_timeout needs a runtime that runs training"):
        tune_sim(trial_timeout=5)


def test_gpu_request_larger_than_the_cluster():
    with pytest.raises(ValueError, match=r"gpus_per_trial=3 asks for more GPUs than the cluster "
                                         r"has \(2.*ask for at most 2"):
        tune_sim(gpus_per_trial=3)


@pytest.mark.parametrize("gpus", [0, -1, 1.5])
def test_gpu_request_that_is_neither_a_fraction_nor_whole_gpus(gpus):
    with pytest.raises(ValueError, match="fraction of one GPU .* or a whole number of GPUs"):
        nbtune.tune(train, SPACE, metric="loss", max_budget=3, gpus_per_trial=gpus)


def test_gpu_request_with_an_allocator_that_sizes_trials_itself():
    with pytest.raises(ValueError, match="allocator='waterfill' sizes trials itself: drop "
                                         "gpus_per_trial, or use allocator='fifo'"):
        nbtune.tune(train, SPACE, metric="loss", max_budget=3, allocator="waterfill",
                    gpus_per_trial=2)


def test_cluster_of_zero_gpus():
    with pytest.raises(ValueError, match="a cluster needs at least one GPU, got 0"):
        SimRuntime(cluster=0)


# ------------------------------------------------------------ mode, metric
def test_unknown_mode():
    with pytest.raises(AlgorithmError, match="mode must be 'min' or 'max', got 'minimize'"):
        tune_sim(mode="minimize")


def test_metric_that_is_not_a_name():
    with pytest.raises(TypeError, match="metric must be the name of a reported metric"):
        tune_sim(metric=3)


def test_empty_metric_name():
    with pytest.raises(AlgorithmError, match="metric must be the name of a reported metric"):
        tune_sim(metric="")


# --------------------------------------------------------------- trainable
def test_trainable_that_is_not_callable():
    with pytest.raises(TypeError, match="must be a training function .* got int"):
        nbtune.tune(42, SPACE, metric="loss", max_budget=3)


def test_training_function_on_the_simulator():
    with pytest.raises(TypeError, match="runtime='sim' needs a workload model"):
        tune_sim(trainable=train, space=SPACE)


def test_training_function_with_the_wrong_signature():
    from nbtune.runtimes.dask.driver_side.jobs import check_signature

    def three(a, b, c):
        pass

    with pytest.raises(TypeError, match="must accept train\\(config, trial\\)"):
        check_signature(three)


def test_training_function_that_cannot_be_pickled():
    import threading

    from nbtune.runtimes.dask.driver_side.jobs import pickled

    lock = threading.Lock()

    def locked(config, trial):
        with lock:
            trial.report(step=1, loss=1.0)

    with pytest.raises(TypeError, match="cannot be pickled .* Create that object inside"):
        pickled(locked)


# ------------------------------------------------------------------- store
def test_store_url_that_does_not_answer():
    with pytest.raises(StoreOpenError, match="cannot open the store .*Connection refused"):
        tune_sim(store="postgresql+psycopg://nobody@127.0.0.1:1/nbtune")


def test_store_path_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreOpenError, match="Pass a writable directory or SQLite file"):
        tune_sim(store=str(blocker / "sub" / "runs.db"))


def test_store_url_of_an_unknown_database():
    with pytest.raises(StoreOpenError, match="NoSuchModuleError"):
        tune_sim(store="nosuchdb://host/x")


def test_resume_of_an_experiment_that_does_not_exist(tmp_path):
    tune_sim(store=tmp_path, name="there", seed=1)
    with pytest.raises(UnknownExperimentError, match="no experiment named 'nope'.*there"):
        nbtune.resume("nope", store=tmp_path)


def test_second_experiment_with_the_same_name_keeps_the_first(tmp_path):
    first = tune_sim(store=tmp_path, name="mine", seed=1)
    before = first.results()
    with pytest.raises(ExperimentExistsError, match="mine.*resume"):
        tune_sim(store=tmp_path, name="mine", seed=2)
    kept = Store(tmp_path).results("mine")
    assert len(kept) == len(before) == 2
    assert sorted(kept["loss"]) == pytest.approx(sorted(before["loss"]))


def test_a_closed_dask_runtime_says_how_to_run_several_experiments():
    """A DaskRuntime that started its own cluster closes it when its experiment ends: the
    next tune() on it must say what to write, not only that it is closed."""
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(n_workers=1)
    rt.close()  # what the end of its first experiment does to a cluster it started
    with pytest.raises(RuntimeError, match="make a new one, with keep=True to run several"):
        nbtune.tune(train, SPACE, metric="loss", max_budget=3, num_trials=1, runtime=rt)
