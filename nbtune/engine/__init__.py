"""The engine state machine and its bookkeeping."""

from __future__ import annotations

from nbtune.engine.engine import Engine, EngineError, Subscriber
from nbtune.engine.state import AllocationRecord, InvariantError, ResourceLedger

__all__ = ["Engine", "EngineError", "Subscriber", "AllocationRecord", "InvariantError",
           "ResourceLedger"]
