"""The correctness check flags a broken parametrization and passes µP."""

from __future__ import annotations

import warnings
from functools import cache

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nbtune.surrogate.coord_check import ParametrizationWarning, coord_check


@cache
def _batch():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return torch.tensor(x[:128], dtype=torch.float32) / 16, torch.tensor(y[:128])


def deep_mlp(width: int = 1024) -> nn.Sequential:
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


@pytest.mark.parametrize("optimizer,lr", [
    (torch.optim.Adam, 1e-3), pytest.param(torch.optim.SGD, 2.0, marks=pytest.mark.slow)])
def test_standard_parametrization_is_flagged_mup_is_not(optimizer, lr):
    kw = dict(scales=(16, 4, 1), optimizer=optimizer, lr=lr, steps=5, seeds=1)
    with pytest.warns(ParametrizationWarning, match="FAILED"):
        bad = coord_check(deep_mlp(), _batch(), F.cross_entropy, parametrize=False, **kw)
    assert not bad.ok and "6" in bad.flagged and bad.flagged["6"] > 0.5  # the readout grows
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParametrizationWarning)
        good = coord_check(deep_mlp(), _batch(), F.cross_entropy, **kw)
    assert good.ok, good.message()
    assert "passed" in good._repr_html_() and "FAILED" in bad._repr_html_()


def test_plot_and_bad_arguments():
    cc = coord_check(deep_mlp(128), _batch(), F.cross_entropy, scales=(4, 1), steps=2, seeds=1,
                     lr=0.1)
    fig = cc.plot()
    assert len(fig.children) == 2
    with pytest.raises(ValueError, match="two widths"):
        coord_check(deep_mlp(128), _batch(), F.cross_entropy, scales=(4,), lr=0.1)


def hydro_sgd_rule(sur):
    """Hydro's process_sgd_like: vectors lr / S (as mup) but hidden weights lr x S (mup: x1)."""
    out = {}
    for name, dims in sur.dim_mults.items():
        n_width = sum(1 for m in dims if m != 1.0)
        out[name] = sur.scale if n_width == 2 else 1 / sur.scale if n_width == 1 else 1.0
    return out


@pytest.mark.slow
def test_hydro_sgd_rule_is_flagged_mup_rule_is_not():
    """The decision in docs/surrogates.rst: with Hydro's extra x S on hidden weights the
    narrow surrogates' activations move faster than the target's (they shrink with width)."""
    kw = dict(scales=(16, 4, 1), optimizer=torch.optim.SGD, lr=1.0, steps=5, seeds=1)
    with pytest.warns(ParametrizationWarning, match="shrinks"):
        hydro = coord_check(deep_mlp(), _batch(), F.cross_entropy, lr_multipliers=hydro_sgd_rule,
                            **kw)
    assert hydro.flagged["6"] < -1.0
    mup = coord_check(deep_mlp(), _batch(), F.cross_entropy, **kw)
    assert mup.ok and max(abs(s) for (_, t), s in mup.slopes.items() if t >= 1) < 0.3
