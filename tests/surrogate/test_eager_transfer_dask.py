"""Eager transfer on a real two-worker LocalCluster: target trials start, get replaced, finish."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

from nbtune.core.space import choice, grid
from nbtune.surrogate.eager_transfer import TARGET_ID_BASE

distributed = pytest.importorskip("distributed")

from nbtune.runtimes.dask import DaskRuntime  # noqa: E402
from tests.dask_cluster import local_client  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def train(config, trial):
    """A real shrunk MLP trains; the reported loss ranks the grid 1 < 2 < ... < 6 (6 best)."""
    import time
    from pathlib import Path

    import torch
    from torch import nn

    from nbtune.surrogate import build

    def make_model():
        return nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                             nn.Linear(64, 2))

    sur = build(make_model, config)
    opt = sur.optimizer(torch.optim.SGD, lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g)
    x_best = 6
    flag = Path(config["flag_dir"]) / "a-target-started"
    best = Path(config["flag_dir"]) / "the-best-surrogate-reported"
    if config["scaling"] == 1:
        flag.touch()
    pause = 1.0 if config["scaling"] == 1 else 0.02  # the target is wider: slower
    for step in trial.steps():
        if config["x"] == x_best and step == trial.budget:
            # the best surrogate ends only once a TargetTrial of an earlier best runs (whatever
            # the launch delays on a loaded box), so it must be replaced
            _wait_for(flag)
        elif config["scaling"] == 1 and step == trial.budget:
            # and that TargetTrial does not end before the best surrogate has reported its
            # last step (its process may have started late, behind a torch import): CI once
            # saw the earlier target complete first
            _wait_for(best)
        loss = nn.functional.cross_entropy(sur.module(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(pause)
        trial.report(step=step, loss=(x_best - config["x"]) + 0.001 * loss.item(),
                     width=sur.module.get_submodule("2").out_features)
        if config["x"] == x_best and config["scaling"] != 1 and step == trial.budget:
            best.touch()  # the target's last report comes a pause (1 s) after this


def _wait_for(path):
    deadline = time.monotonic() + 120
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_target_trials_start_get_replaced_and_finish(tmp_path):
    import nbtune

    with local_client() as client:
        rt = DaskRuntime(client, checkpoint_dir=tmp_path / "ckpt", preload=(),
                         sample_interval=0.25, warm_processes=1)
        space = {"x": grid([1, 2, 3, 4, 5, 6]), "flag_dir": choice([str(tmp_path)])}
        exp = nbtune.tune(train, space, algorithm="grid",
                          metric="loss", mode="min", max_budget=4, runtime=rt, validate=True,
                          seed=0, scaling=4)
        try:
            exp.wait(180)
            assert exp.done
        finally:
            rt.close()
    df = exp.results()
    surrogates = df[df["trial_id"] < TARGET_ID_BASE]
    targets = df[df["trial_id"] >= TARGET_ID_BASE].sort_values("trial_id")
    assert len(surrogates) == 6 and set(surrogates["state"]) == {"completed"}, df["error"].iloc[0]
    assert (surrogates["config/scaling"] == 4).all() and (targets["config/scaling"] == 1).all()
    shown = df[["trial_id", "config/x", "state", "start", "end"]].to_string()
    assert len(targets) >= 2, shown  # one started early, a better one replaced it
    assert set(targets["state"].iloc[:-1]) == {"stopped"}, shown
    last = targets.iloc[-1]
    assert last["state"] == "completed" and last["config/x"] == 6 and last["budget_used"] == 4
    curves = exp.learning_curves()
    # the target trained the full width (64), the surrogates a quarter of it
    assert set(curves[curves["trial_id"] >= TARGET_ID_BASE]["width"]) == {64}
    assert set(curves[curves["trial_id"] < TARGET_ID_BASE]["width"]) == {16}
