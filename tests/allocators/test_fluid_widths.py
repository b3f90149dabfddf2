"""Water-filling math (Fluid Alg. 1 line 4) and widths -> placements."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.allocators.waterfill import fill_leftover, fluid_widths, gpus_needed, place_widths
from nbtune.core.resources import ClusterSpec, width


def test_fig5_toy_widths_follow_alg1():
    # 4 trials of 4, 4, 12, 30 s on 5 GPUs: 30/50*5 = 3, 12/50*5 = 1.2 -> 1, 0.4 -> 0 -> 1/c
    w = fluid_widths({0: 4.0, 1: 4.0, 2: 12.0, 3: 30.0}, 5, c=4, d=4)
    assert w == {3: 3.0, 2: 1.0, 0: 0.25, 1: 0.25}
    assert list(w) == [3, 2, 0, 1]  # non-increasing h, ties by id


def test_d_caps_and_c_floors():
    assert fluid_widths({0: 100.0}, 8, c=2, d=4) == {0: 4.0}
    assert fluid_widths({0: 1.0, 1: 1.0, 2: 1.0}, 1, c=2, d=4) == {0: 0.5, 1: 0.5, 2: 0.5}
    assert fluid_widths({0: 0.0, 1: 0.0}, 4, c=3, d=2) == {0: 1 / 3, 1: 1 / 3}


@pytest.mark.parametrize("bad", [dict(c=0), dict(c=1.5), dict(d=0.5), dict(n_gpus=-1)])
def test_bad_limits_are_refused(bad):
    args = dict(h1={0: 1.0}, n_gpus=2, c=2, d=2) | bad
    with pytest.raises(ValueError):
        fluid_widths(**args)


def test_bad_runtime_is_refused():
    with pytest.raises(ValueError, match="trial 7"):
        fluid_widths({7: float("nan")}, 2, 2, 2)


runtimes = st.dictionaries(st.integers(0, 50), st.floats(0.0, 1e4, allow_nan=False), min_size=1,
                           max_size=30)


@given(runtimes, st.integers(0, 64), st.integers(1, 8), st.integers(1, 8))
def test_widths_respect_limits_and_the_floor(h1, n, c, d):
    w = fluid_widths(h1, n, c, d)
    assert set(w) == set(h1)
    hs = [h1[t] for t in w]
    assert hs == sorted(hs, reverse=True)
    for x in w.values():
        assert 1 / c - 1e-12 <= x <= d
        assert x < 1 or x == int(x)
    # the floor never hands out more whole GPUs than there are (with c = 1 the 1/c
    # minimum is a whole GPU too, and trials beyond n simply queue)
    if c > 1:
        assert sum(x for x in w.values() if x >= 1) <= n


@given(runtimes, st.integers(1, 64), st.integers(1, 6), st.integers(1, 8))
def test_fill_leftover_only_grows_and_stays_within_the_cluster(h1, n, c, d):
    w = fluid_widths(h1, n, c, d)
    filled = fill_leftover(w, lambda t, x: h1[t] / x if x >= 1 else h1[t], n, c, d)
    assert list(filled) == list(w)
    for t in w:
        assert filled[t] >= w[t] and filled[t] <= d
    if gpus_needed(w, c) <= n:
        assert gpus_needed(filled, c) <= n


def test_fill_leftover_gives_spare_gpus_to_the_last_finisher():
    # 9 and 3 s on 10 GPUs: floor(7.5) = 7, floor(2.5) = 2, one GPU spare
    h1 = {0: 9.0, 1: 3.0}
    w = fluid_widths(h1, 10, 4, 8)
    assert w == {0: 7.0, 1: 2.0}
    f = fill_leftover(w, lambda t, x: h1[t] / x, 10, 4, 8)
    assert f == {0: 7.0, 1: 3.0}  # 3/2 > 9/7: the short one would finish last


# ---------------------------------------------------------------- placement
def _check_valid(placed, running, cluster, c):
    load = {g.gpu_id: 0.0 for g in cluster.gpus}
    count = {g.gpu_id: 0 for g in cluster.gpus}
    merged = {**running, **placed}
    for pl in merged.values():
        gs = [g for g, _ in pl]
        assert len(set(gs)) == len(gs)
        for g, s in pl:
            load[g] += s
            count[g] += 1
        if width(pl) > 1 + 1e-9:
            assert all(abs(s - 1.0) < 1e-9 for _, s in pl)
    for g in load:
        assert load[g] <= 1.0 + 1e-9
    return load, count


def test_toy_placement_packs_fractions_and_keeps_wide_on_one_node():
    cluster = ClusterSpec.homogeneous(5, gpus_per_node=4)
    w = {3: 3.0, 2: 1.0, 0: 0.25, 1: 0.25}
    placed = place_widths(w, cluster, {}, c=4)
    assert set(placed) == {0, 1, 2, 3}
    nodes = {cluster.by_id()[g].node for g, _ in placed[3]}
    assert len(nodes) == 1
    assert placed[0][0][0] == placed[1][0][0]  # the two fractions share one GPU
    _check_valid(placed, {}, cluster, 4)


def test_running_trials_stay_put_and_grow_in_place():
    cluster = ClusterSpec.homogeneous(4)
    running = {7: ((2, 1.0),), 8: ((0, 0.25),)}
    # same width: same GPU
    assert place_widths({7: 1.0}, cluster, running)[7] == ((2, 1.0),)
    # a fraction alone on its GPU grows to the whole GPU without moving
    assert place_widths({8: 1.0}, cluster, running)[8] == ((0, 1.0),)
    # growing keeps its own GPU first
    grown = place_widths({7: 3.0}, cluster, running)[7]
    assert grown[0] == (2, 1.0) and len(grown) == 3 and 0 not in [g for g, _ in grown]


def test_what_does_not_fit_is_left_out_or_kept():
    cluster = ClusterSpec.homogeneous(2)
    running = {1: ((0, 1.0),)}
    assert place_widths({5: 2.0}, cluster, running) == {}
    assert place_widths({5: 2.0}, cluster, running, shrink_to_fit=True) == {5: ((1, 1.0),)}
    assert place_widths({1: 3.0}, cluster, running) == {1: ((0, 1.0),)}


@given(
    st.lists(st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0]), min_size=1, max_size=20),
    st.integers(1, 10), st.integers(1, 4), st.integers(1, 4), st.booleans(),
)
def test_placements_never_overfill_a_gpu(ws, n, per_node, c, shrink):
    cluster = ClusterSpec.homogeneous(n, gpus_per_node=per_node)
    widths = {i: (1.0 / c if w < 1 else w) for i, w in enumerate(ws)}
    # half of them already run somewhere valid
    running = place_widths({i: w for i, w in widths.items() if i % 2 == 0}, cluster, {}, c=c)
    placed = place_widths(widths, cluster, running, c=c, shrink_to_fit=shrink)
    _, count = _check_valid(placed, {t: p for t, p in running.items() if t not in placed},
                            cluster, c)
    for t, pl in placed.items():
        if width(pl) < 1:
            assert count[pl[0][0]] <= c
        if not shrink and t not in running:
            assert math.isclose(width(pl), widths[t])
    for t in running:  # running trials are never dropped
        assert t in placed
