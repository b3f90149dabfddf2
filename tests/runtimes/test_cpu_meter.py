"""The CPU meter behind "CPU utilization (measured)": real processes, real CPU time.

What a process gets on a loaded machine is the machine's business, so the
shares are checked against the processes' own CPU clocks read around each of
the meter's calls (:mod:`tests.runtimes.cpu_bracket`), not against thresholds.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from nbtune.runtimes.dask.worker_side.cpu_meter import CpuMeter
from tests.runtimes.cpu_bracket import around, ready, share_bounds, tree_cpu, until_cpu

BUSY = ("import time\nprint('ready', flush=True)\n"
        "t = time.time()\nwhile time.time() - t < 600: pass")
IDLE = "import time\nprint('ready', flush=True)\ntime.sleep(600)"
BUSY_WITH_CHILD = ("import subprocess, sys\n"
                   f"subprocess.Popen([sys.executable, '-c', {BUSY!r}]).wait()")


def spawn(code: str) -> subprocess.Popen:
    """A child running ``code``; returns once it says it reached its loop (or sleep)."""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    ready(p)  # a data-loader-like child: its own child says it, on the inherited pipe
    return p


def test_a_busy_trial_process_reads_busy_from_its_first_interval_and_an_idle_one_zero():
    procs = [spawn(BUSY), spawn(IDLE), spawn(BUSY_WITH_CHILD)]
    busy, idle, parent = procs
    try:
        active = [(0, busy.pid), (1, idle.pid), (2, parent.pid)]
        meter = CpuMeter(lambda: active)

        def cpu():
            return {p.pid: tree_cpu(p.pid) for p in procs}

        first, a = around(cpu, lambda: meter.sample(3, 1.0))
        assert first is None  # the first call has no interval: no sample
        until_cpu(lambda: tree_cpu(busy.pid), 0.3)
        until_cpu(lambda: tree_cpu(parent.pid), 0.3)  # its child's CPU counts for it
        got, b = around(cpu, lambda: meter.sample(3, 1.0))
        util = [u for u, _ in got]
        for slot, p in enumerate(procs):
            lo, hi = share_bounds(a, b, p.pid)
            assert lo <= util[slot] <= hi, (slot, lo, util, hi)
        # busy: it used >= 0.3 s of the interval, the sleeper next to nothing
        assert util[0] > util[1] and util[2] > util[1], util
        # the same busy process now serving another slot (a warm process reused) keeps its
        # baseline: its first interval there is not read as 0
        active[:] = [(1, busy.pid)]
        until_cpu(lambda: tree_cpu(busy.pid), 0.3)
        got, c = around(cpu, lambda: meter.sample(3, 1.0))
        util = [u for u, _ in got]
        lo, hi = share_bounds(b, c, busy.pid)
        assert 0.0 < lo <= util[1] <= hi and util[0] == 0.0, (lo, util, hi)
    finally:
        for p in procs:
            for ch in psutil.Process(p.pid).children(recursive=True):
                ch.kill()
            p.kill()
            p.wait()


def test_demand_reads_a_cpu_bound_trial_whole_however_little_cpu_it_gets():
    """Three busy processes on one core share it, and each wants all of it: used CPU adds
    up to at most one core, demand (CPU plus run-queue wait) reads about 1 each. A sleeper
    wants 0."""
    pin = "import os; os.sched_setaffinity(0, {0})\n"
    procs = [spawn(pin + BUSY) for _ in range(3)] + [spawn(IDLE)]
    try:
        active = [(i, p.pid) for i, p in enumerate(procs)]
        meter = CpuMeter(lambda: active)

        def cpu():
            return {p.pid: tree_cpu(p.pid) for p in procs}

        _, a = around(cpu, lambda: meter.sample(4, 1.0))
        time.sleep(1.5)  # the interval measured (not a wait for anything)
        got, b = around(cpu, lambda: meter.sample(4, 1.0))
        util = [u for u, _ in got]
        # one core between the three: their shares add up to one core at most (plus the
        # clock-tick rounding of three CPU readings, 10 ms each end)
        assert sum(util[:3]) <= (b.t1 - a.t0 + 3 * 0.02) / (b.t0 - a.t1), util
        # ... while each of them wanted all of it the whole time
        assert all(d is not None and d > 0.8 for d in meter.demand[:3]), meter.demand
        assert meter.demand[3] is not None and meter.demand[3] < 0.1, meter.demand
    finally:
        for p in procs:
            p.kill()
            p.wait()
