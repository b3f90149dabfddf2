"""The one place an experiment is built: the runtime factory and the capability checks."""

from __future__ import annotations

import pytest

from nbtune.build import build_experiment, check_trainable, make_runtime, runtime_class
from nbtune.core.space import uniform
from nbtune.engine.engine import Engine
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload
from tests.engine.toy import OneShot

SPACE = {"x": uniform(0.0, 1.0)}


def train(config, trial):
    trial.report(loss=config["x"])


def test_runtimes_declare_their_capabilities():
    sim, dask = runtime_class("sim"), runtime_class("dask")
    assert (sim.virtual_clock, sim.keeps_checkpoints, sim.live_workers) == (True, False, False)
    assert (dask.virtual_clock, dask.keeps_checkpoints, dask.live_workers) == (False, True, True)
    assert make_runtime("sim", cluster=3).cluster.n_gpus == 3


def test_bad_runtimes_say_what_is_wrong():
    with pytest.raises(ValueError, match="'sim', 'dask'"):
        make_runtime("mars")
    with pytest.raises(TypeError, match="lacks .*virtual_clock"):
        make_runtime(object())
    with pytest.raises(TypeError, match="for a runtime name"):
        make_runtime(SimRuntime(), cluster=2)


def test_the_trainable_must_fit_the_runtime_checked_on_the_class_before_one_exists():
    model = SyntheticWorkload(SPACE)
    check_trainable(model, runtime_class("sim"))
    check_trainable(train, runtime_class("dask"))
    with pytest.raises(TypeError, match="simulator runs workload models.*--runtime dask"):
        check_trainable(train, runtime_class("sim"))
    with pytest.raises(TypeError, match=r"train\(config, trial\).*runtime='sim'"):
        check_trainable(model, runtime_class("dask"))


def test_a_replayed_engine_continues_on_a_virtual_clock_and_start_can_wait():
    model = SyntheticWorkload(SPACE)
    first = build_experiment("a", Engine(OneShot(SPACE, metric="loss", max_budget=3,
                                                 num_trials=2, seed=0)), "sim", model)
    assert first.done and first.engine.time > 0
    later = build_experiment("b", first.engine, make_runtime("sim"), model, start=False)
    assert later.runtime.clock.now() == first.engine.time  # wound on, not from 0
    assert not later.runtime.done  # start=False: the caller subscribes, then starts


def test_a_resumed_run_goes_back_to_the_runtime_it_ran_on():
    from nbtune.build import ran_on, resumed_runtime

    model = SyntheticWorkload(SPACE)
    assert ran_on("dask", train) == "dask" and ran_on("sim", model) == "sim"
    # not a registered name (bubbles runs training functions on Dask's trial processes),
    # or none recorded: the runtime the trainable runs on
    assert ran_on("bubbles", train) == "dask" and ran_on(None, model) == "sim"
    assert resumed_runtime("auto", "dask", train) == "dask"
    sim = resumed_runtime("auto", "sim", model, cluster=3)
    assert sim.name == "sim" and sim.cluster.n_gpus == 3  # the GPUs the engine last had
    rt = SimRuntime()
    assert resumed_runtime(rt, "dask", model) is rt
    assert resumed_runtime("sim", "dask", model) == "sim"
