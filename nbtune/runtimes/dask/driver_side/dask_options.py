"""``DaskRuntime``'s keywords in two groups, as objects to keep, share and show.

:class:`DaskClusterOptions` says which cluster the runtime starts or joins and how;
:class:`DaskTrialOptions` how its trials run there. Each is a frozen dataclass that
unpacks into keywords, so it comes in beside them, not instead of them::

    cluster = DaskClusterOptions(n_workers=4, threads_per_worker=2)
    trials = DaskTrialOptions(warm_processes=4, trial_timeout=600)
    rt = DaskRuntime(**cluster, **trials, keep=True)

A keyword given twice (in an object and on its own) is Python's ``TypeError``, as for
any keyword. The defaults are ``DaskRuntime``'s; what each option does is in its docstring.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtune.runtimes.dask.forkserver_side.forkserver import DEFAULT_PRELOAD

__all__ = ["DaskClusterOptions", "DaskTrialOptions"]


class _Keywords:
    """Unpacks into keywords (``**options``): the fields by name."""

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]

    def __getitem__(self, name: str) -> Any:
        if name not in self.keys():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())


@dataclass(frozen=True)
class DaskClusterOptions(_Keywords):
    """The cluster a :class:`DaskRuntime` starts (the local ones) or joins (a remote one).

    ``gpus``: GPU mode on or off (None: ask NVML); ``n_workers``,
    ``threads_per_worker``, ``host``, ``dashboard_address``, ``memory_limit``: the
    local cluster's; ``security`` (``distributed.security.Security``) and
    ``connect_timeout`` (seconds): a remote scheduler's; ``mps``: the NVIDIA MPS
    control daemon (None: on where GPUs are used and MPS is available);
    ``gpu_speeds``: relative speeds by GPU name; ``keep``: a cluster the runtime
    started outlives an experiment (until ``close()``).
    """

    gpus: bool | None = None
    n_workers: int | None = None
    threads_per_worker: int = 1
    host: str = "127.0.0.1"
    dashboard_address: str | None = ":0"
    memory_limit: Any = "auto"
    security: Any = None
    connect_timeout: float = 30.0
    mps: bool | None = None
    gpu_speeds: dict[str, float] | None = None
    keep: bool = False


@dataclass(frozen=True)
class DaskTrialOptions(_Keywords):
    """How a :class:`DaskRuntime` runs trials on its workers.

    ``execution``: ``"process"``, ``"thread"`` or ``"auto"`` (measured);
    ``warm_processes`` per worker, started with ``preload`` imported;
    ``reuse_processes``: a process that ended a trial cleanly runs the next (None: on
    CPU yes, on GPU no); ``trial_memory_limit`` (bytes or "2GB") and ``trial_timeout``
    (seconds) fail a trial past them; ``shutdown_grace``: seconds the runs get to end
    after the experiment finishes; ``checkpoint_dir`` (default: a new temporary
    directory); ``sample_interval``: seconds between utilization samples;
    ``profiler``: measures what the allocators' models need (``nbtune.runtimes.profiler``);
    ``kernel_slot``: on a local CPU cluster the runtime starts, the calling process is one
    of the workers and runs trials in threads from the first moment, while the others start
    (``runtime="auto"`` turns it on).
    """

    execution: str = "auto"
    warm_processes: int = 2
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    reuse_processes: bool | None = None
    trial_memory_limit: int | str | None = None
    trial_timeout: float | None = None
    shutdown_grace: float = 30.0
    checkpoint_dir: str | Path | None = None
    sample_interval: float = 1.0
    profiler: Any = None
    kernel_slot: bool = False
