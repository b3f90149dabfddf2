"""The kernel slot: trials that run in threads of the process that called ``tune()``.

A cold local cluster needs seconds before its first trial can run (worker
processes start, the fork server imports torch), while the process that
called ``tune()`` (a notebook's kernel) usually has torch imported already and
one core's worth of the machine to give. So, on a local CPU cluster the runtime
starts itself, that process is one of the workers: the *kernel slot*, one GPU
stand-in from the start, beside ``n - 1`` Dask workers that join as they come
up. Its trials run exactly as in thread mode on a worker (:mod:`..worker_side.threads`:
the same :class:`~..trial_side.trial_api.Trial`, the same messages), only their
messages go straight into the driver's inbox and control straight to the rank's
queue, with no connection in between.

Until they have joined, the kernel also runs the lanes of those workers: *interim*
lanes, threads like its own (``interim``: how many), each standing for one worker
still starting. A joining worker takes over an interim lane's GPU id
(:class:`~.cluster.Inventory`): the trial running there finishes in its thread,
the next one placed there runs on the worker. The first minute of a small job is
where a local cluster's start hurts most; the machine's other cores train meanwhile
(the experiment sees its final size from the start).

What the kernel slot cannot run: a rank of a multi-worker (DDP) trial or a fused
unit (those need processes: such a launch fails with a message that says so), a
trial with ``trial_timeout`` or ``trial_memory_limit`` (a thread cannot be killed
or measured); the runtime does not use it where the experiment asks for one
(:func:`usable`, fusion).
A trial thread never forks and never touches CUDA (CPU stand-ins only).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from nbtune.runtimes.dask.protocol import Exit, Report, Utilization, encode, kind_of

__all__ = ["KernelSlot", "kernel_address", "usable", "FIRST_REPORT_WAIT"]

#: seconds the cluster's start waits for the kernel slot's first report, at most: on a small
#: machine starting worker processes (and, in this process, the scheduler) takes the cores
#: and the interpreter lock the first trial needs; its first result comes first
FIRST_REPORT_WAIT = 3.0


def kernel_address(lane: int = 0) -> str:
    """The kernel slot's worker address (``lane`` > 0: an interim lane's): never a Dask
    worker's (no ``tcp://``)."""
    base = f"kernel://{socket.gethostname()}/{os.getpid()}"
    return base if lane == 0 else f"{base}/lane-{lane}"


def usable(*, own_cluster: bool, gpus: bool | None, execution: str, n_workers: int,
           trial_timeout: float | None, memory_limit: int | None) -> bool:
    """The kernel slot applies: a local CPU cluster this runtime starts, of at least two
    workers, where trials may run in threads (no timeout, no memory limit, not forced into
    processes)."""
    return (own_cluster and gpus is False and execution != "process" and n_workers >= 2
            and trial_timeout is None and memory_limit is None)


class KernelSlot:
    """The kernel as one worker of the experiment: launches, control and its utilization.

    ``put`` is the driver's inbox ``put``: trial messages arrive as ``("msgs", batch)``,
    a launch it cannot take as ``("launch_failed", ...)``, like a Dask worker's.
    """

    def __init__(self, host: str, put: Callable[[tuple[str, Any]], None], threads: int = 1,
                 sample_interval: float = 1.0, interim: int = 0) -> None:
        self.address = kernel_address()
        #: the interim lanes' addresses, in the order joining workers take them over
        self.interim = [kernel_address(lane) for lane in range(1, int(interim) + 1)]
        self.lanes = [self.address, *self.interim]
        self.host = host
        self.threads = int(threads)
        self._put = put
        self._interval = float(sample_interval)
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        #: set at the first report (or exit) of a trial here: the cluster may start now
        self.first_report = threading.Event()
        #: what a trial thread changes process-wide, restored when the experiment ends
        self._torch_threads = _torch_threads()
        self._switch = sys.getswitchinterval()

    def owns(self, address: str) -> bool:
        """``address`` is the kernel slot or one of its interim lanes."""
        return address in self.lanes

    def probes(self) -> dict[str, dict[str, Any]]:
        """What :func:`.cluster.probe_worker` says of a Dask worker, said of each lane."""
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        return {address: {"name": "kernel" if lane == 0 else f"kernel-lane-{lane}",
                          "host": self.host, "nthreads": self.threads, "memory_limit": 0.0,
                          "resources": {"GPU": 1.0}, "cores": cores, "devices": []}
                for lane, address in enumerate(self.lanes)}

    def _emit(self, topic: str, batch: list[dict[str, Any]]) -> None:
        if not self.first_report.is_set() and any(kind_of(m) in (Report, Exit) for m in batch):
            self.first_report.set()
        self._put(("msgs", batch))

    def launch(self, run_id: int, rank: int, job: dict[str, Any], address: str) -> None:
        """Start one rank in a thread of this process on lane ``address`` (thread mode,
        whatever ``auto`` says)."""
        from nbtune.runtimes.dask.worker_side.rank_runner import start_rank

        if int(job.get("world_size", 1)) > 1 or job.get("members"):
            self._put(("launch_failed", (run_id, rank, "a multi-worker or fused trial cannot "
                                         "run in the kernel slot (a thread)", False)))
            return
        # its lane is its slot here: the sampler reads each lane's threads apart
        job = {**job, "execution": "thread", "slot": self.lanes.index(address)}
        if address != self.address and not self.first_report.is_set():
            # an interim lane starts once the first trial has reported (as the cluster
            # does): until then its trial would only wait for the same imports and share
            # the interpreter with the first epoch
            threading.Thread(target=self._launch_later, args=(job,), daemon=True,
                             name="nbtune-kernel-lane-start").start()
        else:
            start_rank(None, job, self._emit, self._emit)
        self._start_sampler()

    def _launch_later(self, job: dict[str, Any]) -> None:
        from nbtune.runtimes.dask.worker_side.rank_runner import start_rank

        self.first_report.wait(FIRST_REPORT_WAIT)
        if not self._stop.is_set():  # else the experiment ended while it waited
            start_rank(None, job, self._emit, self._emit)

    def control(self, keys: list[str], msg: dict[str, Any]) -> None:
        from nbtune.runtimes.dask.worker_side.rank_runner import deliver

        deliver(keys, msg)

    def _start_sampler(self) -> None:
        """Utilization of the kernel slot's trial threads (their CPU time), once per interval."""
        if self._sampler is not None:
            return
        self._sampler = threading.Thread(target=self._sample, name="nbtune-kernel-util",
                                         daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        # imported on the sampler thread: nothing of it delays the first launch
        from nbtune.runtimes.dask.worker_side.cpu_meter import CpuMeter, cpu_sample
        from nbtune.runtimes.dask.worker_side.rank_runner import active_threads

        lanes = len(self.lanes)
        meter = CpuMeter(active=list, threads=active_threads)
        cpu_sample(meter, lanes, lanes * self.threads)  # the baseline
        while not self._stop.wait(self._interval):
            with contextlib.suppress(Exception):  # a sample lost is not worth more
                samples = cpu_sample(meter, lanes, lanes * self.threads)
                if samples is None:
                    continue
                demand = list(meter.demand)
                # one message per lane, each the worker it stands for (an interim lane taken
                # over is no longer in the inventory: its samples are dropped there)
                self._emit("", [encode(Utilization(
                    worker=address, util=[samples[i][0]], mem=[samples[i][1]],
                    demand=demand[i:i + 1])) for i, address in enumerate(self.lanes)])

    def close(self) -> None:
        """The experiment ended: sampling stops, the process's torch threads come back."""
        self._stop.set()
        self.first_report.set()
        if self._torch_threads is not None and "torch" in sys.modules:
            with contextlib.suppress(Exception):
                sys.modules["torch"].set_num_threads(self._torch_threads)
        sys.setswitchinterval(self._switch)


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")
    return None if torch is None else int(torch.get_num_threads())
