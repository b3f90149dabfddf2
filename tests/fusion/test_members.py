"""defuse() round-trips, keep() leaves the survivors' training unchanged, dropout masks are
independent, the schedulers follow torch's per member, bad input is refused clearly."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from nbtune.fusion import (
    FusedCosineAnnealingLR,
    FusedStepLR,
    FusionError,
    fuse,
    fused_loss,
    fused_optimizer,
)

from .models import FAMILIES, build, inputs
from .test_equivalence import assert_members_equal


@settings(max_examples=15)
@given(family=st.sampled_from(FAMILIES), f=st.integers(1, 5), seed=st.integers(0, 999))
def test_defuse_round_trips(family, f, seed):
    torch.manual_seed(seed)
    models = [build(family, 5) for _ in range(f)]
    for m in models:  # non-trivial running statistics
        m.train()
        m(inputs(family, 4, torch.Generator().manual_seed(seed)))
    fm = fuse(models)
    for k, m in enumerate(models):
        got = fm.defuse(k)
        assert type(got) is type(m)
        for name, want in m.state_dict().items():
            assert torch.equal(got.state_dict()[name], want), (k, name)
    # load_member is defuse's inverse: writing member 0 into slot f-1 makes them equal
    fm.load_member(f - 1, models[0])
    for name, want in models[0].state_dict().items():
        assert torch.equal(fm.defuse(f - 1).state_dict()[name], want)
    with pytest.raises(IndexError):
        fm.defuse(f)


@settings(max_examples=12)
@given(family=st.sampled_from(FAMILIES), f=st.integers(2, 5), seed=st.integers(0, 999),
       data=st.data())
def test_keep_leaves_survivors_training_unchanged(family, f, seed, data):
    survivors = data.draw(st.lists(st.integers(0, f - 1), min_size=1, max_size=f,
                                   unique=True))
    torch.manual_seed(seed)
    models = [build(family, 5) for _ in range(f)]
    alone = [copy.deepcopy(m) for m in models]
    lrs = [0.01 * (k + 1) for k in range(f)]
    fm = fuse(models)
    opt = fused_optimizer(torch.optim.SGD, fm, lr=lrs, momentum=0.9, weight_decay=1e-3)
    sched = FusedStepLR(opt, step_size=[1 + k % 2 for k in range(f)], gamma=0.5)
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, weight_decay=1e-3)
            for m, lr in zip(alone, lrs, strict=True)]
    scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=1 + k % 2, gamma=0.5)
              for k, o in enumerate(opts)]
    gen = torch.Generator().manual_seed(seed)
    for step in range(4):
        if step == 2:
            fm.keep(survivors)  # optimizer and scheduler follow
            alone = [alone[k] for k in survivors]
            opts = [opts[k] for k in survivors]
            scheds = [scheds[k] for k in survivors]
            assert fm.members == len(survivors) == len(opt.hparam("lr"))
        x, y = inputs(family, 6, gen), torch.randint(0, 3, (6,), generator=gen)
        total, _ = fused_loss(F.cross_entropy, fm(x), y)
        opt.zero_grad()
        total.backward()
        opt.step()
        sched.step()
        for m, o, s in zip(alone, opts, scheds, strict=True):
            o.zero_grad()
            F.cross_entropy(m(x), y).backward()
            o.step()
            s.step()
    assert_members_equal(fm, alone)
    assert sched.get_last_lr() == pytest.approx([s.get_last_lr()[0] for s in scheds])


def test_keep_validates_indices():
    fm = fuse([build("mlp", 4) for _ in range(3)])
    for bad in ([], [0, 0], [3], [-1]):
        with pytest.raises((ValueError, IndexError)):
            fm.keep(bad)


def test_dropout_masks_are_independent_per_member():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 64), nn.Dropout(0.5))
    fm = fuse([copy.deepcopy(m) for _ in range(3)])  # identical weights
    out = fm(torch.randn(8, 4))
    dropped = out == 0
    assert not torch.equal(dropped[0], dropped[1]) and not torch.equal(dropped[1], dropped[2])
    assert 0.3 < dropped.float().mean().item() < 0.7
    fm.eval()
    out = fm(torch.randn(8, 4))
    assert torch.equal(out[0], out[1])


@pytest.mark.parametrize("epochs", [12])
def test_schedulers_match_torch_per_member(epochs):
    fm = fuse([build("mlp", 4) for _ in range(3)])
    lrs, tmax, etamin = [0.1, 0.2, 0.05], [4, 7, 12], [0.0, 1e-3, 1e-2]
    opt = fused_optimizer(torch.optim.Adam, fm, lr=lrs)
    cos = FusedCosineAnnealingLR(opt, T_max=tmax, eta_min=etamin)
    refs = []
    for lr, t, e in zip(lrs, tmax, etamin, strict=True):
        o = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=lr)
        refs.append(torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=t, eta_min=e))
    for _ in range(epochs):
        opt.step()
        cos.step()
        for r in refs:
            r.optimizer.step()
            r.step()
        assert cos.get_last_lr() == pytest.approx([r.get_last_lr()[0] for r in refs], abs=1e-7)


class Direct(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * self.scale


@pytest.mark.parametrize(("model", "needle"), [
    (nn.Sequential(nn.Linear(3, 3), nn.GRU(3, 3)), "'1' (GRU) is not supported"),
    (nn.Sequential(nn.Linear(3, 3), nn.PReLU()), "'1' (PReLU) is not supported"),
    (nn.Sequential(nn.Linear(3, 3), nn.BatchNorm3d(3)), "BatchNorm3d"),
    (Direct(), "holds parameters or buffers directly (scale)"),
    (nn.Sequential(nn.Linear(3, 3), nn.Softmax(dim=0)), "must name dim >= 1"),
    (nn.Sequential(nn.Flatten(0), nn.Linear(3, 3)), "flattens the batch axis"),
    (nn.Sequential(nn.Embedding(5, 3, max_norm=1.0)), "max_norm"),
])
def test_unsupported_layers_are_refused_by_name(model, needle):
    with pytest.raises((FusionError, ValueError)) as err:
        fuse([model, copy.deepcopy(model)])
    assert needle in str(err.value)


def test_bad_members_and_hparams_are_refused():
    with pytest.raises(FusionError, match="different parameter shapes"):
        fuse([build("mlp", 4), build("mlp", 5)])
    with pytest.raises(FusionError, match="different module structure"):
        fuse([build("mlp", 4), build("mlp_bn", 4)])
    with pytest.raises(ValueError, match="no models"):
        fuse([])
    fm = fuse([build("mlp", 4) for _ in range(2)])
    with pytest.raises(TypeError, match="RMSprop"):
        fused_optimizer(torch.optim.RMSprop, fm, lr=0.1)
    with pytest.raises(ValueError, match="expected one value or 2"):
        fused_optimizer(torch.optim.SGD, fm, lr=[0.1, 0.2, 0.3])
    with pytest.raises(TypeError, match="unknown hyperparameters"):
        fused_optimizer(torch.optim.SGD, fm, lr=0.1, betas=(0.9, 0.9), foo=1)
    with pytest.raises(ValueError, match="leading axis F=2"):
        fm(torch.randn(3, 4, 5), stacked=True)
