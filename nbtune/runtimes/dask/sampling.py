"""Utilization sampling on every worker, streamed to the driver at ~1 Hz.

GPU workers read NVML (utilization and memory of their devices). CPU
workers, which stand for one GPU each, measure what the trial processes they
host use: CPU time over the sampling interval divided by the worker's cores
per slot (so 1.0 means the stand-in "GPU" is saturated), and resident memory.
Samples go out on the experiment's event topic as ``{"k": "util", ...}``; the
driver maps (worker, slot) to GPU ids and feeds ``UtilizationSampled``.
"""

from __future__ import annotations

import threading
from typing import Any

import psutil
from distributed.diagnostics.plugin import WorkerPlugin

from nbtune.runtimes.dask import executor, gpu, handlers

__all__ = ["UtilizationSampler", "cpu_sample", "cpu_slots"]


class _CpuMeter:
    """Per-slot CPU fraction of the trial processes between two calls."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def sample(self, slots: int, cores_per_slot: float) -> list[tuple[float, float]]:
        used = [0.0] * slots
        mem = [0.0] * slots
        seen = set()
        for slot, pid in executor.active_children():
            if not 0 <= slot < slots:
                continue
            seen.add(pid)
            p = self._procs.get(pid)
            try:
                if p is None:
                    p = self._procs[pid] = psutil.Process(pid)
                    p.cpu_percent(None)  # first call primes the counter
                    pct = 0.0
                else:
                    pct = p.cpu_percent(None)
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            used[slot] += pct / 100.0
            mem[slot] += rss / 1e9
        for pid in set(self._procs) - seen:
            del self._procs[pid]
        return [(min(u / max(cores_per_slot, 1e-9), 1.0), m) for u, m in zip(used, mem, strict=True)]


def cpu_slots(resources: dict[str, float]) -> int:
    """How many GPU stand-ins a CPU worker provides: its ``GPU`` resource, else one."""
    return max(int(resources.get("GPU", 1) or 1), 1)


def cpu_sample(meter: _CpuMeter, slots: int, nthreads: int) -> list[tuple[float, float]]:
    return meter.sample(slots, max(nthreads / max(slots, 1), 1.0))


class UtilizationSampler(WorkerPlugin):
    """A daemon thread per worker that logs one utilization sample per ``interval`` seconds."""

    def __init__(self, topic: str, interval: float = 1.0, gpus: bool = False) -> None:
        self.topic = topic
        self.interval = float(interval)
        self.gpus = gpus
        self.name = f"nbtune-util-{topic}"

    def setup(self, worker: Any) -> None:
        self._stop = threading.Event()
        resources = dict(getattr(worker.state, "total_resources", {}))
        devices = gpu.worker_devices(resources) if self.gpus else []
        meter = _CpuMeter()
        nthreads = int(getattr(worker.state, "nthreads", 1) or 1)
        slots = cpu_slots(resources)
        emit = handlers.emitter(worker)  # the runtime's stream when open, else the topic

        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    if self.gpus:
                        samples = gpu.sample_gpus(devices)
                    else:
                        samples = cpu_sample(meter, slots, nthreads)
                    emit(self.topic, [{
                        "k": "util", "worker": worker.address,
                        "util": [u for u, _ in samples], "mem": [m for _, m in samples],
                    }])
                except Exception:  # a sample lost is not worth a dead worker
                    continue

        threading.Thread(target=loop, name="nbtune-util", daemon=True).start()

    def teardown(self, worker: Any) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
