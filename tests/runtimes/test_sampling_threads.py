"""The CPU meter reads trial threads (``execution="thread"``) by their own CPU time."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from nbtune.runtimes.dask.worker_side.cpu_meter import CpuMeter, thread_times
from tests.runtimes.cpu_bracket import around, share_bounds, until_cpu

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat: Linux")


def test_a_spinning_thread_fills_its_slot_and_an_idle_one_does_not():
    stop = threading.Event()
    ids: dict[str, int] = {}

    def spin() -> None:
        ids["spin"] = threading.get_native_id()
        while not stop.is_set():
            pass

    def idle() -> None:
        ids["idle"] = threading.get_native_id()
        stop.wait()

    threads = [threading.Thread(target=f) for f in (spin, idle)]
    for t in threads:
        t.start()
    try:
        while len(ids) < 2:
            time.sleep(0.01)
        meter = CpuMeter(active=lambda: [], threads=lambda: [(0, ids["spin"]), (1, ids["idle"])])

        def cpu():
            return {k: thread_times(tid)[0] for k, tid in ids.items()}

        _, a = around(cpu, lambda: meter.sample(2, 1.0))
        until_cpu(lambda: thread_times(ids["spin"])[0], 0.2)
        ((busy, _), (quiet, _)), b = around(cpu, lambda: meter.sample(2, 1.0))
    finally:
        stop.set()
        for t in threads:
            t.join()
    # each thread's own CPU time over the interval, whatever share of a core the box gave it
    lo, hi = share_bounds(a, b, "spin")
    assert 0.0 < lo <= busy <= hi, (lo, busy, hi)
    lo, hi = share_bounds(a, b, "idle")
    assert lo <= quiet <= hi and quiet < busy, (lo, quiet, hi)
    assert meter.demand[0] is not None and meter.demand[0] > 0.5  # ran or waited to run
    # gone: no reading, no error (join() returns before the kernel has reaped the thread)
    deadline = time.monotonic() + 60
    while thread_times(ids["idle"]) is not None:
        assert time.monotonic() < deadline, "the ended thread is still read"
        time.sleep(0.01)
