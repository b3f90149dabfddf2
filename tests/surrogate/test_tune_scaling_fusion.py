"""``nbtune.tune(..., scaling=S, fusion=F)`` on a real LocalCluster: shrink -> fuse -> tune ->
eager transfer, the whole Hydro pipeline through the public call.

The surrogates (width / S) train fused in units of several members; the target trial
trains the best surrogate configuration at full width, alone; ``exp.results()`` keeps both,
told apart by ``role`` and ``group``; nothing errors. Random search and ASHA (stopping
fused members one by one) are run on every test run; SHA, Hyperband, BOHB, PBT and Optuna's
TPE (slow) check the same; the training function is the Hydro example's.
"""

from __future__ import annotations

import pytest

from nbtune.core.space import choice, loguniform
from nbtune.surrogate.eager_transfer import TARGET_ID_BASE
from tests.dask_cluster import client  # noqa: F401  (the module's LocalCluster)

pytestmark = pytest.mark.integration

SPACE = {"lr": loguniform(1e-2, 0.5), "momentum": choice([0.0, 0.9]), "gamma": choice([0.9]),
         "batch_size": choice([128])}


@pytest.fixture(scope="module")
def runtime(client):  # noqa: F811
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(client, preload=("torch",), warm_processes=1, dashboard_address=None)
    yield rt
    rt.close()


def _run(rt, algorithm, num_trials, max_budget, **kw):
    import nbtune
    from nbtune.surrogate.example_digits import train

    exp = nbtune.tune(train, SPACE, algorithm=algorithm, metric="loss", mode="min",
                      max_budget=max_budget, num_trials=num_trials, runtime=rt, seed=0,
                      validate=True, scaling=4, fusion=8, **kw)
    assert exp.wait(180), "the run did not finish"
    return exp


def _check_pipeline(exp, n):
    df = exp.results()
    assert df["error"].isna().all(), df[df["error"].notna()][["trial_id", "error"]]
    sur = df[df["trial_id"] < TARGET_ID_BASE]
    tgt = df[df["trial_id"] >= TARGET_ID_BASE].sort_values("trial_id")
    assert (n is None or len(sur) == n) and set(sur["role"]) == {"surrogate"}
    assert set(tgt["role"]) == {"target"} and len(tgt) >= 1
    assert (sur["config/scaling"] == 4).all() and (tgt["config/scaling"] == 1).all()
    # surrogates were fused: a unit holds several of them; a target never shares its unit
    sizes = sur.groupby("group")["trial_id"].count()
    assert sizes.max() >= 2, sizes
    assert not set(tgt["group"]) & set(sur["group"]) and tgt["group"].is_unique
    # a target trained the surrogates' final best configuration to the end, at full width. Not
    # necessarily the last one: a report at a higher budget may make an earlier, already
    # trained configuration the best again, and then no new target is needed
    algo = exp.engine.algorithm
    best = algo.best_config()
    done = tgt[(tgt["state"] == "completed") & (tgt["budget_used"] == algo.target_budget)]
    assert any({k: row[f"config/{k}"] for k in best} == best for _, row in done.iterrows()), (
        best, tgt.filter(like="config/"))
    curves = exp.learning_curves()
    assert set(curves[curves["trial_id"] >= TARGET_ID_BASE]["width"]) == {256}
    assert set(curves[curves["trial_id"] < TARGET_ID_BASE]["width"]) == {64}
    return df


def test_random_search_fuses_surrogates_and_trains_the_best_on_the_target(runtime):
    exp = _run(runtime, "random", 8, 2)
    df = _check_pipeline(exp, 8)
    assert (df["state"][df["role"] == "surrogate"] == "completed").all()


def test_asha_stops_fused_surrogates_and_trains_the_best_on_the_target(runtime):
    exp = _run(runtime, "asha", 8, 4, eta=2, min_budget=1)
    df = _check_pipeline(exp, 8)
    sur = df[df["role"] == "surrogate"]
    assert (sur["state"] == "stopped").any() and (sur["state"] == "completed").any()


@pytest.mark.slow
@pytest.mark.parametrize("algorithm,kw", [
    ("sha", {"num_trials": 8, "eta": 2, "min_budget": 1}),
    ("hyperband", {"eta": 2, "min_budget": 1}),
    ("bohb", {"num_trials": 8, "eta": 2, "min_budget": 1}),
    ("pbt", {"num_trials": 8, "perturbation_interval": 2}),
    ("optuna-tpe", {"num_trials": 8}),
])
def test_the_other_algorithms_of_the_spine_run_the_pipeline(runtime, algorithm, kw):
    if algorithm.startswith("optuna"):
        pytest.importorskip("optuna")
    n = kw.pop("num_trials", None)
    _check_pipeline(_run(runtime, algorithm, n, 4, **kw), n)
