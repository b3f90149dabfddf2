"""Runtimes carry the engine's commands out; they are the only code that reads time."""

from __future__ import annotations

from nbtune.runtimes.base import Runtime
from nbtune.runtimes.sim import SimRuntime, SimulationError

__all__ = ["Runtime", "SimRuntime", "SimulationError"]
