"""``nbtune.tune(..., fusion=True)`` on a real LocalCluster: F_max from measured memory.

Each worker has a small memory limit (1.2 GB), and every member of the fused model holds a
large embedding with its gradient and momentum (about 100 MB). The units of one and two
members measure the line; the other trials then fuse in units no wider than the F_max it
gives, fewer than the trials, and those units' measured peaks stay under the limit.
"""

from __future__ import annotations

import math

import pytest

from nbtune.core.space import choice, loguniform
from tests.dask_cluster import local_client

pytestmark = pytest.mark.integration

LIMIT = 1.2e9
SPACE = {"lr": loguniform(1e-3, 0.1), "seed": choice([0, 1, 2])}


def wide_train(config, trial):
    """A 2**19 x 16 embedding (8.4M parameters: 34 MB, with its gradient and momentum
    about 100 MB a member) under a small classifier, one batch of 16 per step: memory
    without much compute."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from nbtune.fusion.fusion_trial import as_fusion_trial

    def make(cfg):
        torch.manual_seed(int(cfg["seed"]))
        return nn.Sequential(nn.Embedding(1 << 19, 16), nn.Flatten(), nn.Linear(64, 10))

    torch.set_num_threads(1)
    trial = as_fusion_trial(trial)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 1 << 19, (64, 4), generator=g), torch.randint(0, 10, (64,), generator=g)
    model = trial.model(make)
    opt = trial.optimizer(torch.optim.SGD, model, lr="lr", momentum=0.9)
    for step in trial.steps():
        i = 16 * (step % 4)
        loss, per_loss = trial.loss(F.cross_entropy, model(x[i:i + 16]), y[i:i + 16])
        opt.zero_grad()
        loss.backward()
        opt.step()
        trial.report(step, loss=per_loss)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    from nbtune.runtimes.dask import DaskRuntime

    with local_client(memory_limit=int(LIMIT)) as client:
        rt = DaskRuntime(client, preload=("torch",), warm_processes=1, dashboard_address=None,
                         checkpoint_dir=tmp_path_factory.mktemp("ckpt"))
        yield rt
        rt.close()


def test_fusion_true_sizes_units_from_measured_memory_under_a_small_limit(runtime):
    import nbtune

    n = 14
    exp = nbtune.tune(wide_train, SPACE, algorithm="random", num_trials=n, metric="loss",
                      mode="min", max_budget=2, runtime=runtime, seed=0, fusion=True,
                      validate=True)
    assert exp.wait(180)
    df = exp.results()
    assert (df["state"] == "completed").all(), df
    fit = exp.engine.fusion.fit
    assert exp.engine.cluster.gpus[0].memory_gb * 1e9 == pytest.approx(LIMIT)
    (key, sizes), = fit.peaks.items()  # one shape group (no shape keys)
    f_max = fit.limit(key, LIMIT)
    print(f"F_max {f_max}; peak by unit size (MB): "
          f"{ {s: round(p / 1e6) for s, p in sorted(sizes.items())} }")
    assert {1, 2} <= set(sizes) and sizes[2] > sizes[1]
    assert 2 < f_max < n - 3  # the limit binds: the 11 trials after the probes need
    units = sorted(fit.units.items())  # several units (measured F_max varies: 5 or 6 seen)
    probes = [size for _, (_, size, lim) in units if lim is None]
    sized = [(u, size, lim) for u, (_, size, lim) in units if lim is not None]
    assert sorted(probes) == [1, 2], units
    assert all(size <= lim for _, size, lim in sized)
    assert len(sized) >= math.ceil((n - 3) / f_max) >= 2 and max(s for _, s, _ in sized) > 2
    for u, size, _ in sized:  # what each wider unit's process measured: under the limit
        assert fit.unit_peak[u] <= 0.9 * LIMIT, (u, size, fit.unit_peak[u])
    assert sorted(df["group"].value_counts()) == sorted(size for _, (_, size, _) in units)
