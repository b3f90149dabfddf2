"""The engine's resource ledger: the one writer of placements, loads, counts and GPU-seconds."""

from __future__ import annotations

import heapq
import random

import pytest

from nbtune.core.resources import ClusterSpec
from nbtune.core.trial import TrialRecord
from nbtune.engine.state import IdleSet, InvariantError, ResourceLedger


def _ledger(n: int = 4) -> ResourceLedger:
    led = ResourceLedger()
    led.set_cluster(ClusterSpec.homogeneous(n, gpus_per_node=2))
    return led


def test_gpu_seconds_accrue_at_each_share_across_a_resize():
    led, t = _ledger(), TrialRecord(0, {})
    led.place(t, ((0, 1.0), (1, 1.0)), 0.0)
    assert (t.share, t.share_since) == (2.0, 0.0)
    assert t.gpu_seconds_at(3.0) == 6.0  # read live, not yet banked
    led.release(t, 3.0)  # a resize: release at the old share, place at the new one
    led.place(t, ((2, 0.5),), 3.0)
    assert t.gpu_seconds == 6.0 and t.share == 0.5
    assert led.release(t, 7.0) == ((2, 0.5),)
    assert t.gpu_seconds == 8.0 and t.share == 0.0
    assert led.release(t, 9.0) is None and t.gpu_seconds == 8.0  # holds nothing: no change
    assert [(r.gpu_id, r.start, r.end) for r in led.log] == [(0, 0.0, 3.0), (1, 0.0, 3.0),
                                                             (2, 3.0, 7.0)]


def test_load_count_and_idle_follow_places_releases_and_a_shrinking_cluster():
    led, a, b = _ledger(), TrialRecord(0, {}), TrialRecord(1, {})
    led.place(a, ((0, 0.5),), 0.0)
    led.place(b, ((0, 0.25), (1, 1.0)), 0.0)
    assert dict(led.gpu_load) == {0: 0.75, 1: 1.0, 2: 0.0, 3: 0.0}
    assert dict(led.gpu_count) == {0: 2, 1: 1, 2: 0, 3: 0}
    assert set(led.idle_gpus) == {2, 3}
    led.release(a, 1.0)
    assert (led.gpu_load[0], led.gpu_count[0]) == (0.25, 1)
    lost = led.set_cluster(ClusterSpec.homogeneous(1))  # GPU 1 is gone under trial 1
    assert lost == [1] and dict(led.gpu_count) == {0: 1}
    led.release(b, 2.0)
    assert dict(led.gpu_load) == {0: 0.0} and dict(led.gpu_count) == {0: 0}
    assert set(led.idle_gpus) == {0}
    led.check({0: 1.0})


def test_what_allocators_read_is_live_and_read_only():
    led, t = _ledger(), TrialRecord(0, {})
    running, load, count, held = led.running, led.gpu_load, led.gpu_count, led.held
    led.place(t, ((3, 1.0),), 0.0)
    assert running[0] == ((3, 1.0),) and load[3] == 1.0 and count[3] == 1  # live
    for view, key, value in ((running, 1, ()), (load, 3, 0.0), (count, 3, 0), (held, 0, ())):
        with pytest.raises(TypeError):
            view[key] = value


def test_a_paused_trial_is_held_where_it_ran_until_placed_or_forgotten():
    led, t = _ledger(), TrialRecord(0, {})
    assert not led.hold(0)  # never ran: nowhere to wait
    led.place(t, ((1, 1.0),), 0.0)
    led.release(t, 2.0, pause=True)
    assert led.paused_on == {0: ((1, 1.0),)} and not led.held
    assert led.hold(0) and dict(led.held) == {0: ((1, 1.0),)}
    led.place(t, ((1, 1.0),), 3.0)  # promoted: it goes on, nothing waits any more
    assert not led.paused_on and not led.held
    led.release(t, 4.0, pause=True)
    led.hold(0)
    assert led.forget(0) and not led.forget(0)  # True only while a process waited


def test_check_catches_a_count_that_drifted():
    led, t = _ledger(), TrialRecord(0, {})
    led.place(t, ((0, 0.5),), 0.0)
    led.check({})
    led.count[0] += 1
    with pytest.raises(InvariantError, match="count drifted"):
        led.check({})


def test_the_version_moves_with_every_change_of_the_ledger():
    led, t = _ledger(), TrialRecord(0, {})
    seen = [led.version]
    led.place(t, ((0, 0.5),), 0.0)
    seen.append(led.version)
    led.release(t, 1.0, pause=True)
    seen.append(led.version)
    assert led.hold(0)
    seen.append(led.version)
    led.forget(0)
    seen.append(led.version)
    led.set_cluster(ClusterSpec.homogeneous(2, gpus_per_node=2))
    seen.append(led.version)
    assert seen == sorted(set(seen))  # each change a new version
    assert led.release(t, 2.0) is None and led.version == seen[-1]  # nothing held: no change


def test_the_idle_set_hands_out_its_lowest_ids_as_nsmallest_does():
    rng, idle = random.Random(0), IdleSet(range(64))
    for _ in range(3000):  # GPUs taken and freed at random: stale heap entries, duplicates
        g = rng.randrange(64)
        if g in idle and rng.random() < 0.6:
            idle.discard(g)
        else:
            idle.add(g)
        k = rng.randrange(1, 6)
        assert idle.lowest(k) == heapq.nsmallest(k, idle)
    assert type(idle - {0}) is set  # a view's filtered copy offers no lowest of the unfiltered
    idle.clear()
    idle |= {5, 3}
    idle.update([9, 1])
    assert idle.lowest(9) == [1, 3, 5, 9] and idle.lowest(0) == []
