"""Trial-process side of a fused unit: one ``train(config, trial)`` call for F members.

The job of a fused run (:mod:`.fused_job`) lists its members. Each gets its own
:class:`~nbtune.runtimes.dask.trial_side.trial_api.Trial` (its trial id, config, checkpoint to
restore) over a :class:`MemberChannel`: what a member sends carries its trial id
(``member``) so the driver files it under that trial, and control addressed to one member
(``member``) reaches only it (a stop for one member slices it out of the fused model, see
:meth:`nbtune.fusion.fusion_trial.FusionTrial.report`); control without one reaches all.

The unit's peak memory rides on its reports (``Report.mem``, bytes, sent whenever it grew):
``torch.cuda.max_memory_allocated`` on a GPU, the process's peak resident set on a CPU
worker (reset when the unit starts, since a CPU trial process serves job after job). The
driver passes it to the engine, which sizes fused units from it (``fusion=True``). It is
sent from the second step of the segment on (or at its last step, if it has one): the
first optimizer step only creates the optimizer's state, and the second one can still add
a temporary per member (an MLP with SGD momentum on CPU peaks higher after step 2 than
after step 1), as :func:`nbtune.fusion.memory.measure_peak` runs two steps for the same
reason.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from nbtune.runtimes.dask.protocol import Control, Report, TrialMessage

__all__ = ["MemberChannel", "run_fused"]


class _Hub:
    """The process's one pipe, shared by the members: control sorted into per-member boxes."""

    def __init__(self, channel: Any, ids: list[int], device: str = "cpu") -> None:
        self.channel = channel
        self.boxes: dict[int, list[Control]] = {i: [] for i in ids}
        self.cuda = device == "cuda"
        self.sent = 0  # the peak last sent
        self.from_step = math.inf  # the first step whose report carries the peak
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
        else:
            from nbtune.fusion.memory import reset_process_peak

            reset_process_peak()

    def peak(self) -> int:
        """The unit's peak memory so far (bytes)."""
        if self.cuda:
            import torch

            return int(torch.cuda.max_memory_allocated())
        from nbtune.fusion.memory import process_peak

        return process_peak()

    def send(self, msg: TrialMessage) -> None:
        if isinstance(msg, Report) and float(msg.step) >= self.from_step:
            peak = self.peak()
            if peak > self.sent:
                self.sent = peak
                msg = dataclasses.replace(msg, mem=peak)
        self.channel.send(msg)

    def pull(self) -> None:
        for msg in self.channel.poll_control():
            to = msg.member
            for i in ([to] if to in self.boxes else list(self.boxes)):
                self.boxes[i].append(msg)


class MemberChannel:
    """One member's view of the shared channel (``Trial``'s ``Channel`` protocol)."""

    def __init__(self, hub: _Hub, trial_id: int) -> None:
        self.hub, self.trial_id = hub, trial_id

    def send(self, msg: TrialMessage) -> None:
        self.hub.send(dataclasses.replace(msg, member=self.trial_id))

    def poll_control(self) -> list[Control]:
        self.hub.pull()
        out, self.hub.boxes[self.trial_id] = self.hub.boxes[self.trial_id], []
        return out


def run_fused(fn: Any, job: dict[str, Any], channel: Any) -> Any:
    """Run ``fn(config, FusionTrial)`` for the job's members; returns the FusionTrial."""
    from nbtune.fusion.fusion_trial import FusionTrial, resume_step
    from nbtune.runtimes.dask.trial_side.trial_api import Trial

    members = job["members"]
    hub = _Hub(channel, [int(m["trial_id"]) for m in members], job.get("device", "cpu"))
    trials = [Trial({**job, **m, "hold": False, "verdicts": []},  # members never wait alone
                    MemberChannel(hub, int(m["trial_id"]))) for m in members]
    budget = int(math.floor(float(job["budget"]) + 1e-9))
    fused = FusionTrial([t.config for t in trials], trials, budget,
                        start_step=resume_step(trials))
    hub.from_step = min(fused.start_step + 2, budget)
    fn(fused.config, fused)
    return fused
