"""The one clock protocol every time-aware component receives by injection.

Only runtimes own a concrete clock (the simulator's virtual clock, the Dask
runtime's wall clock); policies and the engine see time only as timestamps on
events or through an injected :class:`Clock`, so the same code runs on both.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock"]


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Seconds since an arbitrary origin fixed for one experiment."""
        ...


class ManualClock:
    """A clock that moves only when told to: the simulator's, and the tests'."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)

    def now(self) -> float:
        return self._t

    def advance_to(self, t: float) -> None:
        if t < self._t:
            raise ValueError(f"clock cannot go back from {self._t} to {t}")
        self._t = float(t)

    def set_ordered(self, t: float) -> None:
        """Move to ``t`` unchecked: for an owner whose times come in order (the simulator's
        event heap); :meth:`advance_to` checks for everyone else."""
        self._t = t
