"""The bubble model's per-resumption slowdown term.

A guest's cost is paid each time its stage's compute resumes after idling, so
a probe at one microbatch count must predict a host at another through δ (seconds
per resumption) × the resumptions there, not through the ratio σ.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.allocators.bubble_model import CoLocation, resumptions
from nbtune.allocators.bubbles import PipelineHostModel

times = st.floats(0.01, 5.0)
counts = st.integers(1, 64)
delays = st.floats(0.0, 0.05)


@given(times, counts, delays, times, counts)
def test_a_probe_carries_its_delay_per_resumption_to_another_configuration(T, n, d, T2, n2):
    held, gated = [T] * 3, [T + d * n] * 3
    c = CoLocation.measure(held, gated, held_busy_s=[T / 2] * 3, gated_busy_s=[T / 2] * 3,
                           bubble_s=1.0, progress_s=0.5, held_resumptions=[n] * 3)
    assert c.chunk_delay == pytest.approx(d, rel=1e-9, abs=1e-12)
    # at its own configuration the term says what the ratio said
    assert c.at(T, n).slowdown == pytest.approx(c.slowdown, rel=1e-9, abs=1e-12)
    # elsewhere: δ·n' extra seconds on T', whatever σ was
    assert c.at(T2, n2).iteration_time(T2) == pytest.approx(T2 + d * n2, rel=1e-9)
    assert c.at(T2, n2).fill == c.fill and c.at(T2, n2).compute_stretch == c.compute_stretch


@given(times, st.integers(1, 16), delays)
def test_twice_the_microbatches_at_the_same_pace_pay_twice_the_delay(T, n, d):
    """The case the ratio got wrong: 8 microbatches, twice the chunks in about the same
    iteration time, so the slowdown doubles; σ alone would keep it."""
    c = CoLocation(slowdown=d * n / T, chunk_delay=d)
    extra = c.at(T, 2 * n).iteration_time(T) - T
    assert extra == pytest.approx(2 * d * n, rel=1e-9, abs=1e-12)
    assert c.iteration_time(T) - T == pytest.approx(d * n, rel=1e-9, abs=1e-12)


@given(st.integers(2, 5), st.integers(1, 16), times, st.data())
def test_the_model_paces_the_pipeline_by_its_most_delayed_stage(p, m, T, data):
    ds = [data.draw(delays) for _ in range(p)]
    ns = [float(data.draw(counts)) for _ in range(p)]
    probes = tuple(CoLocation(fill=0.5, chunk_delay=d) for d in ds)
    host = PipelineHostModel(p, m, iteration_time=T, activation_gb=1.0, idle=(0.3,) * p,
                        colocation=probes, resumptions=tuple(ns))
    assert host.gated_iteration_time == pytest.approx(T + max(d * n for d, n in zip(ds, ns, strict=True)),
                                                      rel=1e-9)
    for s in range(p):  # the longer iteration is idle time of the stage: bubbles grow
        assert host.gated_stage_idle(s) >= 0.3 - 1e-12
        assert 0.0 <= host.guest_speed(s) <= host.gated_stage_idle(s)


def test_without_a_measured_delay_or_resumptions_the_ratio_stands():
    ratio = CoLocation(slowdown=0.4, fill=0.5)
    assert ratio.at(1.0, 99) is ratio
    a = PipelineHostModel(2, 4, iteration_time=2.0, activation_gb=1.0, colocation=ratio,
                     resumptions=(9.0, 13.0))
    b = PipelineHostModel(2, 4, iteration_time=2.0, activation_gb=1.0,
                     colocation=CoLocation(slowdown=0.4, fill=0.5, chunk_delay=0.01))
    assert a.gated_iteration_time == pytest.approx(2.8) == b.gated_iteration_time


def test_a_negative_delay_from_a_noisy_probe_never_makes_time_run_backwards():
    c = CoLocation(slowdown=-0.1, chunk_delay=-0.5)
    assert c.at(1.0, 10).iteration_time(1.0) > 0
    assert c.at(1.0, 10).slowdown > -1


spans = st.lists(st.tuples(st.floats(0, 10), st.floats(0, 1)), max_size=20).map(
    lambda xs: sorted((s, s + w) for s, w in xs))


@given(spans, st.floats(0, 1), st.floats(0, 1))
def test_resumptions_fall_as_the_gap_that_counts_grows(xs, g1, g2):
    lo, hi = sorted((g1, g2))
    assert resumptions(xs, hi) <= resumptions(xs, lo) <= len(xs)
    assert (resumptions(xs, hi) >= 1) == bool(xs)


def test_resumptions_count_starts_after_idling():
    xs = [(0.0, 1.0), (1.0, 2.0), (2.5, 3.0), (3.0001, 4.0), (10.0, 11.0)]
    assert resumptions(xs) == 4  # touching chunks run on; any gap resumes
    assert resumptions(xs, gap=0.001) == 3
    assert resumptions([]) == 0


def test_bad_resumptions_are_refused():
    with pytest.raises(ValueError, match="resumptions"):
        PipelineHostModel(2, 4, resumptions=(1.0,))
    with pytest.raises(ValueError, match="resumptions"):
        PipelineHostModel(2, 4, resumptions=(1.0, -1.0))
    with pytest.raises(ValueError, match="chunk_delay"):
        CoLocation(chunk_delay=math.nan)
    with pytest.raises(ValueError, match="held > 0"):
        CoLocation(chunk_delay=0.01).at(0.0, 3)
