"""nbtune.tune end to end on the simulator: every algorithm, the result frames, bad input."""

from __future__ import annotations

import pandas as pd
import pytest

import nbtune
from nbtune import SimRuntime, SyntheticWorkload, choice, grid, loguniform, uniform
from nbtune.algorithms import ALGORITHMS, AlgorithmError

SPACE = {"lr": loguniform(1e-4, 1e-1), "x": uniform(0, 1), "opt": choice(["sgd", "adam"])}


def workload(**kw):
    return SyntheticWorkload(SPACE, unit_time=lambda c: 2 + 4 * c["x"], launch_overhead=1.0, **kw)


@pytest.mark.parametrize("algorithm", sorted(n for n in ALGORITHMS if n != "grid"))
def test_every_algorithm_runs_through_tune_on_the_simulator(algorithm):
    exp = nbtune.tune(workload(), algorithm=algorithm, metric="loss", max_budget=9,
                      num_trials=12, seed=3, validate=True, runtime=SimRuntime(cluster=3))
    res = exp.results()
    assert len(res) == 12 and exp.done
    assert set(res["state"]) <= {"completed", "stopped"}
    assert exp.makespan > 0 and exp.best is not None
    assert exp.best["loss"] == res["loss"].min() or exp.best["budget_used"] == 9


def test_grid_search_over_grid_domains():
    space = {"lr": grid([0.1, 0.01, 0.001]), "bs": grid([32, 64])}
    wl = SyntheticWorkload(space, unit_time=1.0)
    exp = nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=3, validate=True)
    res = exp.results()
    assert len(res) == 6
    assert set(zip(res["config/lr"], res["config/bs"], strict=True)) == {
        (lr, bs) for lr in (0.1, 0.01, 0.001) for bs in (32, 64)}


def test_results_frame_has_the_documented_columns():
    exp = nbtune.tune(workload(), algorithm="asha", metric="loss", max_budget=9, num_trials=10,
                      seed=1, validate=True)
    res = exp.results()
    for col in ["trial_id", "config/lr", "config/x", "config/opt", "state", "loss",
                "budget_used", "gpu_seconds", "start", "end"]:
        assert col in res.columns
    assert (res["gpu_seconds"] > 0).all()
    assert res["end"].max() == pytest.approx(exp.makespan)
    alloc = exp.allocations()
    assert set(alloc["trial_id"]) == set(res["trial_id"])
    util = exp.utilization()
    assert set(util.columns) >= {"time", "gpu_id", "util"} and util["util"].between(0, 1).all()
    curves = exp.learning_curves()
    assert isinstance(curves, pd.DataFrame) and {"trial_id", "budget", "loss"} <= set(curves)
    assert "best trial" in exp.summary()


def test_asha_beats_random_on_gpu_time_for_a_similar_answer():
    """Early stopping must save GPU time: the reason to tune with ASHA at all."""
    common = dict(metric="loss", max_budget=27, num_trials=40, seed=5, validate=True)
    asha = nbtune.tune(workload(), algorithm="asha", **common)
    rand = nbtune.tune(workload(), algorithm="random", **common)
    assert asha.results()["gpu_seconds"].sum() < 0.5 * rand.results()["gpu_seconds"].sum()
    assert asha.best["loss"] <= rand.results()["loss"].quantile(0.2)


def test_seeded_runs_are_identical():
    a = nbtune.tune(workload(noise=0.05), algorithm="bohb", metric="loss", max_budget=9,
                    num_trials=15, seed=11)
    b = nbtune.tune(workload(noise=0.05), algorithm="bohb", metric="loss", max_budget=9,
                    num_trials=15, seed=11)
    assert a.results().equals(b.results())
    assert a.allocations().equals(b.allocations())


def test_mode_max_ranks_higher_as_better():
    wl = SyntheticWorkload(SPACE, metric="loss", unit_time=1.0)
    lo = nbtune.tune(wl, algorithm="random", metric="loss", mode="min", max_budget=3,
                     num_trials=8, seed=2)
    hi = nbtune.tune(wl, algorithm="random", metric="loss", mode="max", max_budget=3,
                     num_trials=8, seed=2)
    assert lo.best["loss"] < hi.best["loss"]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(algorithm="nope"), AlgorithmError, "unknown algorithm"),
        (dict(allocator="nope"), ValueError, "unknown allocator"),
        (dict(runtime="mars"), ValueError, "runtime must be"),
        (dict(mode="best"), AlgorithmError, "mode must be"),
        (dict(max_budget=0), AlgorithmError, "max_budget"),
    ],
)
def test_bad_options_fail_early_with_what_to_fix(kwargs, error, message):
    opts = dict(algorithm="random", metric="loss", max_budget=3, num_trials=2)
    opts.update(kwargs)
    with pytest.raises(error, match=message):
        nbtune.tune(workload(), **opts)


def test_simulator_refuses_a_training_function_with_a_hint():
    def train(config, trial):
        pass

    with pytest.raises(TypeError, match="runtime='dask'"):
        nbtune.tune(train, SPACE, metric="loss", max_budget=3, num_trials=2, runtime="sim")


def test_space_is_required_for_a_function():
    with pytest.raises(ValueError, match="search space"):
        nbtune.tune(lambda c, t: None, metric="loss", max_budget=3, num_trials=2)


@pytest.mark.parametrize(
    "trainable, space, kwargs, error, message",
    [  # each call has several mistakes: the one reported is the first a user would fix
        (42, {}, dict(algorithm="nope", max_budget=0), TypeError, "trainable must be"),
        (lambda c, t: None, {}, dict(algorithm="nope", max_budget=0), ValueError, "empty"),
        (lambda c, t: None, {"lr": [1, 2]}, dict(algorithm="nope"), ValueError, "bare list"),
        (lambda c, t: None, SPACE, dict(algorithm="nope", allocator="nah", mode="best",
                                        max_budget=0), AlgorithmError, "unknown algorithm"),
        (lambda c, t: None, SPACE, dict(allocator="nah", mode="best", max_budget=0),
         ValueError, "unknown allocator"),
        (lambda c, t: None, SPACE, dict(mode="best", runtime="mars"), AlgorithmError, "mode"),
        (lambda c, t: None, SPACE, dict(max_budget=-1, runtime="mars"), AlgorithmError,
         "max_budget"),
        (lambda c, t: None, SPACE, dict(metric="", runtime="mars"), AlgorithmError, "metric"),
        (lambda c, t: None, SPACE, dict(runtime="mars"), ValueError, "runtime must be"),
    ],
)
def test_argument_errors_come_in_the_order_a_user_fixes_them(trainable, space, kwargs, error,
                                                             message):
    opts = dict(metric="loss", max_budget=3)
    opts.update(kwargs)
    with pytest.raises(error, match=message):
        nbtune.tune(trainable, space, **opts)


def test_auto_runtime_picks_the_simulator_for_a_workload_model():
    exp = nbtune.tune(workload(), metric="loss", max_budget=3, num_trials=4, seed=0)
    assert exp.runtime.name == "sim" and exp.done


def test_asha_pauses_and_promotes_when_the_function_checkpoints():
    from nbtune.build.run_checks import _auto_type

    def saves(config, trial):
        trial.checkpoint({})

    def plain(config, trial):
        trial.report(loss=1.0)

    assert _auto_type("asha", saves, {}) == {"type": "promotion"}
    assert _auto_type("asha", plain, {}) == {}
    assert _auto_type("bohb", saves, {"type": "stopping"}) == {"type": "stopping"}
    assert _auto_type("hyperband", saves, {}) == {}


def test_option_objects_run_the_same_experiment_as_the_keywords():
    from nbtune import ExecutionOptions, RecordingOptions, ResourceOptions, SearchOptions

    by_keywords = nbtune.tune(workload(noise=0.05), algorithm="hyperband", metric="loss",
                              max_budget=9, num_trials=10, seed=4, allocator="fifo",
                              runtime=SimRuntime(cluster=2), max_failures=1, eta=3)
    by_options = nbtune.tune(workload(noise=0.05), options=(
        SearchOptions(algorithm="hyperband", metric="loss", max_budget=9, num_trials=10,
                      seed=4, algorithm_options={"eta": 3}),
        ResourceOptions(allocator="fifo"),
        ExecutionOptions(runtime=SimRuntime(cluster=2), max_failures=1),
        RecordingOptions(name="grouped")))
    mixed = nbtune.tune(workload(noise=0.05), metric="loss", max_budget=9, allocator="fifo",
                        runtime=SimRuntime(cluster=2), max_failures=1, eta=3,
                        options=SearchOptions(algorithm="hyperband", num_trials=10, seed=4))
    assert by_options.name == "grouped"
    for exp in (by_options, mixed):
        assert exp.results().equals(by_keywords.results())
        assert exp.allocations().equals(by_keywords.allocations())


@pytest.mark.parametrize("kwargs, message", [
    (dict(seed=1, options=nbtune.SearchOptions(seed=2)), "seed twice"),
    (dict(allocator="fifo", options=[nbtune.ResourceOptions(allocator="waterfill")]),
     "allocator twice"),
    (dict(eta=3, options=nbtune.SearchOptions(algorithm_options={"eta": 2})), r"\['eta'\] twice"),
    (dict(options=[nbtune.SearchOptions(seed=1), nbtune.SearchOptions(seed=2)]),
     "two SearchOptions"),
    (dict(options={"seed": 1}), "options= takes SearchOptions"),
])
def test_a_setting_given_twice_is_an_error(kwargs, message):
    with pytest.raises(TypeError, match=message):
        nbtune.tune(workload(), metric="loss", max_budget=3, **kwargs)


def test_metric_and_max_budget_are_required_from_a_keyword_or_an_option_object():
    with pytest.raises(TypeError, match="needs metric and max_budget"):
        nbtune.tune(workload())
    with pytest.raises(TypeError, match="needs max_budget"):
        nbtune.tune(workload(), options=nbtune.SearchOptions(metric="loss"))


def test_tune_has_the_option_objects_defaults():
    import dataclasses
    import inspect

    params = inspect.signature(nbtune.tune).parameters
    groups = (nbtune.SearchOptions, nbtune.ResourceOptions, nbtune.ExecutionOptions,
              nbtune.RecordingOptions)
    fields = [f for g in groups for f in dataclasses.fields(g) if f.name != "algorithm_options"]
    assert {f.name for f in fields} == set(params) - {"trainable", "space", "options",
                                                       "algorithm_options"}
    for f in fields:
        assert params[f.name].default == f.default, f.name
