"""The bubble model's maths with measured co-location numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.allocators.bubble_model import CoLocation, gated_idle
from nbtune.allocators.bubbles import BubbleSqueezer, PipelineHostModel

idle_shares = st.floats(0.0, 0.95)
slowdowns = st.floats(0.0, 3.0)
fills = st.floats(0.0, 1.0)
stretches = st.floats(0.5, 2.0)


@given(st.integers(2, 6), st.integers(1, 16), st.floats(0.1, 5.0), st.floats(0.05, 1.0),
       st.integers(1, 4), st.data())
def test_no_slowdown_and_fill_equal_to_efficiency_is_the_old_model(p, m, T, eff, iters, data):
    idle = tuple(data.draw(idle_shares) for _ in range(p))
    old = PipelineHostModel(p, m, iteration_time=T, activation_gb=1.0, efficiency=eff, idle=idle)
    new = PipelineHostModel(p, m, iteration_time=T, activation_gb=1.0, efficiency=eff, idle=idle,
                       colocation=CoLocation(slowdown=0.0, fill=eff))
    assert new.gated_iteration_time == T
    for s in range(p):
        assert new.guest_speed(s) == pytest.approx(old.guest_speed(s), rel=1e-12, abs=1e-12)
        assert new.ephemeral_gpus(0)[s].speed == pytest.approx(old.ephemeral_gpus(0)[s].speed)
        assert [t for w in new.windows(s, iters * T) for t in (w.start, w.end)] == pytest.approx(
            [t for w in old.windows(s, iters * T) for t in (w.start, w.end)])
    assert BubbleSqueezer.speedup_bound(new, 2) == pytest.approx(BubbleSqueezer.speedup_bound(old, 2))


@given(idle_shares, slowdowns, slowdowns, fills, stretches, st.floats(0.01, 5.0))
def test_a_slower_host_has_longer_iterations_and_more_bubble(i, s1, s2, phi, kappa, T):
    lo, hi = sorted((s1, s2))
    a, b = CoLocation(lo, phi, kappa), CoLocation(hi, phi, kappa)
    assert a.iteration_time(T) <= b.iteration_time(T)
    assert a.idle_share(i) <= b.idle_share(i) + 1e-12
    assert a.bubble_seconds(T, i) <= b.bubble_seconds(T, i) + 1e-12
    # the stage's compute is what the stretch says, whatever the slowdown
    busy = b.iteration_time(T) * (1 - b.idle_share(i))
    assert busy == pytest.approx(min(kappa * (1 - i) * T, b.iteration_time(T)), rel=1e-9, abs=1e-12)


@given(st.integers(2, 6), st.floats(0.1, 5.0), st.data())
def test_a_guest_never_progresses_faster_than_its_stage_idles(p, T, data):
    idle = tuple(data.draw(idle_shares) for _ in range(p))
    probes = tuple(CoLocation(data.draw(slowdowns), data.draw(fills), data.draw(stretches))
                   for _ in range(p))
    host = PipelineHostModel(p, 4, iteration_time=T, activation_gb=1.0, idle=idle, colocation=probes)
    assert host.gated_iteration_time == pytest.approx(T * (1 + max(c.slowdown for c in probes)))
    for s in range(p):
        assert 0.0 <= host.guest_speed(s) <= host.gated_stage_idle(s) <= 1.0
        total = sum(w.end - w.start for w in host.windows(s, 3 * host.gated_iteration_time))
        assert total == pytest.approx(3 * host.gated_iteration_time * host.gated_stage_idle(s),
                                      rel=1e-9, abs=1e-9)


@given(idle_shares, slowdowns, fills, stretches, st.floats(0.01, 2.0), st.integers(1, 8))
def test_a_probe_reads_back_the_numbers_that_made_its_iterations(i, sigma, phi, kappa, T, n):
    c = CoLocation(sigma, phi, kappa)
    busy_held, busy_gated = (1 - i) * T, kappa * (1 - i) * T
    bubble = c.bubble_seconds(T, i, n)
    if bubble <= 0:
        return
    got = CoLocation.measure([T] * n, [c.iteration_time(T)] * n, held_busy_s=[busy_held] * n,
                             gated_busy_s=[busy_gated] * n, bubble_s=bubble,
                             progress_s=phi * bubble)
    if busy_held > 0:
        assert got.compute_stretch == pytest.approx(kappa, rel=1e-9)
    assert got.slowdown == pytest.approx(sigma, rel=1e-9, abs=1e-12)
    assert got.fill == pytest.approx(phi, rel=1e-9, abs=1e-12)


def test_a_probe_compares_medians_and_clamps_fill():
    got = CoLocation.measure([1.0, 1.0, 9.0], [1.3, 1.3, 0.1], held_busy_s=[0.5] * 3,
                             gated_busy_s=[0.5] * 3, bubble_s=2.0, progress_s=3.0)
    assert got.slowdown == pytest.approx(0.3)  # one descheduled iteration does not set it
    assert got.fill == 1.0  # a guest cannot gain on its solo speed in a bubble
    assert gated_idle(0.5, got) == pytest.approx(1 - 0.5 / 1.3)
    idle_stage = CoLocation.measure([1.0], [1.2], held_busy_s=[0.0], gated_busy_s=[0.0],
                                    bubble_s=1.2, progress_s=0.6)
    assert idle_stage.compute_stretch == 1.0 and idle_stage.fill == 0.5


def test_bad_numbers_are_refused():
    with pytest.raises(ValueError, match="slowdown"):
        CoLocation(slowdown=-1.0)
    with pytest.raises(ValueError, match="fill"):
        CoLocation(fill=1.5)
    with pytest.raises(ValueError, match="compute_stretch"):
        CoLocation(compute_stretch=0.0)
    with pytest.raises(ValueError, match="held and gated"):
        CoLocation.measure([], [1.0], held_busy_s=[1.0], gated_busy_s=[1.0], bubble_s=1, progress_s=0)
    with pytest.raises(ValueError, match="one probe per stage"):
        PipelineHostModel(2, 4, colocation=(CoLocation(),))
