"""Elastic split: each part continues exactly as its members would have together."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.fusion import FusedCosineAnnealingLR, fuse, fused_loss, fused_optimizer
from nbtune.fusion.elastic import even_parts, split_fused

from .models import FAMILIES, build, inputs
from .test_equivalence import assert_members_equal


def step(fm, opt, sched, x, y):
    total, _ = fused_loss(F.cross_entropy, fm(x), y)
    opt.zero_grad()
    total.backward()
    opt.step()
    sched.step()


@settings(max_examples=8)
@given(family=st.sampled_from(FAMILIES), f=st.integers(2, 5), parts=st.integers(1, 5),
       seed=st.integers(0, 999), adam=st.booleans())
def test_split_parts_continue_like_the_whole(family, f, parts, seed, adam):
    parts = min(parts, f)
    torch.manual_seed(seed)
    fm = fuse([build(family, 5) for _ in range(f)])
    cls = torch.optim.AdamW if adam else torch.optim.SGD
    hp = {"lr": [0.01 * (k + 1) for k in range(f)]}
    hp |= {} if adam else {"momentum": 0.9}
    opt = fused_optimizer(cls, fm, **hp)
    sched = FusedCosineAnnealingLR(opt, T_max=[3 + k for k in range(f)])
    gen = torch.Generator().manual_seed(seed)
    batches = [(inputs(family, 6, gen), torch.randint(0, 3, (6,), generator=gen))
               for _ in range(4)]
    for x, y in batches[:2]:
        step(fm, opt, sched, x, y)
    pieces = split_fused(fm, opt, [sched], parts)
    assert sorted(i for p in even_parts(f, parts) for i in p) == list(range(f))
    for x, y in batches[2:]:  # the whole goes on, and so does each part
        step(fm, opt, sched, x, y)
        for m2, o2, (s2,) in pieces:
            step(m2, o2, s2, x, y)
    for (m2, _, (s2,)), members in zip(pieces, even_parts(f, parts), strict=True):
        assert m2.members == len(members)
        assert_members_equal(m2, [fm.defuse(k) for k in members])
        assert s2.get_last_lr() == pytest.approx([sched.get_last_lr()[k] for k in members])


def test_split_validates():
    fm = fuse([build("mlp", 4) for _ in range(3)])
    with pytest.raises(ValueError, match="overlap"):
        split_fused(fm, parts=[[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="parts"):
        split_fused(fm, parts=4)
    before = copy.deepcopy(fm.state_dict())
    split_fused(fm, parts=3)
    assert fm.members == 3 and all(torch.equal(before[k], v)
                                   for k, v in fm.state_dict().items())
