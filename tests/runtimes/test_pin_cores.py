"""pin_cores: CPU stand-in slots get disjoint cores where the host has enough (pure)."""

from __future__ import annotations

from nbtune.runtimes.dask.driver_side.cluster import Slot, pin_cores


def slots(threads, host="h"):
    return {g: Slot(g, f"w{g}", 0, host, None, t) for g, t in enumerate(threads)}


def test_each_slot_gets_its_own_cores_in_gpu_order():
    info = {"a": {"host": "h", "cores": [0, 1, 2, 3]}}
    out = pin_cores(slots([1.0, 2.0, 1.0]), info)
    assert [out[g].cores for g in range(3)] == [(0,), (1, 2), (3,)]


def test_a_host_without_enough_cores_is_left_unpinned():
    info = {"a": {"host": "h", "cores": [0, 1]}}
    out = pin_cores(slots([1.0, 1.0, 1.0]), info)
    assert all(s.cores == () for s in out.values())


def test_hosts_are_pinned_apart_and_unknown_cores_leave_a_host_alone():
    s = {**slots([1.0], "h1"), 1: Slot(1, "w1", 0, "h2", None, 1.0)}
    out = pin_cores(s, {"a": {"host": "h1", "cores": [4, 5]}, "b": {"host": "h2", "cores": []}})
    assert out[0].cores == (4,) and out[1].cores == ()
