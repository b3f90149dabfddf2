"""Barrier filling: run likely promotions on workers a synchronous rung leaves idle.

A synchronous algorithm (SHA, Hyperband or SyncBOHB one bracket at a time)
hands out a rung and waits until its last straggler reports; every worker whose
trial finished early idles meanwhile (Fluid §2.2, "idle resources at stage
barriers"). When the algorithm has no work and a GPU is idle, the engine asks
it for :meth:`~nbtune.algorithms.algorithm_protocol.BaseAlgorithm.speculate` — paused trials
likely to be promoted, at their next rung's budget — and continues them there
*speculatively*, on the placement they paused on (a process waiting in place
simply goes on, nothing restarts).

Speculative work never reaches the algorithm before its verdict, so results
cannot change: the reports are buffered. When the rung closes, a promoted
trial's spec adopts the run (the buffered reports are replayed to the algorithm
in order, exactly as they would have arrived; a run that reached the budget
already closes its segment at once) and a retired one is stopped, its reports
dropped: the worker is given back. A speculative run also yields (Pause,
progress dropped) as soon as real work waits for a GPU, and when its trial is
requeued for any reason. The policy is pure engine code, methods of
:class:`~nbtune.engine.engine.Engine` (``_fill``, ``_adopt``, ``_drop_speculation``,
``_retire_speculation``, ``_yield_to_pending``): filling changes trial states, the queue
and the ledger exactly as the engine's own transitions do, so it lives with them. The
simulator and the Dask runtime run exactly this, from the events they feed. This module
holds its records: every speculative launch is kept in ``engine.fill_log``
(:class:`FillRecord`), each one under way is a :class:`Speculation`. The other half
of filling, the next bracket started in a last rung's tail when brackets run
one at a time, is the algorithm's (``Hyperband._fill_tail``): those are real
trials, not speculation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nbtune.core.events import TrialReported

__all__ = ["FillRecord", "Speculation"]


@dataclass
class FillRecord:
    """One speculative launch, kept in ``engine.fill_log`` so a run can show what filling did.

    ``log_index`` is the first of its records in ``engine.ledger.log`` (one per
    GPU of ``placement``): their start and end are when the fill work held the
    worker. ``outcome`` is filled in as the speculation ends: ``"adopted"``
    (promoted: its work counted), ``"retired"`` (a loser: its work dropped),
    ``"yielded"`` (real work took the worker back), or None while undecided.
    """

    time: float
    trial_id: int
    placement: tuple[tuple[int, float], ...]
    start: float
    target: float
    log_index: int
    outcome: str | None = None


@dataclass
class Speculation:
    """One speculative continuation: where the trial's real state stands, and what it did since."""

    target: float
    #: the trial's target budget before the speculation (restored if it is dropped)
    rung_target: float
    reports: list[TrialReported] = field(default_factory=list)
    #: it reached ``target`` and waits (paused) for the verdict
    done: bool = False
    #: promoted to this rung budget below ``target``: its reports up to it count as they come
    promoted: float | None = None
    record: FillRecord | None = None

    def settle(self, outcome: str) -> None:
        """Note how the speculation ended on its launch's record (a chain of launches: each)."""
        if self.record is not None and self.record.outcome is None:
            self.record.outcome = outcome
