"""The µP rules: the issue's table (derived by hand) and, when installed, mup 1.0.0 itself."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from nbtune.surrogate import shrink
from nbtune.surrogate.shrinker import _unwrap_name
from tests.surrogate.models import MLP, cnn

# width 32 against a target of width 256 (m = 1/8), from mup's rules written out
SGD_256_32 = {"inp.weight": 1 / 8, "inp.bias": 1 / 8, "hid.weight": 1.0, "hid.bias": 1 / 8,
              "norm.weight": 1 / 8, "norm.bias": 1 / 8, "out.1.weight": 1 / 8, "out.1.bias": 1.0}
ADAM_256_32 = {"inp.weight": 1.0, "inp.bias": 1.0, "hid.weight": 8.0, "hid.bias": 1.0,
               "norm.weight": 1.0, "norm.bias": 1.0, "out.1.weight": 1.0, "out.1.bias": 1.0}


def test_multipliers_match_the_derivation():
    sur = shrink(MLP(256), 8)
    assert sur.lr_multipliers(torch.optim.SGD) == pytest.approx(SGD_256_32)
    assert sur.lr_multipliers(torch.optim.Adam) == pytest.approx(ADAM_256_32)
    assert sur.lr_multipliers(torch.optim.AdamW) == pytest.approx(ADAM_256_32)
    assert sur.readout_mult == 8.0
    wd = sur.weight_decay_multipliers(torch.optim.SGD)
    assert all(wd[n] * m == pytest.approx(1.0) for n, m in SGD_256_32.items())


def test_optimizer_groups_apply_the_rules():
    sur = shrink(MLP(256), 8)
    opt = sur.optimizer(torch.optim.SGD, lr=0.4, momentum=0.9, weight_decay=1e-4)
    names = {id(p): n for n, p in sur.module.named_parameters()}
    for g in opt.param_groups:
        for p in g["params"]:
            assert g["lr"] == pytest.approx(0.4 * SGD_256_32[names[id(p)]])
            assert g["weight_decay"] == pytest.approx(1e-4 / SGD_256_32[names[id(p)]])
            assert g["momentum"] == 0.9
    assert sum(len(g["params"]) for g in opt.param_groups) == len(names)
    # a StepLR decays every group by the same gamma: the ratios stay
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    opt.step()
    sched.step()
    assert {round(g["lr"] / g["lr_mult"], 9) for g in opt.param_groups} == {0.2}


def test_standard_parametrization_baseline_has_no_rules():
    sur = shrink(MLP(256), 8, parametrize=False)
    assert set(sur.lr_multipliers("sgd").values()) == {1.0}
    assert isinstance(sur.module.out, nn.Linear)  # no readout multiplier either
    assert torch.count_nonzero(sur.module.out.weight) > 0


def test_unsupported_optimizer_is_a_clear_error():
    with pytest.raises(TypeError, match="SGD-like"):
        shrink(MLP(64), 2).optimizer(torch.optim.LBFGS, lr=1)
    with pytest.raises(TypeError, match="lr="):
        shrink(MLP(64), 2).optimizer(torch.optim.SGD)


def _with_mu_readout(model: nn.Module, name: str) -> nn.Module:
    """mup insists on its MuReadout for a layer with an infinite fan-in and a finite fan-out."""
    mup = pytest.importorskip("mup")
    old = model.get_submodule(name)
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf,
            mup.MuReadout(old.in_features, old.out_features))
    return model


def _mup_multipliers(target: nn.Module, small: nn.Module, readout: str, opt_name: str):
    mup = pytest.importorskip("mup")
    small, target = _with_mu_readout(small, readout), _with_mu_readout(target, readout)
    mup.set_base_shapes(small, target, rescale_params=False)
    make = {"sgd": mup.MuSGD, "adam": mup.MuAdam, "adamw": mup.MuAdamW}[opt_name]
    opt = make(small.parameters(), lr=1.0, weight_decay=1.0)
    names = {id(p): n for n, p in small.named_parameters()}
    lr = {names[id(p)]: g["lr"] for g in opt.param_groups for p in g["params"]}
    wd = {names[id(p)]: g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    return lr, wd


@pytest.mark.parametrize("opt", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_cross_check_against_mup(opt, kind):
    """mup (set_base_shapes with base = target) gives the same per-parameter lr and wd."""
    if kind == "mlp":
        target, small, scale, readout = MLP(256), MLP(32), 8, "out"
    else:
        target, small, scale, readout = cnn(32), cnn(8), 4, "7"
    sur = shrink(target, scale)
    want_lr, want_wd = _mup_multipliers(target, small, readout, opt)
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[opt]
    got_lr = {_unwrap_name(n): v for n, v in sur.lr_multipliers(cls).items()}
    got_wd = {_unwrap_name(n): v for n, v in sur.weight_decay_multipliers(cls).items()}
    assert got_lr == pytest.approx(want_lr)
    assert got_wd == pytest.approx(want_wd)


def test_readout_multiplier_matches_mup():
    mup = pytest.importorskip("mup")

    class MuMLP(MLP):
        def __init__(self, width):
            super().__init__(width)
            self.out = mup.MuReadout(width, 10, readout_zero_init=True)

    small = MuMLP(32)
    mup.set_base_shapes(small, MuMLP(256), rescale_params=False)
    sur = shrink(MLP(256), 8)
    sur.module.load_state_dict({k: v for k, v in small.state_dict().items()
                                if not k.startswith("out.")}, strict=False)
    with torch.no_grad():
        small.out.weight.normal_()
        sur.module.out[1].weight.copy_(small.out.weight)
        x = torch.randn(4, 64)
        assert torch.allclose(sur.module(x), small(x), atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(width=st.sampled_from([32, 48, 64, 128, 256]), scale=st.sampled_from([1, 2, 4, 8]))
def test_mup_invariant_for_any_width(width, scale):
    """µP's invariant: SGD keeps hidden weights at x1 and scales vectors by m; Adam the reverse."""
    if width / scale < 4:
        return
    sur = shrink(MLP(width), scale)
    m = sur.module.hid.in_features / width
    sgd, adam = sur.lr_multipliers("sgd"), sur.lr_multipliers("adam")
    assert sgd["hid.weight"] == pytest.approx(1.0) and adam["hid.weight"] == pytest.approx(1 / m)
    for n in ("inp.weight", "inp.bias", "hid.bias", "out.1.weight"):
        assert sgd[n] == pytest.approx(m) and adam[n] == 1.0
    assert sgd["out.1.bias"] == adam["out.1.bias"] == 1.0
    assert sur.readout_mult == pytest.approx(1 / m)


# the CNN at S = 4 (32/64 channels -> 8/16), from mup 1.0.0's rules written out: a conv
# weight (out, in, kh, kw) has two infinite dims; its InfShape "main" dim is the last
# infinite one, the input channels (the kernel dims are finite), and MuAdam divides a
# matrix-like lr by that width_mult (1/4); MuSGD multiplies it by fanout_mult / fanin_mult.
CNN_ADAM_S4 = {"0.weight": 1.0, "0.bias": 1.0, "1.weight": 1.0, "1.bias": 1.0,
               "3.weight": 4.0, "3.bias": 1.0, "7.1.weight": 1.0, "7.1.bias": 1.0}
CNN_SGD_S4 = {"0.weight": 1 / 4, "0.bias": 1 / 4, "1.weight": 1 / 4, "1.bias": 1 / 4,
              "3.weight": 1.0, "3.bias": 1 / 4, "7.1.weight": 1 / 4, "7.1.bias": 1.0}


def test_conv_multipliers_match_the_derivation():
    """Convolutions get mup's matrix-like rule, whatever their kernel size."""
    sur = shrink(cnn(32), 4)
    assert sur.lr_multipliers(torch.optim.Adam) == pytest.approx(CNN_ADAM_S4)
    assert sur.lr_multipliers(torch.optim.SGD) == pytest.approx(CNN_SGD_S4)
    assert sur.readout_mult == 4.0
