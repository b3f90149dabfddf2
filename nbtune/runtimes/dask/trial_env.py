"""The environment a trial process is born with: a worker's, less Dask's settings for its own memory.

Dask's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``) so that the worker hands freed memory
back to the operating system. glibc reads it once, at a process's first
allocation, and a threshold set explicitly also freezes the mmap threshold at
128 KiB: every tensor larger than that is mapped and unmapped (page faults,
zeroed pages) each time one is made. A trial process would inherit it (the fork
server is started with the nanny's environment, spawned ones with the worker's)
and train measurably slower than the same loop in the driver. So it is taken out: user code runs in a trial as it
runs in-process, in Optuna or in Ray: with the allocator settings of the user's
own environment, which still reaches it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["worker_env", "trial_env", "nanny_env", "DASK_MEMORY_KEYS"]

#: what Dask's nanny sets for a worker's own memory management, never for a trial's
DASK_MEMORY_KEYS: tuple[str, ...] = ("MALLOC_TRIM_THRESHOLD_",)


def nanny_env(read_config: bool = True) -> dict[str, str]:
    """What a Dask nanny adds to a worker's environment, from the Dask config, as strings.

    ``distributed`` registers its defaults when imported, and a cold ``tune()`` starts
    the fork server before importing it (that import is on the start-up's critical path), so
    keys the config lacks are read from ``distributed``'s own defaults file.
    ``read_config=False``, while ``dask`` is not imported: those defaults alone, without
    importing ``dask`` (which would delay the early fork server); whoever takes
    that fork server compares with the config's values (:func:`.forkserver.take_early`).
    """
    config = None
    if read_config or "dask" in sys.modules:
        with contextlib.suppress(Exception):
            import dask

            config = dask.config
    out: dict[str, str] = {}
    with contextlib.suppress(Exception):
        for key in ("pre-spawn-environ", "environ"):
            got = None if config is None else config.get(f"distributed.nanny.{key}", None)
            if got is None:
                got = _defaults().get(key, {})
            out.update({k: str(v) for k, v in (got or {}).items()})
    return out


@functools.cache
def _defaults() -> dict[str, Any]:
    """``distributed.nanny`` from ``distributed.yaml``, without importing ``distributed``
    (read once: the file is the installed package's). ``dask.config`` knows these defaults
    only once ``distributed`` is imported, which the early fork server must not wait for."""
    import importlib.util

    import yaml

    spec = importlib.util.find_spec("distributed")
    if spec is None or spec.origin is None:
        return {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's where installed
    with open(Path(spec.origin).parent / "distributed.yaml") as f:
        return dict(yaml.load(f, Loader=loader)["distributed"]["nanny"])  # noqa: S506 - safe


def worker_env(nanny: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a driver-started fork server: the driver's, with what a Dask nanny
    sets before spawning a worker, less :data:`DASK_MEMORY_KEYS` the driver does not set.

    Libraries read some of it once, when torch loads them (OpenMP's thread count),
    so the fork server must import torch with the environment a worker's
    processes would have had; glibc reads the malloc settings once too, which
    is why Dask's are left out (see the module docstring). ``nanny``: :func:`nanny_env`'s
    answer, when the caller has it already.
    """
    env = {**os.environ, **(nanny_env() if nanny is None else nanny)}
    for key in DASK_MEMORY_KEYS:
        if key in os.environ:
            env[key] = os.environ[key]  # the user's own, as an in-process run would have it
        else:
            env.pop(key, None)
    return env


def trial_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` (a worker's) for a trial process: :data:`DASK_MEMORY_KEYS` dropped where they
    hold the value the nanny set, so only a value of the user's own reaches the trial."""
    nanny = nanny_env()
    return {k: v for k, v in env.items()
            if not (k in DASK_MEMORY_KEYS and k in nanny and v == nanny[k])}
