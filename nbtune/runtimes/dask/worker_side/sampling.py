"""Utilization sampling on every worker, streamed to the driver at ~1 Hz.

GPU workers read NVML (utilization and memory of their devices). CPU
workers, which stand for one GPU each, measure what the trial processes they
host use (:mod:`.cpu_meter`; a trial thread's memory is the worker's, not told apart).
Samples go out on the experiment's event topic as :class:`~nbtune.runtimes.dask.protocol.Utilization`; the
driver maps (worker, slot) to GPU ids and feeds ``UtilizationSampled``.
"""

from __future__ import annotations

import threading
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from nbtune.runtimes.dask import gpu
from nbtune.runtimes.dask.protocol import Utilization, encode
from nbtune.runtimes.dask.worker_side import handlers
from nbtune.runtimes.dask.worker_side.cpu_meter import CpuMeter, cpu_sample, cpu_slots

__all__ = ["UtilizationSampler"]


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
        meter = CpuMeter()
        nthreads = int(getattr(worker.state, "nthreads", 1) or 1)
        slots = cpu_slots(resources)
        emit = handlers.emitter(worker)  # the runtime's stream when open, else the topic
        if not self.gpus:
            cpu_sample(meter, slots, nthreads)  # the baseline: the first sample spans an interval

        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    if self.gpus:
                        samples = gpu.sample_gpus(devices)
                    else:
                        samples = cpu_sample(meter, slots, nthreads)
                    if samples is None:
                        continue
                    emit(self.topic, [encode(Utilization(
                        worker=worker.address,
                        util=[u for u, _ in samples], mem=[m for _, m in samples],
                        demand=[] if self.gpus else list(meter.demand),
                    ))])
                except Exception:  # a sample lost is not worth a dead worker
                    continue

        threading.Thread(target=loop, name="nbtune-util", daemon=True).start()

    def teardown(self, worker: Any) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
