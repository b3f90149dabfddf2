"""The timeline arithmetic the gate test and the benchmark read their figures from."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.bubbles.timeline import (
    bubble_ratio,
    clip,
    idle_windows,
    merge,
    one_f_one_b_bubble,
    overlap,
    step_shares,
    subtract,
    total,
)

spans = st.lists(st.tuples(st.floats(0, 100), st.floats(0, 10)).map(
    lambda t: ("x", t[0], t[0] + t[1])), max_size=12)


@given(spans, spans)
def test_overlap_is_symmetric_and_bounded(a, b):
    o = overlap(a, b)
    assert abs(o - overlap(b, a)) < 1e-9
    assert -1e-9 <= o <= min(total(merge(a)), total(merge(b))) + 1e-9
    assert abs(overlap(a, a) - total(merge(a))) < 1e-9


@given(spans)
def test_idle_and_busy_partition_the_window(a):
    lo, hi = 10.0, 60.0
    idle = idle_windows(a, lo, hi)
    busy = overlap(a, [("w", lo, hi)])
    assert abs(total(idle) + busy - (hi - lo)) < 1e-6
    assert overlap([("i", s, e) for s, e in idle], a) < 1e-9


@given(spans, spans)
def test_subtract_leaves_exactly_the_part_outside(a, b):
    rest = subtract(a, b)
    assert overlap(rest, b) < 1e-9
    assert abs(total(merge(rest)) - (total(merge(a)) - overlap(a, b))) < 1e-6


def test_bubble_ratio_of_an_ideal_1f1b_schedule_is_the_formula():
    # p = 2, m = 4, F = B = 1: stage 0 runs F F . B F B F B B ; stage 1 waits one slot, drains one
    s0 = [("F", 0, 1), ("F", 1, 2), ("B", 3, 4), ("F", 4, 5), ("B", 5, 6), ("F", 6, 7),
          ("B", 7, 8), ("B", 9, 10)]
    s1 = [("F", 1, 2), ("B", 2, 3), ("F", 3, 4), ("B", 4, 5), ("F", 5, 6), ("B", 6, 7),
          ("F", 7, 8), ("B", 8, 9)]
    assert bubble_ratio([s0, s1]) == pytest.approx([one_f_one_b_bubble(2, 4)] * 2) == [0.2, 0.2]
    assert bubble_ratio([s0 + [("O", 10, 12)], s1]) == pytest.approx([0.2, 0.2])  # the optimizer step is apart


def test_a_step_that_ends_in_a_window_is_credited_only_its_compute_inside():
    windows = [(0.0, 2.0), (6.0, 8.0)]
    running = [("run", 0.0, 1.0), ("run", 3.0, 4.0), ("run", 6.0, 7.0)]
    # step 0 runs wholly in a window; step 1 half outside, though it ends inside one;
    # step 2 has no running time at all
    assert step_shares(0.0, [1.0, 7.0, 9.0], running, windows) == [1.0, 0.5, 0.0]


windows_st = st.lists(st.tuples(st.floats(0, 100), st.floats(0, 10)).map(
    lambda t: (t[0], t[0] + t[1])), max_size=8)


@given(spans, windows_st, st.floats(0, 50), st.lists(st.floats(0, 60), max_size=10),
       st.floats(0.01, 5))
def test_credited_progress_is_the_compute_inside_the_windows_at_most(running, windows, started,
                                                                     gaps, solo_step):
    ends = [started + sum(gaps[:i + 1]) for i in range(len(gaps))]
    shares = step_shares(started, ends, running, windows)
    assert len(shares) == len(ends) and all(0.0 <= x <= 1.0 for x in shares)
    assert solo_step * sum(shares) <= solo_step * len(ends)
    runs = merge(running)
    prev, compute = started, []
    for e in ends:
        compute.append(total(clip(runs, prev, e)))
        prev = e
    # share x compute, summed: exactly the guest's running time inside the windows while
    # it was in a finished step
    last = ends[-1] if ends else started
    inside = overlap([("r", s, e) for s, e in clip(runs, started, last)],
                     [("w", s, e) for s, e in windows])
    assert sum(x * c for x, c in zip(shares, compute, strict=True)) == pytest.approx(
        inside, abs=1e-6)
    # a guest no faster than alone is credited no more than its compute inside the windows
    slowest_alone = min((c for c in compute if c > 0), default=solo_step)
    assert slowest_alone * sum(shares) <= inside + 1e-6
    assert all(x == 0.0 for x, c in zip(shares, compute, strict=True) if c == 0)


@given(st.lists(st.tuples(st.floats(1, 5), st.lists(st.tuples(st.floats(0.1, 3),
                                                               st.booleans()),
                                                     min_size=1, max_size=4)),
                max_size=8),
       st.floats(0.01, 5))
def test_steps_wholly_inside_or_outside_the_windows_count_as_ending_inside(steps, solo_step):
    """Where no step straddles a window's edge, the share is the old whole-step count."""
    t, running, windows, ends = 0.0, [], [], []
    for gap, pieces in steps:
        inside_step = pieces[0][1]  # a step's pieces run all inside or all outside
        for length, _ in pieces:
            t += gap
            running.append(("run", t, t + length))
            if inside_step:
                windows.append((t - 0.25, t + length + 0.25))  # gaps >= 1: never reaches a neighbour
            t += length
        ends.append(t)
    shares = step_shares(0.0, ends, running, windows)
    ended_inside = sum(any(lo <= e < hi for lo, hi in windows) for e in ends)
    assert sum(shares) == pytest.approx(ended_inside)
    assert solo_step * sum(shares) == pytest.approx(solo_step * ended_inside)
