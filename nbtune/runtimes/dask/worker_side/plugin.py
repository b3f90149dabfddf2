"""The worker plugin that sets nbtune up on every Dask worker: its handlers and its warm pool.

Apart from :mod:`.pool` and :mod:`.handlers` because it needs both, and the
handlers already need the pool (through :mod:`.rank_runner`).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from nbtune.runtimes.dask.worker_side.handlers import install
from nbtune.runtimes.dask.worker_side.pool import get_pool

__all__ = ["WarmPoolPlugin", "IgnoreInterrupts"]


class WarmPoolPlugin(WorkerPlugin):
    """Starts (or reconfigures) the warm pool on every worker, present and future.

    Registering it again (another runtime on the same cluster) only changes
    the pool's size and preload; running trials are untouched. Trial
    processes end with their worker: an ``atexit`` hook kills them on a clean
    shutdown, and each one exits by itself when its parent disappears.
    """

    name = "nbtune-warm-pool"

    def __init__(self, size: int = 2, preload: tuple[str, ...] = ("torch",),
                 fork_server: str | None = None) -> None:
        self.size = size
        self.preload = tuple(preload)
        self.fork_server = fork_server  # a .forkserver's address: processes forked there

    def setup(self, worker: Any) -> None:
        install(worker)
        get_pool(self.size, self.preload, self.fork_server).fill_async()


class IgnoreInterrupts(WorkerPlugin):
    """Makes the worker processes of a cluster nbtune started deaf to SIGINT.

    Jupyter interrupts a kernel by sending SIGINT to its whole process group,
    which holds the local cluster's worker processes: the interrupt meant for
    ``exp.wait()`` would kill every worker. Workers started with the cluster
    inherit an ignored SIGINT (:func:`~nbtune.runtimes.dask.driver_side.cluster.connect`);
    this plugin covers the ones a nanny restarts later. Only for clusters
    nbtune made: a user's own ``dask worker`` keeps its Ctrl-C.
    """

    name = "nbtune-ignore-sigint"

    def setup(self, worker: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
