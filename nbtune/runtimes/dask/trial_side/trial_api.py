"""The object a training function receives: ``def train(config, trial): ...``.

Semantics (modelled on Ray's ``session.report`` and Optuna's ``should_prune``):

* ``step`` is the cumulative budget unit (epochs, steps: whatever the
  algorithm's ``max_budget`` counts). A run of the function trains one
  *segment*: from :attr:`Trial.start_step` (what the trial has done already)
  up to :attr:`Trial.budget` (what the engine's Launch asked for).
* :meth:`Trial.report` sends the metrics measured after ``step`` units and
  returns :meth:`Trial.should_stop`. It becomes True once ``step`` reaches
  :attr:`Trial.budget` (the segment is over: the engine completes, pauses or
  promotes the trial) or when the engine asked the trial to stop, pause or
  move to a new placement (resize). The function should then return; its
  last checkpoint is where the trial will resume.
* Reporting again after ``should_stop()`` was True raises
  :class:`TrialInterrupted` (a ``BaseException``, so ``except Exception``
  does not swallow it): the runtime ends such a trial at the boundary
  even when its loop ignores the flag, and no unit past the budget is counted.
* Canonical order in the loop: train, ``report``, then ``checkpoint``; the
  checkpoint is filed under the step just reported, so a pause or resize at
  that boundary resumes exactly there. :meth:`Trial.steps` wraps the loop.
* After reporting a budget where the algorithm may stop it (``verdicts``: ASHA's
  rungs in stopping mode) a trial waits in ``report`` for the verdict, as in Ray:
  once stopped, ``report`` returns True (raises :class:`TrialInterrupted` when
  called in Ray's form, whose loops never check) and no further unit is trained.
* A single-process trial whose loop keeps no checkpoint does not return at
  the end of a segment below ``max_budget`` (a synchronous rung): ``report``
  sends ``held`` and blocks until the engine promotes it (``go``: it returns
  False and the loop trains on, in the same process) or stops it (it raises
  :class:`TrialInterrupted`). A relaunch that restarts the loop from step 1
  reports steps the trial had already done: they are *recomputed* work,
  counted, not results.
* ``report`` takes Ray's forms (``report({"loss": x})``, ``report(loss=x)``,
  step implicit) and Optuna's (``report(value, step)``); ``should_prune`` is
  ``should_stop``; ``nbtune.report`` reaches the running trial from a
  ``train(config)`` function. See docs/porting.rst.
* In a multi-worker (DDP) trial every rank calls ``report`` with the same
  ``step``; rank 0's metrics reach the engine, stop requests are agreed on by
  an all-reduce inside ``report`` so all ranks leave at the same step, and
  only rank 0 writes checkpoints (every rank restores).
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from nbtune.core.code_names import names_used
from nbtune.core.tolerance import EPS
from nbtune.runtimes.dask import checkpoints as ck
from nbtune.runtimes.dask.protocol import (
    Checkpointed,
    Control,
    Go,
    Held,
    Recomputed,
    Report,
    StopRequest,
    TrialMessage,
    Verdict,
)

__all__ = ["Trial", "TrialInterrupted", "report", "should_stop", "get_trial", "running", "uses_checkpoints",
           "check_metric", "clean"]

VERDICT_TIMEOUT = 30.0  #: seconds a trial waits in ``report`` for a verdict, then trains on


class TrialInterrupted(BaseException):
    """Raised by ``report`` after the trial was told to stop; the runtime treats it as a clean end."""


class Channel(Protocol):
    """How a Trial talks to the runtime: messages out, control messages in."""

    def send(self, msg: TrialMessage) -> None: ...

    def poll_control(self) -> list[Control]: ...


class Trial:
    """Handle on one running segment of one trial; see the module docstring for the rules."""

    def __init__(self, job: dict[str, Any], channel: Channel) -> None:
        self.trial_id: int = int(job["trial_id"])
        self.config: dict[str, Any] = dict(job["config"])
        self.start_step: float = float(job["start_step"])
        self.budget: float = float(job["budget"])
        self.rank: int = int(job.get("rank", 0))
        self.world_size: int = int(job.get("world_size", 1))
        self.checkpoint_dir: str = str(job["checkpoint_dir"])
        self.restore_path: str | None = job.get("restore_path")
        self.restore_step: float | None = job.get("restore_step")
        self.device_kind: str = job.get("device", "cpu")
        self.step: float = self.start_step
        #: the budget the trial trains toward in the end (a segment may stop short of it)
        self.max_budget: float = float(job.get("max_budget", self.budget))
        #: the experiment's metric, the name Optuna-style ``report(value, step)`` reports under
        self.metric: str | None = job.get("metric")
        #: True when the training function is known to write checkpoints (then it never waits)
        self.checkpoints: bool = bool(job.get("checkpoints", False))
        self._may_wait = bool(job.get("hold", False))  # the algorithm's rungs allow waiting
        #: budgets after whose report the trial waits for the engine's verdict (stop rungs)
        self._verdicts: tuple[float, ...] = tuple(float(b) for b in job.get("verdicts") or ())
        #: reports of steps the trial had already done (a relaunch with no checkpoint)
        self.recomputed = 0
        self.last_checkpoint: str | None = None
        self._last = -math.inf  # the last step reported by this run, recomputed or not
        self._yielded: float | None = None  # the step steps() handed out last
        self._restored = False
        self._early: list[Go] = []
        self._channel = channel
        self._over = False  # budget reached
        self._requested: str | None = None  # "stop" | "pause" | "resize"
        self._told = False  # should_stop() has returned True to the user
        #: perf_counter when report() last returned: the loop's own work is timed from there
        self._back: float | None = None
        self._work: float | None = None  # seconds of work before this report (execution_mode.py)

    @property
    def told_to_stop(self) -> bool:
        """The training function was told to stop (:meth:`should_stop` returned True, or a stop
        ended a wait at a rung): an Optuna ``TrialPruned`` it raises then is no error."""
        return self._told

    # --------------------------------------------------------------- reporting
    def report(self, *args: Any, step: float | None = None, **metrics: Any) -> bool:
        """Record the metrics after ``step`` cumulative units; True when the trial must stop
        (see :meth:`_report`). Times the loop's work since the last report returned."""
        self._work = None if self._back is None else time.perf_counter() - self._back
        try:
            return self._report(*args, step=step, **metrics)
        finally:
            self._back = time.perf_counter()

    def _report(self, *args: Any, step: float | None = None, **metrics: Any) -> bool:
        """Record the metrics after ``step`` cumulative units; return True when the trial must stop.

        Accepted forms (see docs/porting.rst): ``report(step, **metrics)`` and
        ``report(step=..., **metrics)`` (nbtune), ``report({"loss": x})`` or
        ``report(loss=x)`` with the step implicit (Ray Tune), ``report(value,
        step)`` (Optuna: ``value`` is the experiment's metric). An implicit step
        counts reports from the checkpoint :meth:`restore` returned, else from 0:
        a loop with no checkpoint restarts from step 1 when relaunched, and steps
        at or below what the trial had already reported are recomputed work, not
        results (the engine counts them and ignores their metrics).
        """
        if self._told:
            raise TrialInterrupted(
                f"trial {self.trial_id} reported step {step} after it was told to stop "
                f"({self._requested or 'budget reached'}); return from the training function "
                "when report() or should_stop() returns True"
            )
        ray_form = step is None and self._yielded is None and (
            not args or (len(args) == 1 and isinstance(args[0], Mapping)))
        step, metrics = self._parse(args, step, metrics)
        check_metric(self.trial_id, self.metric, metrics)
        if not math.isfinite(step) or step <= self._last + EPS:
            raise ValueError(
                f"trial {self.trial_id}: step must increase, got {step} after {self._last} "
                "(step is the cumulative budget, e.g. the epoch number starting at 1)"
            )
        if step <= self.step + EPS:  # at or below what the trial had done: recomputed
            self._last = step
            self.recomputed += 1
            if self.rank == 0:
                self._channel.send(Recomputed(step=step))
            return self.should_stop()
        if step > self.budget + EPS:
            raise ValueError(
                f"trial {self.trial_id}: reported step {step} is past the budget {self.budget} "
                "this segment was launched for; stop when report() returns True"
            )
        wait = self.world_size == 1 and any(self.step + EPS < b <= step + EPS
                                             for b in self._verdicts)
        self._last = self.step = step
        if self.rank == 0:
            # work: what auto execution decides on (.execution_mode)
            self._channel.send(Report(step=step, metrics=clean(metrics), work=self._work,
                                      wait=True if wait else None))
        if wait and self._await_verdict() and ray_form:
            # Ray's report never returns to a stopped trial; its users' loops do not check
            raise TrialInterrupted(f"trial {self.trial_id} stopped at its rung")
        self._poll()
        if step >= self.budget - EPS:
            if self._requested is None and self._may_hold():
                return self._hold()
            self._over = True
        if self.world_size > 1:
            self._agree()
        return self.should_stop()

    def should_stop(self) -> bool:
        """True once the segment's budget is reached or the engine asked the trial to stop."""
        if self.world_size == 1:
            self._poll()
        stop = self._over or self._requested is not None
        self._told = self._told or stop
        return stop

    #: Optuna's name: ``if trial.should_prune(): return`` (or ``raise optuna.TrialPruned()``)
    should_prune = should_stop

    def _parse(self, args: tuple[Any, ...], step: float | None,
               metrics: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """``(step, metrics)`` from any of the accepted call forms (see :meth:`report`)."""
        if len(args) > 2:
            raise TypeError(f"report() takes at most 2 positional arguments, got {len(args)}")
        if args and isinstance(args[0], Mapping):  # Ray: report({"loss": x}[, step])
            metrics = {**args[0], **metrics}
            if len(args) == 2:
                step = args[1]
        elif len(args) == 2 or (len(args) == 1 and step is not None and not metrics):
            if self.metric is None:  # Optuna: report(value, step)
                raise TypeError("report(value, step) needs the experiment's metric name; "
                                "use report(step, loss=value)")
            metrics = {self.metric: args[0]}
            step = args[1] if len(args) == 2 else step
        elif len(args) == 1:  # nbtune: report(step, **metrics)
            step = args[0]
        if step is None:
            step = self._yielded if self._yielded is not None else self._implicit_step()
        self._yielded = None
        return float(step), metrics

    def _implicit_step(self) -> float:
        """The next unit after the last report, counted from the restored checkpoint or 0."""
        if self._last > -math.inf:
            base = self._last
        else:
            base = float(self.restore_step or 0.0) if self._restored else 0.0
        nxt = math.floor(base + EPS) + 1.0
        return min(nxt, self.budget) if nxt > self.step + EPS else nxt

    def _may_hold(self) -> bool:
        """Wait in place at the segment's end (instead of returning) when nothing else works.

        Only a single-process trial below ``max_budget`` whose loop keeps no
        checkpoint: returning would lose its progress, so it waits for the
        algorithm to promote it (``go``) or stop it, holding memory, not compute.
        """
        return (self._may_wait and self.world_size == 1 and self.budget < self.max_budget - EPS
                and not self.checkpoints)

    def _hold(self) -> bool:
        """Block until the engine says ``go`` (new budget: return False) or stop (raise)."""
        self._channel.send(Held(step=self.step))
        wait = getattr(self._channel, "wait_control", None)
        early, self._early = self._early, []
        while True:
            msgs = early or (wait(1.0) if wait is not None else self._channel.poll_control())
            early = []
            for msg in msgs:
                if isinstance(msg, Go):
                    self.budget = float(msg.budget)
                    if msg.threads:
                        _set_threads(int(msg.threads))
                    return False
                if isinstance(msg, StopRequest):
                    self._requested = str(msg.reason)
                    self._told = True
                    raise TrialInterrupted(f"trial {self.trial_id} stopped at its rung")
            if wait is None:
                time.sleep(0.01)

    def _await_verdict(self, timeout: float = VERDICT_TIMEOUT) -> bool:
        """After a report at a stop rung: wait for the engine's verdict; True: stopped.

        Training on while the verdict travels costs a unit thrown away when it
        is a stop (one epoch per stopped trial: an eighth of an ASHA run's). A
        ``go`` read meanwhile is kept for :meth:`_hold`; no answer: train on.
        """
        wait = getattr(self._channel, "wait_control", None)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            msgs = wait(min(left, 1.0)) if wait is not None else self._channel.poll_control()
            for msg in msgs:
                if isinstance(msg, StopRequest) and self._requested is None:
                    self._requested = str(msg.reason)
                elif isinstance(msg, Go):
                    self._early.append(msg)
                if isinstance(msg, StopRequest | Verdict):
                    return self._requested is not None
            if wait is None:
                time.sleep(0.005)
        return False

    @property
    def stop_reason(self) -> str | None:
        """Why the trial should stop: "budget", "stop", "pause", "resize" or None."""
        if self._requested:
            return self._requested
        return "budget" if self._over else None

    def steps(self) -> Iterator[float]:
        """Yield the steps up to the budget (start_step+1, ... once restored) until it must stop.

        The last step is the budget itself when the algorithm asked for a
        fractional one. Report each yielded step; checkpoint after reporting.
        """
        while not self.should_stop():
            nxt = self._next_step()
            self._yielded = nxt
            yield nxt
            if self._last < nxt - EPS:
                raise RuntimeError(
                    f"trial {self.trial_id}: step {nxt} was not reported; call "
                    "trial.report(step=step, ...) inside the `for step in trial.steps()` loop"
                )

    # ------------------------------------------------------------ checkpoints
    def checkpoint(self, state: Any, step: float | None = None) -> str | None:
        """Save ``state`` as this trial's checkpoint after ``step`` (default: the last reported).

        Only rank 0 writes; other ranks return None. Returns the file's path.
        """
        if self.rank != 0:
            return None
        step = self.step if step is None else float(step)
        path = ck.save_state(state, ck.checkpoint_path(self.checkpoint_dir, self.trial_id, step))
        self.last_checkpoint = str(path)
        self.checkpoints = True
        self._channel.send(Checkpointed(step=step, path=str(path)))
        return str(path)

    def restore(self) -> Any | None:
        """The state to resume from (this trial's, or the PBT donor's), or None on a fresh start."""
        if not self.restore_path:
            return None
        state = ck.load_state(self.restore_path, root=self.checkpoint_dir)
        self._restored = state is not None
        return state

    # ---------------------------------------------------------------- helpers
    @property
    def device(self) -> Any:
        """The torch device to train on: ``cuda`` (the GPU(s) this trial was given) or ``cpu``."""
        import torch

        return torch.device("cuda", 0) if self.device_kind == "cuda" else torch.device("cpu")

    def ddp(self, model: Any, **kwargs: Any) -> Any:
        """Wrap ``model`` in DistributedDataParallel when this trial spans several workers."""
        from nbtune.runtimes.dask.trial_side.ddp import wrap_model

        return wrap_model(model, self, **kwargs)

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    def _next_step(self) -> float:
        """The next whole unit of the loop's own state, or the budget when that comes first.

        The loop's state is where this process left it (its last report), else
        where :meth:`restore` put it, else at 0: a relaunch that restored nothing
        (no checkpoint, or a loop that keeps none) trains again from step 1, and
        its steps up to ``start_step`` are recomputed work, not results. Starting
        at ``start_step + 1`` with a fresh state would report wrong results.
        """
        if self._last > -math.inf:
            base = self._last
        else:
            base = float(self.restore_step or 0.0) if self._restored else 0.0
        return min(math.floor(base + EPS) + 1.0, self.budget)

    def _poll(self) -> None:
        for msg in self._channel.poll_control():
            if isinstance(msg, StopRequest) and self._requested is None:
                self._requested = str(msg.reason)
            elif isinstance(msg, Go):
                self._early.append(msg)  # read before report() started to wait: kept for it

    def _agree(self) -> None:
        """All ranks leave at the same step: any rank's stop request counts for all."""
        from nbtune.runtimes.dask.trial_side.ddp import agree_any

        want = self._requested is not None
        if agree_any(want, self) and self._requested is None:
            self._requested = "stop"

    def __repr__(self) -> str:
        return (f"<Trial {self.trial_id} step {self.step:g}/{self.budget:g} "
                f"rank {self.rank}/{self.world_size}>")


def uses_checkpoints(fn: Any) -> bool:
    """True when ``fn``'s code calls ``.checkpoint(...)``, itself or in what it calls.

    Read from the compiled code's names, not by running it
    (:func:`nbtune.core.code_names.names_used`). A trial whose loop saves
    checkpoints returns at the end of a segment and resumes from them
    (promotion); one that does not waits in place instead (``_may_hold``).
    """
    return "checkpoint" in names_used(fn)


def _set_threads(n: int) -> None:
    """A held trial resumed on another share: follow its thread count (torch, if loaded)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)


# ------------------------------------------------ the running trial (``nbtune.report``)
# In a trial process one trial runs at a time, so the process remembers it (``_CURRENT``),
# and a thread the training function starts finds it too. In thread mode several trials
# run in one worker process, each in its own thread: the trial is remembered per thread,
# which is looked at first.

_CURRENT: list[Trial] = []  # the trial this trial process is running (one at a time)
_LOCAL = threading.local()  # thread mode: the trial of this thread


@contextmanager
def running(trial: Trial, *, in_thread: bool) -> Iterator[None]:
    """While the training function runs: ``trial`` is the one :func:`get_trial` returns."""
    if in_thread:
        _LOCAL.trial = trial
    else:
        _CURRENT.append(trial)
    try:
        yield
    finally:
        if in_thread:
            _LOCAL.trial = None
        else:
            _CURRENT.clear()


def get_trial() -> Trial:
    """The trial this training function runs (for Ray-style ``train(config)`` functions)."""
    mine = getattr(_LOCAL, "trial", None)
    if mine is not None:
        return mine
    if not _CURRENT:
        raise RuntimeError("nbtune.report() is only available inside a training function "
                           "run by nbtune (runtime='dask' or 'auto')")
    return _CURRENT[-1]


def report(*args: Any, **kwargs: Any) -> bool:
    """``nbtune.report(...)``: :meth:`Trial.report` of the running trial (``ray.train.report``)."""
    return get_trial().report(*args, **kwargs)


def should_stop() -> bool:
    """``nbtune.should_stop()``: :meth:`Trial.should_stop` of the running trial."""
    return get_trial().should_stop()


# ------------------------------------------------ what a trial may report


def check_metric(trial_id: int, metric: str | None, metrics: dict[str, Any]) -> None:
    """The experiment's metric must be in every report, as a number (Ray Tune asks the same).

    Without it the algorithm ranks the trial as the worst at every rung and
    the best trial is meaningless; a string would make comparisons fail far
    away, in the driver. NaN and inf are numbers: ranked as the worst.
    Numpy and 0-d torch scalars are converted in place.
    """
    if metric is None:
        return
    if metric not in metrics:
        raise KeyError(
            f"trial {trial_id} reported {sorted(metrics)} but not the experiment's metric "
            f"{metric!r}: report it (trial.report(step, {metric}=...)) or pass the name you "
            "report as tune(..., metric=...)")
    v = metrics[metric]
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        try:
            if isinstance(v, bool | str | bytes) or v is None:
                raise TypeError
            v = float(v)
        except (TypeError, ValueError):
            raise TypeError(
                f"trial {trial_id} reported {metric}={v!r} ({type(v).__name__}); the "
                "experiment's metric must be a number (e.g. float(loss) or loss.item())"
            ) from None
        metrics[metric] = v


def clean(metrics: dict[str, Any]) -> dict[str, Any]:
    """Make metrics msgpack-safe: numpy/torch scalars become floats, other objects strings."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, bool | str) or v is None:
            out[str(k)] = v
        elif isinstance(v, numbers.Integral):
            out[str(k)] = int(v)
        else:  # floats, numpy and 0-d torch scalars; anything else is shown as text
            try:
                out[str(k)] = float(v)
            except (TypeError, ValueError):
                out[str(k)] = str(v)
    return out
