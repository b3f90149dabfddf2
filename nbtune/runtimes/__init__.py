"""Runtimes carry the engine's commands out; they are the only code that reads time."""

from __future__ import annotations

from typing import Any

from nbtune.runtimes.base import Runtime
from nbtune.runtimes.sim import SimRuntime, SimulationError

__all__ = ["Runtime", "SimRuntime", "SimulationError", "DaskRuntime"]


def __getattr__(name: str) -> Any:
    if name == "DaskRuntime":  # lazy: importing nbtune must not import distributed
        from nbtune.runtimes.dask import DaskRuntime

        return DaskRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
