"""CPU stand-ins' utilization: what the trials of one worker use, per slot, between two calls.

A CPU worker stands for one GPU (or ``GPU`` resource many); its utilization is
the CPU time its trial processes (and their children) used over the interval,
divided by the worker's cores per slot (1.0: the stand-in "GPU" is saturated);
a trial run as a thread (``execution="thread"``, the kernel slot) counts by its
thread's own CPU time. Used by the workers' sampler (:mod:`.sampling`) and by
the kernel slot, which must not import ``distributed`` before its first trial.
"""

from __future__ import annotations

import time
from typing import Any

import psutil

from nbtune.runtimes.dask.worker_side import rank_runner

__all__ = ["CpuMeter", "cpu_sample", "cpu_slots", "thread_times", "run_queue_seconds"]


class CpuMeter:
    """Per-slot CPU share of the trial processes (and their children) between two calls.

    CPU time deltas over wall time, per process tree: a warm process that
    serves trial after trial keeps its baseline (psutil's ``cpu_percent``
    re-primed at every new trial would read 0 for each trial's first
    interval), and a trial's own workers (data loaders) count for its slot.

    It also reads each slot's *demand*: the share of the interval its
    processes were running or runnable (CPU time plus the run-queue wait
    Linux reports in ``/proc/<pid>/schedstat``). Used CPU reads low when
    other processes load the machine; demand does not: a CPU-bound trial
    wants its whole core however little of it it got. The profiler bounds
    packing with it (a time-sliced core has no room beyond ``1 / demand``).
    Empty where schedstat is missing (not Linux).
    """

    def __init__(self, active: Any = None, threads: Any = None) -> None:
        self._active = active or rank_runner.active_children
        #: trials run as threads of the worker (``execution="thread"``): their own CPU time
        self._threads = threads or rank_runner.active_threads
        self._cpu: dict[int, float] = {}  # pid -> CPU seconds at the previous call
        self._wait: dict[int, tuple[float, float, float]] = {}  # pid -> (when, CPU, run queue)
        self._last: float | None = None
        #: per slot, the demand over the last interval (see the class docstring); None for a
        #: slot without a trial process or without two readings of it
        self.demand: list[float | None] = []

    @staticmethod
    def _tree(pid: int) -> list[psutil.Process]:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]

    def sample(self, slots: int, cores_per_slot: float) -> list[tuple[float, float]] | None:
        """Per slot ``(CPU share, memory GB)`` since the previous call; None on the first call,
        which only sets the baseline (a share over no interval is no measurement: it read 0,
        the first point of every experiment's utilization panel)."""
        now = time.monotonic()
        wall = None if self._last is None else max(now - self._last, 1e-6)
        self._last = now
        used = [0.0] * slots
        mem = [0.0] * slots
        wanted: list[float | None] = [0.0] * slots
        present = [False] * slots
        seen: dict[int, float] = {}
        waits: dict[int, tuple[float, float, float]] = {}
        # (slot, key, CPU seconds, (when, run-queue seconds) or None, birth or None): trial
        # processes' trees by pid, trial threads by negative native id (never a pid)
        readings: list[tuple[int, int, float, tuple[float, float] | None, float | None]] = []
        for slot, pid in self._active():
            if not 0 <= slot < slots:
                continue
            try:
                tree = self._tree(pid)
            except psutil.Error:
                continue
            for p in tree:
                try:
                    with p.oneshot():
                        t = p.cpu_times()
                        cpu, rss, born = t.user + t.system, p.memory_info().rss, p.create_time()
                except psutil.Error:
                    continue
                mem[slot] += rss / 1e9
                wait = run_queue_seconds(p.pid)  # timed per process: the meter waits on a busy box
                readings.append((slot, p.pid, cpu, None if wait is None else
                                 (time.monotonic(), wait), born))
        for slot, tid in self._threads():
            got = thread_times(tid) if 0 <= slot < slots else None
            if got is not None:
                readings.append((slot, -tid, got[0], (time.monotonic(), got[1]), None))
        for slot, key, cpu, queued, born in readings:
            seen[key], present[slot] = cpu, True
            if queued is not None:
                waits[key] = (queued[0], cpu, queued[1])
            if wall is None:
                continue
            before = self._cpu.get(key)
            if before is None:  # not seen before: a process at its mean rate since its birth, a
                before = 0.0 if born is None else (  # thread (one per trial) born since
                    cpu * (1.0 - min(wall / max(time.time() - born, 1e-6), 1.0)))
            used[slot] += max(cpu - before, 0.0) / wall
            was, now_p = self._wait.get(key), waits.get(key)
            if was is None or now_p is None or wanted[slot] is None:
                wanted[slot] = None  # a process without two readings: demand unknown
            else:
                span = max(now_p[0] - was[0], 1e-6)
                wanted[slot] += (max(now_p[1] - was[1], 0.0)
                                 + max(now_p[2] - was[2], 0.0)) / span
        # idle warm processes keep an up-to-date baseline: they come back with the next trial
        for pid in set(self._cpu) - set(seen):
            if pid < 0:
                continue  # a trial thread that ended
            try:
                t = psutil.Process(pid).cpu_times()
                seen[pid] = t.user + t.system
            except psutil.Error:
                continue
            wait = run_queue_seconds(pid)
            if wait is not None:
                waits[pid] = (time.monotonic(), seen[pid], wait)
        self._cpu, self._wait = seen, waits
        self.demand = [] if wall is None or not waits else [
            None if w is None or not has else min(w / max(cores_per_slot, 1e-9), 1.0)
            for w, has in zip(wanted, present, strict=True)]
        if wall is None:
            return None
        return [(min(u / max(cores_per_slot, 1e-9), 1.0), m) for u, m in zip(used, mem, strict=True)]


def thread_times(tid: int) -> tuple[float, float] | None:
    """(CPU seconds, run-queue seconds) of thread ``tid`` of this process (Linux schedstat)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            cpu, wait = f.read().split()[:2]
        return int(cpu) / 1e9, int(wait) / 1e9
    except (OSError, ValueError):
        return None


def run_queue_seconds(pid: int) -> float | None:
    """Seconds ``pid``'s main thread has waited on a run queue (Linux schedstat), or None."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def cpu_slots(resources: dict[str, float]) -> int:
    """How many GPU stand-ins a CPU worker provides: its ``GPU`` resource, else one."""
    return max(int(resources.get("GPU", 1) or 1), 1)


def cpu_sample(meter: CpuMeter, slots: int, nthreads: int) -> list[tuple[float, float]] | None:
    return meter.sample(slots, max(nthreads / max(slots, 1), 1.0))
