"""Commands: what the engine tells a runtime to do, named in the imperative."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nbtune.core.resources import Placement

__all__ = ["Command", "Launch", "Resize", "Pause", "Stop", "Finish"]


@dataclass(frozen=True)
class Command:
    pass


@dataclass(frozen=True)
class Launch(Command):
    """Start (or resume) ``trial_id`` on ``placement`` and train it to ``budget`` units.

    ``start_budget`` is how much it has done already; the runtime restores the
    checkpoint of ``restore_from`` (the trial itself unless PBT hands one over).
    The runtime checkpoints and releases the placement once ``budget`` is reached.
    ``unit`` names the fused unit the trial runs in (``tune(..., fusion=F)``): every
    member of ``members`` gets a Launch with the same ``unit`` in the same batch, and the
    runtime runs them as one fused model in one process group.
    """

    trial_id: int
    config: dict[str, Any]
    start_budget: float
    budget: float
    placement: Placement
    restore_from: int | None = None
    unit: int | None = None
    members: tuple[int, ...] = ()


@dataclass(frozen=True)
class Resize(Command):
    """At the next iteration boundary, checkpoint and continue on ``placement``."""

    trial_id: int
    placement: Placement


@dataclass(frozen=True)
class Pause(Command):
    """Checkpoint at the next iteration boundary and release the resources."""

    trial_id: int


@dataclass(frozen=True)
class Stop(Command):
    """End the trial at the next iteration boundary; it will not run again."""

    trial_id: int


@dataclass(frozen=True)
class Finish(Command):
    """Nothing is left to run: the runtime may shut the experiment down."""
