"""shrink(): which layer is input / hidden / output, the widths, the init, the errors."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

from nbtune.surrogate import Multiply, MuMultiheadAttention, ShrinkError, shrink
from tests.surrogate.models import MLP, TinyTransformer, cnn


def test_mlp_widths_by_layer_role():
    sur = shrink(MLP(256), 8, torch.randn(3, 64))
    m = sur.module
    assert (m.inp.in_features, m.inp.out_features) == (64, 32)  # input: outputs only
    assert (m.hid.in_features, m.hid.out_features) == (32, 32)  # hidden: both
    assert m.norm.normalized_shape == (32,)
    assert isinstance(m.out[0], Multiply) and m.out[0].factor == 8.0  # readout multiplier
    assert (m.out[1].in_features, m.out[1].out_features) == (32, 10)  # output: inputs only
    assert sur.readouts == ["out"] and sur.widths == {"inp": (256, 32), "hid": (256, 32)}
    assert sur.module(torch.randn(5, 64)).shape == (5, 10)


def test_hydro_init_zero_readout_and_biases():
    sur = shrink(MLP(128), 4)
    for name, p in sur.module.named_parameters():
        if name.endswith("bias") or name.startswith("out."):
            assert torch.count_nonzero(p) == 0, name
    assert torch.count_nonzero(sur.module.hid.weight) > 0
    # at init the readout gives exactly zero: the surrogate starts where the target would
    assert torch.count_nonzero(sur.module(torch.randn(4, 64))) == 0


def test_scale_one_keeps_shapes_but_parametrizes():
    target = MLP(64)
    sur = shrink(target, 1)
    shapes = {n: p.shape for n, p in target.named_parameters()}
    assert {n.replace("out.1.", "out."): p.shape for n, p in sur.module.named_parameters()} \
        == shapes
    assert sur.readouts == ["out"] and sur.readout_mult == 1.0
    assert set(sur.lr_multipliers("sgd").values()) == {1.0}


def test_cnn_flatten_and_batchnorm():
    sur = shrink(cnn(32), 4, torch.randn(2, 1, 8, 8))
    m = dict(sur.module.named_modules())  # a GraphModule: layers by their names
    assert (m["0"].out_channels, m["1"].num_features, m["3"].in_channels, m["3"].out_channels) \
        == (8, 8, 8, 16)
    assert m["7.1"].in_features == 64 and m["7.0"].factor == 4.0  # 16 ch x 2 x 2


def test_transformer_attention_is_scaled_by_one_over_d():
    target = TinyTransformer(64)
    sur = shrink(target, 4, torch.randint(0, 20, (2, 7)))
    att = sur.module.att
    assert isinstance(att, MuMultiheadAttention) and isinstance(att, nn.MultiheadAttention)
    assert att.embed_dim == 16 and att.num_heads == 4
    # sqrt(d0) / d: 1/sqrt(16) at the target's head size 16, times S / sqrt(S) = 2 here
    assert att.logit_scale == pytest.approx(4 / 4)
    assert torch.count_nonzero(att.in_proj_weight[:16]) == 0  # query starts at zero
    # at S = 1 with the same logit scale, MuMultiheadAttention equals nn.MultiheadAttention
    one = shrink(target, 1).module.att
    ref = nn.MultiheadAttention(64, 4, batch_first=True)
    ref.load_state_dict(one.state_dict())
    x = torch.randn(2, 5, 64)
    assert one.logit_scale == pytest.approx(1 / 4)
    assert torch.allclose(one(x, x, x)[0], ref(x, x, x)[0], atol=1e-5)


def test_factory_when_tracing_fails():
    class Branchy(MLP):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: fx cannot trace it
                x = x * 2
            return super().forward(x)

    with pytest.raises(ShrinkError, match="make_model"):
        shrink(Branchy(), 4)
    sur = shrink(lambda wm: Branchy(int(256 * wm)), 8, torch.randn(3, 64))
    assert sur.method == "factory" and sur.readouts == ["out"] and sur.readout_mult == 8.0
    traced = shrink(MLP(256), 8)
    assert sur.lr_multipliers("sgd") == traced.lr_multipliers("sgd")
    assert sur.lr_multipliers("adam") == traced.lr_multipliers("adam")


def test_floor_names_the_layer():
    with pytest.raises(ShrinkError, match=r"'inp'.*min_width=4"):
        shrink(MLP(16), 8)
    assert shrink(MLP(16), 8, min_width=2).widths["hid"] == (16, 2)


@pytest.mark.parametrize("bad", [0, 0.5, float("nan"), "4"])
def test_bad_scale(bad):
    with pytest.raises(ShrinkError, match="scale"):
        shrink(MLP(), bad)


def test_nothing_to_shrink_and_functional_parameters():
    with pytest.raises(ShrinkError, match="no hidden width"):
        shrink(nn.Sequential(nn.Linear(10, 2)), 2)

    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(32, 8))

        def forward(self, x):
            return torch.nn.functional.linear(x, self.w)

    with pytest.raises(ShrinkError, match="functional"):
        shrink(Functional(), 2)


def test_example_input_shape_error_is_early():
    class Reshaper(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 64), nn.Linear(64, 2)

        def forward(self, x):
            return self.b(self.a(x).view(-1, 64))  # 64 hard-coded

    with pytest.raises(ShrinkError, match="example_input"):
        shrink(Reshaper(), 2, torch.randn(3, 8))


def test_surrogate_pickles_and_trains():
    sur = shrink(cnn(16), 2, torch.randn(2, 1, 8, 8))
    again = pickle.loads(pickle.dumps(sur))
    opt = again.optimizer(torch.optim.SGD, lr=0.1, momentum=0.9)
    x, y = torch.randn(16, 1, 8, 8), torch.randint(0, 10, (16,))
    losses = []
    for _ in range(20):
        loss = nn.functional.cross_entropy(again.module(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
