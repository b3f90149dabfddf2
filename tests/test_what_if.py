"""``exp.what_if``: a finished run replayed on the simulator at another scale, from its own
measurements (here a simulated run; tests/test_demo.py asks it of a real LocalCluster run)."""

from __future__ import annotations

import pytest

import nbtune
from nbtune.algorithms.asha import ASHA
from nbtune.core.space import uniform
from nbtune.replay import decisions
from nbtune.workloads import SyntheticWorkload

SPACE = {"x": uniform(0, 1)}


def workload() -> SyntheticWorkload:
    return SyntheticWorkload(SPACE, unit_time=lambda c: 1 + c["x"], noise=0.0)


def run(**kw):
    return nbtune.tune(workload(), algorithm="asha", metric="loss", max_budget=9,
                       num_trials=20, runtime=nbtune.SimRuntime(cluster=2), allocator="fifo",
                       **kw)


def test_at_its_own_scale_the_what_if_is_the_run_and_more_gpus_finish_sooner():
    exp = run()
    same = exp.what_if()
    assert not decisions(exp).differences(decisions(same.experiment))
    assert same.table.loc["what-if", "makespan_s"] == pytest.approx(exp.makespan)
    assert same.speedup == pytest.approx(1.0)
    # how much 8 GPUs gain depends on the configurations drawn (1.1x-2.6x over seeds):
    # a seeded run's, deterministically
    bigger = run(seed=0).what_if(gpus=8)
    assert bigger.table.loc["what-if", "gpus"] == 8 and bigger.speedup > 1.5
    other = exp.what_if(gpus=8, allocator="waterfill")
    assert list(other.table["allocator"]) == ["fifo", "waterfill"]
    # the same configs in the same order: the seed tune fixed is the what-if's
    assert {t.trial_id: t.config for t in other.experiment.engine.trials.values()} == \
        {t.trial_id: t.config for t in exp.engine.trials.values()}


def test_a_price_profile_prices_both_runs():
    w = run().what_if(gpus=4, cloud="aws-p3.8xlarge")  # 4 GPUs an instance, $12.24/h
    t = w.table
    assert t.loc["what-if", "cost"] == pytest.approx(
        max(t.loc["what-if", "makespan_s"], 60.0) * 12.24 / 3600)
    assert t.loc["real", "cost"] == pytest.approx(max(t.loc["real", "makespan_s"], 60) * 12.24
                                                  / 3600)
    with pytest.raises(ValueError, match="unknown cloud profile"):
        run().what_if(cloud="nope")


def test_what_cannot_be_rebuilt_says_so_before_anything_runs():
    exp = nbtune.tune(workload(), algorithm=ASHA(SPACE, metric="loss", max_budget=3,
                                                 num_trials=4, seed=0),
                      metric="loss", max_budget=3, runtime=nbtune.SimRuntime(cluster=2))
    with pytest.raises(ValueError, match="no recipe"):
        exp.what_if(gpus=4)
    with pytest.raises(ValueError, match="whole number"):
        run().what_if(gpus=2.5)


def test_a_resumed_run_keeps_its_recipe(tmp_path):
    from nbtune.resumption import recipe_of
    from nbtune.store import Store

    exp = run(store=str(tmp_path / "s.db"), name="base")
    exp.wait()
    row = Store(str(tmp_path / "s.db")).experiment("base")
    assert recipe_of(row) == exp.recipe
