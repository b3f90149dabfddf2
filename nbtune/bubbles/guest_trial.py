"""A tuning trial run as a gated guest: the user's ``train(config, trial)`` inside a stage's bubbles.

The trial process is the Dask runtime's (:func:`nbtune.runtimes.dask.trial_side.trial_process.run_job`
with its :class:`~nbtune.runtimes.dask.trial_side.trial_api.Trial`), so a training
function runs unchanged here and there. What differs is the channel: every
report is a step boundary, where the guest pauses if its stage wants the
compute slot (:meth:`~nbtune.bubbles.gate.GuestSide.checkpoint`), and a stop
is read at the next report, so the process always leaves the gate cleanly
(a guest killed while holding the slot would leave the stage waiting out its
grace at every chunk). Between reports the SIGSTOP fallback protects the
stage; :func:`gate_layers` adds Hydro's layer-boundary checkpoints to a model
(a no-op outside a gated guest, so the same function runs alone).
"""

from __future__ import annotations

import dataclasses
import os
import queue
from typing import Any

from nbtune.bubbles.device import peak_memory, synchronizer, use_mps_share
from nbtune.bubbles.gate import Gate, GuestSide
from nbtune.bubbles.guest import pin
from nbtune.bubbles.timeline import now
from nbtune.runtimes.dask.protocol import Control, Job, Quit, Recomputed, Report, TrialMessage

__all__ = ["GatedChannel", "GuestEnd", "gate_layers", "trial_worker"]

_SIDE: list[GuestSide] = []  # the gate of the guest this process runs (at most one)


@dataclasses.dataclass(frozen=True)
class GuestEnd:
    """What a guest measured over its trial, sent with the trial's exit: its running
    intervals, how often it paused, its peak memory (bytes)."""

    intervals: list[Any]
    pauses: int
    rss: float


def gate_layers(model: Any) -> Any:
    """Pause at every layer boundary of ``model`` while the host stage computes; returns
    ``model``. Outside a gated guest (a trial run alone, on Dask) it does nothing."""
    if _SIDE:
        _SIDE[-1].attach(model)
    return model


class GatedChannel:
    """The Trial's channel: messages to the runtime's queue, a pause at every report.

    What goes on the queue is ``("trial", trial_id, run, message, rss)``: the typed message
    (stamped with the bubbles' clock) and, with a report, the guest's measured peak memory.
    """

    def __init__(self, trial_id: int, run: int, side: GuestSide, out: Any, control: Any,
                 device: str = "cpu") -> None:
        self.trial_id, self.run, self.side = trial_id, run, side
        self.out, self.control, self.device = out, control, device

    def send(self, msg: TrialMessage) -> None:
        if msg.t is None:
            msg = dataclasses.replace(msg, t=now())
        # a report carries its measured peak so far, for the memory check
        rss = peak_memory(self.device) if isinstance(msg, Report) else None
        self.out.put(("trial", self.trial_id, self.run, msg, rss))
        if isinstance(msg, Report | Recomputed):
            self.side.checkpoint()  # a step boundary: give the slot back if the stage wants it

    def poll_control(self) -> list[Control]:
        out = []
        while True:
            try:
                msg = self.control.get_nowait()
            except queue.Empty:
                return out
            if isinstance(msg, Control):
                out.append(msg)


def _run(job: dict[str, Any], gate: Gate, out: Any, inbox: Any, max_wait: float,
         device: str) -> None:
    """One trial, gated; its running intervals go back with the exit message. Beside a GPU
    stage every checkpoint first waits for the trial's kernels (:mod:`.device`)."""
    from nbtune.runtimes.dask.trial_side.trial_process import run_job

    side = GuestSide(gate, max_wait=max_wait, sync=synchronizer(device))
    _SIDE.append(side)
    tid, run = int(job["trial_id"]), int(job["run"])
    try:
        side.start()
        res = run_job(job, GatedChannel(tid, run, side, out, inbox, device))
    finally:
        side.finish()
        _SIDE.clear()
    res = dataclasses.replace(res, t=now())
    out.put(("trial", tid, run, res, GuestEnd(side.intervals, side.pauses, peak_memory(device))))


def trial_worker(stage: int, gate: Gate, inbox: Any, out: Any, nice: int, idle_class: bool,
                 max_wait: float, device: str = "cpu", mps_percentage: int | None = None) -> None:
    """A stage's guest process, started with the host so torch is imported before a trial
    lands (a spawn costs seconds, a whole host run on a short job): lowest priority, it
    runs the jobs its inbox brings one at a time (``job["env"]`` pins it to the stage's
    core; beside a GPU stage, a core of its own) until told to quit. Beside a GPU stage
    it runs under the stage's MPS share (``mps_percentage``), set before CUDA starts."""
    use_mps_share(mps_percentage)
    pin(None)  # torch imported, one thread
    os.nice(nice)
    if idle_class and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    out.put(("worker", stage, os.getpid()))
    while True:
        msg = inbox.get()
        if isinstance(msg, Quit):
            return
        if isinstance(msg, Job):
            _run(msg.spec, gate, out, inbox, max_wait, device)
        # anything else: a stop for a trial that had already returned
