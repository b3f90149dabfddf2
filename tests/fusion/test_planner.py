"""Trial Planner: grouping by shape-changing hyperparameters, worker shares, F_max."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.fusion.memory import MemoryProfile, fusion_limit, measure_peak, profile_memory
from nbtune.fusion.trial_planner import group_trials, plan_fusion, share_workers, split_group

from .steps import wide_mlp_step

configs = st.lists(st.fixed_dictionaries({
    "batch_size": st.sampled_from([32, 64, 128]), "width": st.sampled_from([8, 16]),
    "lr": st.floats(1e-4, 1.0)}), min_size=1, max_size=40)


@given(cfgs=configs)
def test_groups_share_shape_keys_and_cover_every_trial_once(cfgs):
    groups = group_trials(cfgs, ["width"])
    seen = sorted(i for g in groups for i in g.trials)
    assert seen == list(range(len(cfgs)))
    for g in groups:
        shape = {(cfgs[i]["width"], cfgs[i]["batch_size"]) for i in g.trials}
        assert len(shape) == 1
        assert g.batch_size == cfgs[g.trials[0]]["batch_size"]
    assert len({g.key for g in groups}) == len(groups)


@given(cfgs=configs, workers=st.integers(1, 32), weighting=st.sampled_from(["paper", "even"]))
def test_worker_shares(cfgs, workers, weighting):
    groups = group_trials(cfgs, ["width"])
    share = share_workers(groups, workers, weighting)
    assert sum(share) <= workers
    assert all(0 <= s <= len(g.trials) for s, g in zip(share, groups, strict=True))
    if workers >= len(groups):
        assert min(share) >= 1
        # nobody is capped by its trial count -> every worker is used
        if all(s < len(g.trials) for s, g in zip(share, groups, strict=True)):
            assert sum(share) == workers
    else:
        assert sum(share) == workers


def test_paper_weighting_is_batch_times_trials_and_even_is_not():
    cfgs = [{"batch_size": 128, "width": 8}] * 12 + [{"batch_size": 32, "width": 8}] * 4
    groups = group_trials(cfgs, ["width"])
    assert [g.weight for g in groups] == [128 * 12, 32 * 4]
    assert share_workers(groups, 8, "paper") == [7, 1]
    assert share_workers(groups, 8, "even") == [4, 4]


@given(n=st.integers(0, 60), workers=st.integers(1, 16), f_max=st.integers(1, 20))
def test_split_group_is_even_and_respects_f_max(n, workers, f_max):
    units = split_group(list(range(n)), workers, f_max)
    assert [t for u in units for t in u] == list(range(n))
    if n:
        sizes = [len(u) for u in units]
        assert max(sizes) <= f_max and max(sizes) - min(sizes) <= 1
        assert len(units) == min(n, max(workers, -(-n // f_max)))


def test_plan_fusion_units_cover_trials():
    cfgs = [{"batch_size": b, "width": w, "lr": i / 100}
            for i, (b, w) in enumerate([(32, 8), (64, 8), (32, 16)] * 10)]
    plan = plan_fusion(cfgs, ["width"], workers=4, f_max=4)
    assert sorted(t for u in plan.units for t in u.trials) == list(range(30))
    assert all(len(u.trials) <= 4 for u in plan.units)
    for u in plan.units:
        assert len({(cfgs[t]["batch_size"], cfgs[t]["width"]) for t in u.trials}) == 1


@given(f1=st.integers(10, 10**9), per=st.integers(1, 10**8), limit=st.integers(1, 10**10),
       margin=st.floats(0, 0.5))
def test_fusion_limit_stays_under_the_margin(f1, per, limit, margin):
    prof = MemoryProfile(f1, f1 + per)
    if f1 > limit * (1 - margin):
        with pytest.raises(ValueError, match="one member needs"):
            fusion_limit(prof, limit, margin)
        return
    f = fusion_limit(prof, limit, margin)
    assert prof.predict(f) <= limit * (1 - margin) or f == 1
    assert prof.predict(f + 1) > limit * (1 - margin)


@pytest.mark.slow
def test_f_max_keeps_measured_memory_under_the_limit():
    """Measure F = 1, 2 in fresh processes, set a limit, measure at F_max: under it."""
    prof = profile_memory(wide_mlp_step)
    assert prof.f2 > prof.f1, prof
    limit = prof.predict(6)  # room for about six members; with the margin fewer
    f_max = fusion_limit(prof, limit, margin=0.1)
    assert 2 <= f_max < 6
    assert measure_peak(wide_mlp_step, f_max) <= limit
