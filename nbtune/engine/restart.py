"""An engine that survives its runtime: resume after the process died.

A new runtime starts by feeding ``ExperimentStarted``; a
:class:`RestartableEngine` reads a second one as "the runtime restarted"
(:meth:`Engine.restart`). That event is recorded like any other, so resuming a
resumed experiment replays through the restart in the same way.
"""

from __future__ import annotations

import dataclasses

from nbtune.core import events as ev
from nbtune.core.commands import Command
from nbtune.engine.engine import Engine

__all__ = ["RestartableEngine"]


class RestartableEngine(Engine):
    """An :class:`Engine` that survives its runtime: a repeated ``ExperimentStarted`` restarts.

    On the second and later ``ExperimentStarted`` the trials it had running
    are requeued at the front (first launched first) to continue from their
    checkpoints, and the new runtime's cluster is adopted. A new runtime's
    clock may start again from 0 (a wall clock cannot be wound forward): the
    restart then fixes ``time_offset`` so its times continue the experiment's
    timeline, and every later event is shifted by it before it is handled.
    Subscribers (the recorder) see the shifted events, so a replay needs no offset.
    """

    restartable = True
    time_offset = 0.0

    def handle(self, *events: ev.Event) -> list[Command]:
        if self.started and any(isinstance(e, ev.ExperimentStarted) for e in events):
            first = next(e for e in events if isinstance(e, ev.ExperimentStarted))
            self.time_offset = max(0.0, self.time - first.time)
        if self.time_offset:
            events = tuple(dataclasses.replace(e, time=e.time + self.time_offset)
                           for e in events)
        return super().handle(*events)
