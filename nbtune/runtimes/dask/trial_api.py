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
* In a multi-worker (DDP) trial every rank calls ``report`` with the same
  ``step``; rank 0's metrics reach the engine, stop requests are agreed on by
  an all-reduce inside ``report`` so all ranks leave at the same step, and
  only rank 0 writes checkpoints (every rank restores).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from typing import Any, Protocol

from nbtune.core.tolerance import EPS
from nbtune.runtimes.dask import checkpoints as ck

__all__ = ["Trial", "TrialInterrupted"]


class TrialInterrupted(BaseException):
    """Raised by ``report`` after the trial was told to stop; the runtime treats it as a clean end."""


class Channel(Protocol):
    """How a Trial talks to the runtime: messages out, control messages in."""

    def send(self, msg: dict[str, Any]) -> None: ...

    def poll_control(self) -> list[dict[str, Any]]: ...


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
        self.last_checkpoint: str | None = None
        self._channel = channel
        self._over = False  # budget reached
        self._requested: str | None = None  # "stop" | "pause" | "resize"
        self._told = False  # should_stop() has returned True to the user

    # --------------------------------------------------------------- reporting
    def report(self, step: float | None = None, **metrics: Any) -> bool:
        """Record the metrics after ``step`` cumulative units; return True when the trial must stop.

        ``step`` defaults to the next unit (as :meth:`steps` would yield it).
        """
        if self._told:
            raise TrialInterrupted(
                f"trial {self.trial_id} reported step {step} after it was told to stop "
                f"({self._requested or 'budget reached'}); return from the training function "
                "when report() or should_stop() returns True"
            )
        step = self._next_step() if step is None else float(step)
        if not math.isfinite(step) or step <= self.step + EPS:
            raise ValueError(
                f"trial {self.trial_id}: step must increase, got {step} after {self.step} "
                "(step is the cumulative budget, e.g. the epoch number starting at start_step+1)"
            )
        if step > self.budget + EPS:
            raise ValueError(
                f"trial {self.trial_id}: reported step {step} is past the budget {self.budget} "
                "this segment was launched for; stop when report() returns True"
            )
        self.step = step
        if self.rank == 0:
            self._channel.send({"k": "report", "step": step, "metrics": _clean(metrics)})
        self._poll()
        if step >= self.budget - EPS:
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

    @property
    def stop_reason(self) -> str | None:
        """Why the trial should stop: "budget", "stop", "pause", "resize" or None."""
        if self._requested:
            return self._requested
        return "budget" if self._over else None

    def steps(self) -> Iterator[float]:
        """Yield the steps of this segment (start_step+1, ..., budget) until the trial must stop.

        The last step is the budget itself when the algorithm asked for a
        fractional one. Report each yielded step; checkpoint after reporting.
        """
        while not self.should_stop():
            nxt = self._next_step()
            before = self.step
            yield nxt
            if self.step <= before + EPS:
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
        self._channel.send({"k": "ckpt", "step": step, "path": str(path)})
        return str(path)

    def restore(self) -> Any | None:
        """The state to resume from (this trial's, or the PBT donor's), or None on a fresh start."""
        if not self.restore_path:
            return None
        return ck.load_state(self.restore_path)

    # ---------------------------------------------------------------- helpers
    @property
    def device(self) -> Any:
        """The torch device to train on: ``cuda`` (the GPU(s) this trial was given) or ``cpu``."""
        import torch

        return torch.device("cuda", 0) if self.device_kind == "cuda" else torch.device("cpu")

    def ddp(self, model: Any, **kwargs: Any) -> Any:
        """Wrap ``model`` in DistributedDataParallel when this trial spans several workers."""
        from nbtune.runtimes.dask.ddp import wrap_model

        return wrap_model(model, self, **kwargs)

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    def _next_step(self) -> float:
        """The next whole unit, or the budget itself when that comes first (fractional budgets)."""
        return min(math.floor(self.step + EPS) + 1.0, self.budget)

    def _poll(self) -> None:
        for msg in self._channel.poll_control():
            if msg.get("k") == "stop" and self._requested is None:
                self._requested = str(msg.get("reason", "stop"))

    def _agree(self) -> None:
        """All ranks leave at the same step: any rank's stop request counts for all."""
        from nbtune.runtimes.dask.ddp import agree_any

        want = self._requested is not None
        if agree_any(want, self) and self._requested is None:
            self._requested = "stop"

    def __repr__(self) -> str:
        return (f"<Trial {self.trial_id} step {self.step:g}/{self.budget:g} "
                f"rank {self.rank}/{self.world_size}>")


def _clean(metrics: dict[str, Any]) -> dict[str, Any]:
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
