"""The timeline arithmetic the gate test and the benchmark read their figures from."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.bubbles.timeline import (
    bubble_ratio,
    idle_windows,
    merge,
    one_f_one_b_bubble,
    overlap,
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
