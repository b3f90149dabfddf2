"""One Dask runtime per Python process for ``tune(..., runtime="auto")``.

A notebook runs experiment after experiment; starting a cluster and its warm
trial processes costs seconds each time, so the runtime ``"auto"`` picks
for a training function is made once and kept (``keep=True``): the second
experiment starts at once. The first does too: the kernel is one of its workers
(``kernel_slot``, :mod:`.kernel_slot`), training while the others start. It is
closed at interpreter exit, or by ``exp.runtime.close()`` (a later call then makes
a new one).
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

__all__ = ["shared_runtime"]

_LOCK = threading.Lock()
_SHARED: list[Any] = []


def shared_runtime() -> Any:
    """The process's kept DaskRuntime (local cluster sized to the machine, GPUs if any).

    A new, unkept runtime when the shared one is busy with another experiment:
    experiments on one runtime run one after another.
    """
    with _LOCK:
        cold = not _SHARED or _SHARED[0].closed
    if cold and not os.path.exists("/proc/driver/nvidia"):  # a GPU cluster forks nothing
        from nbtune.runtimes.dask.forkserver_side.forkserver import DEFAULT_PRELOAD, start_early

        start_early(DEFAULT_PRELOAD)  # torch imports while `distributed` and the runtime do
    from nbtune.runtimes.dask.driver_side.runtime import DaskRuntime

    with _LOCK:
        rt = _SHARED[0] if _SHARED else None
        if rt is not None and rt.closed:
            _SHARED.clear()
            rt = None
        if rt is None:
            rt = DaskRuntime(keep=True, kernel_slot=True)  # the first trial starts at once
            _SHARED.append(rt)
            atexit.register(_close_shared)
            return rt
        if rt.busy:
            return DaskRuntime()  # busy: this experiment gets its own cluster
        return rt


def _close_shared() -> None:
    with _LOCK:
        for rt in _SHARED:
            rt.close()
        _SHARED.clear()
