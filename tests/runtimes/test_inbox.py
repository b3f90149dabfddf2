"""The Dask driver's inbox: one batch is stamped with one time."""

from __future__ import annotations

import itertools

from nbtune.core import events as ev
from nbtune.runtimes.dask.driver_side.inbox import route_batch


class Ticking:
    """A clock that moves on by a millisecond every time it is read."""

    def __init__(self) -> None:
        self.reads = itertools.count()

    def now(self) -> float:
        return next(self.reads) * 1e-3


class Reports:
    """Stands in for the run driver: each message becomes a report stamped with ``now``."""

    finishing = False

    def translate(self, kind, payload, now):
        return [ev.TrialReported(now, m["trial"], 1.0, {"loss": 0.5}) for m in payload]


def test_every_item_of_a_batch_gets_the_one_time_the_engine_learns_of_it():
    items = [("msgs", [{"trial": 0}]), ("msgs", [{"trial": 1}, {"trial": 2}]),
             ("event", ev.TrialStopRequested(0.25, 3))]
    clock = Ticking()
    out = route_batch(items, members=None, driver=Reports(), clock=clock)  # type: ignore[arg-type]
    assert [e.trial_id for e in out] == [0, 1, 2, 3]  # arrival order
    assert {e.time for e in out[:3]} == {0.0}  # one reading of the clock for the batch
    assert out[3].time == 0.25  # a person's event keeps its own time
    assert clock.now() == 1e-3  # it was read once
