"""Per-member checkpoints: members paused in one unit and fused again elsewhere (a SHA
promotion, an elastic split through a checkpoint) continue exactly as if never taken out."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.fusion import fuse, fused_loss, fused_optimizer
from nbtune.fusion.checkpoint import member_checkpoint, restore_members

from .models import FAMILIES, build, inputs
from .test_equivalence import assert_members_equal


def step(fm, opt, x, y):
    total, _ = fused_loss(F.cross_entropy, fm(x), y)
    opt.zero_grad()
    total.backward()
    opt.step()


def hparams(adam, members):
    hp = {"lr": [0.01 * (k + 1) for k in members]}
    return hp if adam else hp | {"momentum": [0.5 + 0.1 * k for k in members]}


@settings(max_examples=8, deadline=None)
@given(family=st.sampled_from(FAMILIES), f=st.integers(2, 5), seed=st.integers(0, 999),
       adam=st.booleans(), data=st.data())
def test_refused_members_continue_like_the_survivors(family, f, seed, adam, data):
    promoted = sorted(data.draw(st.sets(st.integers(0, f - 1), min_size=1)))
    torch.manual_seed(seed)
    cls = torch.optim.Adam if adam else torch.optim.SGD
    fm = fuse([build(family, 5) for _ in range(f)])
    opt = fused_optimizer(cls, fm, **hparams(adam, range(f)))
    gen = torch.Generator().manual_seed(seed)
    batches = [(inputs(family, 6, gen), torch.randint(0, 3, (6,), generator=gen))
               for _ in range(4)]
    for x, y in batches[:2]:
        step(fm, opt, x, y)
    cks = [member_checkpoint(fm, opt, k) for k in promoted]
    fm.keep(promoted)  # the survivors in place, as the reference
    # promoted members fused again from fresh builds (other initial weights) + checkpoints
    fm2 = fuse([build(family, 5) for _ in promoted])
    opt2 = fused_optimizer(cls, fm2, **hparams(adam, promoted))
    restore_members(fm2, opt2, cks)
    assert_members_equal(fm2, [fm.defuse(i) for i in range(len(promoted))], atol=0)
    for x, y in batches[2:]:
        step(fm, opt, x, y)
        step(fm2, opt2, x, y)
    assert_members_equal(fm2, [fm.defuse(i) for i in range(len(promoted))], atol=1e-6)


def test_restore_refuses_what_cannot_stack():
    torch.manual_seed(0)
    fm = fuse([build("mlp", 4) for _ in range(2)])
    opt = fused_optimizer(torch.optim.Adam, fm, lr=0.01)
    x, y = torch.randn(6, 5), torch.randint(0, 3, (6,))
    step(fm, opt, x, y)
    early = member_checkpoint(fm, opt, 0)
    step(fm, opt, x, y)
    late = member_checkpoint(fm, opt, 1)
    fm2 = fuse([build("mlp", 4) for _ in range(2)])
    opt2 = fused_optimizer(torch.optim.Adam, fm2, lr=0.01)
    with pytest.raises(ValueError, match="same step"):
        restore_members(fm2, opt2, [early, late])
    with pytest.raises(ValueError, match="no optimizer state"):
        restore_members(fm2, opt2, [early, None])
    with pytest.raises(ValueError, match="2 checkpoints for F=1"):
        restore_members(fuse([build("mlp", 4)]), None, [early, late])
    sgd = fused_optimizer(torch.optim.SGD, fm2, lr=0.01, momentum=0.9)
    with pytest.raises(ValueError, match="Adam checkpoint for a SGD"):
        restore_members(fm2, sgd, [early, early])
    with pytest.raises(IndexError):
        member_checkpoint(fm, opt, 2)
