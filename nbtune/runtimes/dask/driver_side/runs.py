"""What the Dask driver knows of one run (a process group training one trial) and its ranks.

Kept apart from :mod:`.driver` (the state machine that moves runs along) so
that both stay readable; :func:`rank_env` is the per-rank environment (CPU
threads by share, the visible GPU, the MPS thread percentage); :func:`overdue`
finds runs past ``trial_timeout``; :class:`WallClock` is the experiment's clock.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbtune.core import events as ev
from nbtune.core.resources import Placement
from nbtune.core.tolerance import EPS
from nbtune.runtimes.dask.protocol import Exit, Report, Verdict

if TYPE_CHECKING:
    from nbtune.runtimes.dask.driver_side.cluster import Slot

__all__ = ["Run", "RunRank", "job_hints", "rank_env", "overdue", "check_timeout",
           "check_memory_limit", "WallClock", "EPS"]


def check_timeout(seconds: float | None) -> float | None:
    """``trial_timeout`` as given by a user: None (no limit) or a number of seconds > 0."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise ValueError(f"trial_timeout must be a number of seconds > 0 or None, got {seconds!r}")
    return float(seconds)


def check_memory_limit(limit: int | str | None) -> int | None:
    """``trial_memory_limit`` as given by a user: None (no limit), bytes > 0 or a size ("2GB")."""
    if isinstance(limit, str):
        from dask.utils import parse_bytes

        limit = parse_bytes(limit)
    if limit is not None and limit <= 0:
        raise ValueError(f"trial_memory_limit must be > 0, got {limit}")
    return limit


@dataclass
class RunRank:
    worker: str
    exited: bool = False


@dataclass
class Run:
    """One process group running one trial from ``start_step`` toward ``budget``."""

    trial_id: int
    run_id: int
    run_key: str
    config: dict[str, Any]
    placement: Placement
    start_step: float
    budget: float
    ranks: list[RunRank] = field(default_factory=list)
    cancelled: str | None = None  # "stop" | "pause" | "lost" | "killed" | "released"
    resize: bool = False
    last_step: float = 0.0
    started: bool = False
    error: Exit | None = None
    #: its process waits in place at the segment's end (no checkpoint to resume from)
    held: bool = False
    launched: float = field(default_factory=time.monotonic)  # for trial_timeout
    #: its process waits in ``report`` for the verdict on its last report (a stop rung)
    awaiting: bool = False

    def reported(self, msg: Report) -> None:
        """A report came: where the run is, and whether its process waits for the verdict."""
        self.last_step = max(self.last_step, float(msg.step))
        self.awaiting = self.awaiting or bool(msg.wait)

    @staticmethod
    def send_verdicts(runs: Any, signal: Any) -> None:
        """The engine has judged the batch: every run still waiting for a verdict trains on.

        Runs the engine stopped, paused or moved were sent their stop already
        (``cancelled``, ``resize``); the verdict goes only to those it let go on.
        Called once per engine batch, after its commands. (A verdict that still
        reaches a process after its trial returned is dropped there, as a stop is.)
        """
        for run in runs:
            if run.awaiting:
                run.awaiting = False
                if run.cancelled is None and not run.resize:  # a resize's stop woke it
                    signal(run, Verdict(step=run.last_step))


def job_hints(engine: Any) -> dict[str, Any]:
    """What a trial process is told of its algorithm: may it wait at a rung (``hold``), and
    after reporting which budgets it waits for the verdict (``verdicts``, see
    :attr:`~nbtune.algorithms.algorithm_protocol.BaseAlgorithm.stop_budgets`)."""
    algo = getattr(engine, "algorithm", None)
    return {"hold": bool(algo and algo.waits_at_rungs),
            "verdicts": [float(b) for b in getattr(algo, "stop_budgets", ())]}


def overdue(runs: list[Run], limit: float | None, now: float) -> list[Run]:
    """Runs still training ``limit`` seconds after their launch; each gets its error set.

    A hung training function (a dead data loader, a deadlock) would hold its
    GPU for ever; past ``trial_timeout`` it is killed and fails with this
    message (the driver sends the kill). A run waiting at a rung is not
    training, so it is never overdue.
    """
    if limit is None:
        return []
    out = []
    for run in runs:
        if run.cancelled is None and run.error is None and not run.held \
                and now - run.launched > limit:
            run.error = Exit(ok=False, oom=False, error=(
                f"trial {run.trial_id} was still running {now - run.launched:.1f} s after its "
                f"launch, past trial_timeout={limit:g} s, and was killed; make the training "
                "function return (or report) sooner, or raise trial_timeout"))
            out.append(run)
    return out


def rank_env(tid: int, slot: Slot, share: float, *, gpus: bool,
             mps: bool) -> tuple[int, dict[str, str]]:
    """Thread count and environment of one rank's process.

    CPU threads follow the share of the slot's cores (at least one), so
    packed CPU trials do not oversubscribe, and a CPU stand-in's process runs
    on the slot's own cores (``NBTUNE_CPU_CORES``). On GPUs the process sees only its
    GPU (by UUID); a packed rank under MPS gets the matching
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``.
    """
    threads = max(int(round(slot.threads * min(share, 1.0))), 1)
    env = {"NBTUNE_TRIAL_ID": str(tid), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    if slot.cores and not gpus:  # a CPU stand-in's own cores (cluster.pin_cores)
        env["NBTUNE_CPU_CORES"] = ",".join(map(str, slot.cores))
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = str(slot.device)
        if mps and share < 1.0 - EPS:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(int(round(share * 100)), 1))
    return threads, env


class WallClock:
    """Seconds since the experiment started (``time.monotonic``); 0 before it starts."""

    def __init__(self) -> None:
        self._t0: float | None = None

    def start(self) -> None:
        self._t0 = time.monotonic()

    def now(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0


def returned_early(run: Run, now: float) -> ev.Event:
    """The event for a run whose function returned before reaching its budget.

    After reporting, it ended on its own: a loop that trains fewer steps than
    ``max_budget`` (``for epoch in range(9)``), which Ray Tune ends as TERMINATED and
    Optuna as COMPLETE. The trial completes at its last report (retrying it would
    train the same steps again), with a warning, once per budget, that the budget
    does not fit the loop. Without a single report it is an error: nothing was learnt.
    """
    if run.last_step > EPS:
        warnings.warn(
            f"a training function returned before its trial's budget ({run.budget:g}): the "
            "trial ends completed at its last report, as in Ray Tune and Optuna. If the loop "
            "trains fewer steps than max_budget, lower max_budget so the algorithm's rungs "
            "fit it", UserWarning, stacklevel=1)
        return ev.TrialReturned(now, run.trial_id)
    return ev.TrialFailed(now, run.trial_id, error=(
        f"the training function returned at step {run.last_step:g} before reaching the "
        f"budget {run.budget:g} it was launched for; loop until trial.report() returns "
        "True (e.g. `for step in trial.steps(): ...`)"))
