"""The CPU meter behind "CPU utilization (measured)": real processes, real CPU time."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from nbtune.runtimes.dask.sampling import _CpuMeter

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 30: pass"
BUSY_WITH_CHILD = ("import subprocess, sys\n"
                   f"subprocess.Popen([sys.executable, '-c', {BUSY!r}]).wait()")


def test_a_busy_trial_process_reads_busy_from_its_first_interval_and_an_idle_one_zero():
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    parent = subprocess.Popen([sys.executable, "-c", BUSY_WITH_CHILD])  # a data-loader-like child
    try:
        active = [(0, busy.pid), (1, idle.pid), (2, parent.pid)]
        meter = _CpuMeter(lambda: active)
        assert meter.sample(3, 1.0) is None  # the first call has no interval: no sample
        time.sleep(1.5)
        util = [u for u, _ in meter.sample(3, 1.0)]
        # a busy loop on a shared, loaded 2-core machine still gets a good part of a core
        assert util[0] > 0.15 and util[2] > 0.15, util
        assert util[1] < 0.1, util
        # the same busy process now serving another slot (a warm process reused) keeps its
        # baseline: its first interval there is not read as 0
        active[:] = [(1, busy.pid)]
        time.sleep(1.0)
        util = [u for u, _ in meter.sample(3, 1.0)]
        assert util[1] > 0.15 and util[0] == 0.0, util
    finally:
        for p in (busy, idle, parent):
            for c in psutil.Process(p.pid).children(recursive=True):
                c.kill()
            p.kill()
            p.wait()


def test_demand_reads_a_cpu_bound_trial_whole_however_little_cpu_it_gets():
    """Three busy processes on one core each get about a third of it, and each wants all of
    it: used CPU reads low, demand (CPU plus run-queue wait) reads about 1. A sleeper wants 0."""
    pin = "import os; os.sched_setaffinity(0, {0})\n"
    busy = [subprocess.Popen([sys.executable, "-c", pin + BUSY]) for _ in range(3)]
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        active = [(i, p.pid) for i, p in enumerate(busy)] + [(3, idle.pid)]
        meter = _CpuMeter(lambda: active)
        meter.sample(4, 1.0)
        time.sleep(1.5)
        util = [u for u, _ in meter.sample(4, 1.0)]
        assert all(u < 0.6 for u in util[:3]), util  # a third of one core each (or less)
        assert all(d is not None and d > 0.8 for d in meter.demand[:3]), meter.demand
        assert meter.demand[3] is not None and meter.demand[3] < 0.1, meter.demand
    finally:
        for p in (*busy, idle):
            p.kill()
            p.wait()
