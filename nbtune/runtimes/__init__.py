"""Runtimes carry the engine's commands out; they are the only code that reads time."""

from __future__ import annotations

from typing import Any

from nbtune.runtimes.runtime_protocol import Runtime

__all__ = ["Runtime", "SimRuntime", "SimulationError", "DaskRuntime"]


def __getattr__(name: str) -> Any:
    # lazy: importing nbtune must not import distributed, and a Dask worker or the fork
    # server importing nbtune.runtimes.dask must not import the simulator (pandas, the
    # engine: CPU each of them would spend at a cluster's start-up)
    if name in ("SimRuntime", "SimulationError"):
        from nbtune.runtimes import sim

        return getattr(sim, name)
    if name == "DaskRuntime":
        from nbtune.runtimes.dask import DaskRuntime

        return DaskRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
