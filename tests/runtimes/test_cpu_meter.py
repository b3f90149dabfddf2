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
        meter.sample(3, 1.0)  # the first call has no interval yet
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
