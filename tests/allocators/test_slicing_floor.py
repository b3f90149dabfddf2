"""Packing on a time-sliced core is bounded by the measured runnable share (CPU stand-ins).

p trials on one core get at most ``min(p, 1/runnable)`` times one trial's
throughput. Step times measured at two moments of a shared machine's load once
read as a packing gain on a core a CPU-bound trial already filled, and
``auto`` packed a whole second run (vs_peers: warm 108 s against cold 67 s).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.allocators.profile_summary import slicing_floor, summarize
from nbtune.allocators.profiling import Profile
from nbtune.core.resources import Demand


@settings(max_examples=200, deadline=None)
@given(t1=st.floats(0.01, 100.0), runnable=st.floats(0.01, 1.0),
       packed=st.lists(st.floats(0.001, 1000.0), max_size=4))
def test_no_packed_time_beats_time_slicing(t1, runnable, packed):
    pack = {1: t1, **{p: t for p, t in enumerate(packed, start=2)}}  # p = 2, 3, ... measured
    out = slicing_floor(pack, runnable, 0.1)
    room = 1 / runnable
    for p, t in out.items():
        assert t >= p * t1 / min(p, room) * (1 - 1e-9)  # the bound
        if p in pack:
            assert t >= pack[p]  # a floor: never faster than measured
    assert out[1] == t1
    prof = summarize(Profile("s"), pack, {}, Demand(), None, 0.1, runnable=runnable)
    if room <= 1.1:  # no room to repay a second trial: c = 1, known without a probe
        assert prof.c == 1 and prof.c_measured


def test_a_noisy_packed_time_on_a_full_core_gives_c_1():
    """Seen in a warm vs_peers run: alone 1.09 s/epoch (measured under start-up load), packed 0.57 s."""
    noisy = {1: 1.088, 2: 0.568}
    assert summarize(Profile("s"), noisy, {}, Demand(), None, 0.1).c == 2  # timing alone: packs
    prof = summarize(Profile("s"), noisy, {}, Demand(), None, 0.1, runnable=0.98)
    assert prof.c == 1 and prof.packing[2] >= 2 * 1.088 * 0.98


def test_a_trial_that_waits_on_io_may_still_be_packed():
    """Runnable 0.4: a second trial fills the idle 60 %; the measured gain stands."""
    prof = summarize(Profile("s"), {1: 1.0, 2: 1.1}, {}, Demand(), None, 0.1, runnable=0.4)
    assert prof.c == 2 and prof.packing[2] == 1.1


def test_without_a_runnable_share_timing_decides_as_before():
    pack = {1: 1.0, 2: 1.2}
    assert summarize(Profile("s"), pack, {}, Demand(), None, 0.1).packing == pack
