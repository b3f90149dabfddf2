"""The runtime protocol: the only code that reads time and carries commands out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pandas as pd

    from nbtune.core.clock import Clock
    from nbtune.engine.engine import Engine

__all__ = ["Runtime"]


@runtime_checkable
class Runtime(Protocol):
    name: str

    @property
    def clock(self) -> Clock: ...

    def start(self, engine: Engine, trainable: Any) -> None:
        """Feed ``ExperimentStarted`` and begin carrying out the engine's commands."""
        ...

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the experiment is over (True) or ``timeout`` passes (False)."""
        ...

    @property
    def done(self) -> bool: ...

    def submit(self, *events: Any) -> None:
        """Hand outside events (a person stopping a trial) to the engine."""
        ...

    def utilization(self, engine: Engine) -> pd.DataFrame:
        """Per-GPU utilization over time: columns time, gpu_id, util, memory_gb."""
        ...
