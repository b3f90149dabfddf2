"""Trials: what the algorithm asks for (:class:`TrialSpec`) and what the engine tracks (:class:`TrialRecord`).

A trial's *budget* is counted in the algorithm's units (epochs, steps, ...).
The engine runs a trial in *segments*: a ``TrialSpec`` asks for the trial to be
trained up to ``budget`` units; a later spec with the same ``trial_id`` resumes
it from its checkpoint (a promotion in SHA/ASHA/Hyperband) or, with
``restore_from``, from another trial's checkpoint (PBT's exploit step).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["TrialState", "TrialSpec", "TrialRecord", "InvalidTransition", "Decision", "ended_of_total"]


class TrialState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    COMPLETED = "completed"
    ERROR = "error"

    @property
    def is_terminal(self) -> bool:
        return self in (TrialState.STOPPED, TrialState.COMPLETED, TrialState.ERROR)


def ended_of_total(states: Iterable[str | TrialState], num_trials: int | None,
                   finished: bool) -> str:
    """``ended/total``: how every view counts trials (``nbtune ls``, the dashboard, the sidebar).

    Ended means stopped, completed or failed (a trial paused at a rung has not
    ended). ``total`` is the planned number of trials when known, else the
    trials so far with ``+`` while the experiment can still add some.
    """
    states = list(states)
    ended = sum(TrialState(s).is_terminal for s in states)
    if num_trials is not None:
        return f"{ended}/{num_trials}"
    return f"{ended}/{len(states)}" + ("" if finished else "+")


class Decision(StrEnum):
    """What an algorithm wants after a result: keep going, pause (checkpoint, free the GPU) or stop."""

    CONTINUE = "continue"
    PAUSE = "pause"
    STOP = "stop"


_ALLOWED: dict[TrialState, frozenset[TrialState]] = {
    TrialState.PENDING: frozenset({TrialState.RUNNING, TrialState.STOPPED, TrialState.ERROR}),
    TrialState.RUNNING: frozenset(
        {TrialState.PAUSED, TrialState.STOPPED, TrialState.COMPLETED, TrialState.ERROR,
         TrialState.PENDING}
    ),
    TrialState.PAUSED: frozenset({TrialState.PENDING, TrialState.STOPPED, TrialState.COMPLETED}),
    TrialState.STOPPED: frozenset(),
    TrialState.COMPLETED: frozenset(),
    TrialState.ERROR: frozenset({TrialState.PENDING}),  # retry from checkpoint
}


class InvalidTransition(RuntimeError):
    """A trial was asked to move between states that its life cycle does not allow."""


@dataclass(frozen=True)
class TrialSpec:
    """A request to train ``trial_id`` with ``config`` until it has used ``budget`` units.

    ``restore_from`` names the trial whose latest checkpoint to start from (PBT);
    ``None`` means the trial's own checkpoint if it has one, else a fresh start.
    """

    trial_id: int
    config: dict[str, Any]
    budget: float
    restore_from: int | None = None
    group_id: int | None = None

    def __post_init__(self) -> None:
        if not self.budget > 0:
            raise ValueError(f"trial {self.trial_id}: budget must be > 0, got {self.budget}")


@dataclass
class TrialRecord:
    """Engine-side record of one trial: its state and everything it reported."""

    trial_id: int
    config: dict[str, Any]
    state: TrialState = TrialState.PENDING
    target_budget: float = 0.0
    budget_used: float = 0.0
    group_id: int | None = None
    restore_from: int | None = None
    best: float | None = None
    last: float | None = None
    results: list[tuple[float, float, dict[str, Any]]] = field(default_factory=list)
    start_time: float | None = None
    end_time: float | None = None
    gpu_seconds: float = 0.0
    share: float = 0.0  # GPUs held now (sum of the placement's shares)
    share_since: float = 0.0
    failures: int = 0
    error: str | None = None
    #: budget units trained again after a relaunch without a checkpoint (not new results)
    recomputed: float = 0.0
    #: (time, budget) of the last report or (re)start: the baseline of the next unit time
    last_mark: tuple[float, float] | None = None
    #: last measured (seconds per budget unit, width it ran at)
    unit_time: tuple[float, float] | None = None
    #: the fused unit (``tune(..., fusion=F)``) it last ran in; None when it ran alone
    unit: int | None = None

    def gpu_seconds_at(self, now: float) -> float:
        """GPU-seconds used by ``now``: the closed segments plus the open one at the current share.

        The one accrual rule: the engine closes a segment with it (release, resize),
        and results and the store read a running trial's total through it.
        """
        return self.gpu_seconds + (self.share * (now - self.share_since) if self.share else 0.0)

    def transition(self, new: TrialState) -> None:
        if new == self.state:
            return
        if new not in _ALLOWED[self.state]:
            raise InvalidTransition(
                f"trial {self.trial_id}: cannot go from {self.state.value} to {new.value}"
            )
        self.state = new
