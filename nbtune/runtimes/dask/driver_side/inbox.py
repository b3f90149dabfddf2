"""The driver thread's inbox: everything that happens to one experiment, in arrival order.

Each item is ``(kind, payload)``. Who puts what:

* ``("event", e)``: an engine event from a person (``DaskRuntime.submit``) or the start;
* ``("msgs", batch)``: trial messages, from a worker's stream (:mod:`.links`) or the
  experiment's topic (:meth:`Inbox.on_topic`);
* ``("launch_failed", (run_id, rank, error, lost))``: a rank never started (:mod:`.links`);
* ``("lost" | "joined", address)``: the scheduler's ``all`` topic (:meth:`Inbox.on_all`);
  ``("linked" | "unlinked", address)``: :mod:`.links`; ``("probed", ...)``: :mod:`.membership`.

The runtime's loop takes a batch (:meth:`Inbox.batch`) and routes each item
(:func:`route`): ``event`` to the engine as it is, membership's kinds
(:data:`.membership.ITEMS`) to :class:`~.membership.Membership`, ``msgs`` and
``launch_failed`` to the experiment's :class:`~.driver.RunDriver`. A batch is
stamped with one time (:func:`route_batch`): the engine learns everything in it at
once, in one ``handle`` call, and a replay of the run (the simulator, fed its
timings) hands the engine simultaneous events together; per-item times would make
events the engine decided on together look apart.
"""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any

from nbtune.core import events as ev
from nbtune.runtimes.dask.driver_side.membership import ITEMS, Membership, scheduler_item

if TYPE_CHECKING:
    from nbtune.runtimes.dask.driver_side.driver import RunDriver
    from nbtune.runtimes.dask.driver_side.runs import WallClock

__all__ = ["Inbox", "route", "route_batch"]


def route(kind: str, payload: Any, members: Membership | None, driver: RunDriver,
          now: float) -> list[ev.Event]:
    """Engine events for one inbox item: a person's as it is, else membership's or the
    driver's, stamped ``now`` (no membership yet: the cluster is still starting, and
    nothing has said anything of its workers)."""
    if kind == "event":
        return [payload]
    if kind in ITEMS:
        if members is None:
            return []
        return members.on(kind, payload, now, finishing=driver.finishing)
    return driver.translate(kind, payload, now)


def route_batch(items: list[tuple[str, Any]], members: Membership | None, driver: RunDriver,
                clock: WallClock) -> list[ev.Event]:
    """Engine events for one batch of inbox items, in order, all stamped with one reading
    of ``clock`` (the moment the engine learns of them)."""
    now = clock.now()
    out: list[ev.Event] = []
    for kind, payload in items:
        out.extend(route(kind, payload, members, driver, now))
    return out


class Inbox(queue.SimpleQueue):  # type: ignore[type-arg]
    """One experiment's inbox: written from any thread, read by the driver thread only."""

    def on_topic(self, event: Any) -> None:
        """A batch of trial messages published on the experiment's topic."""
        self.put(("msgs", event[1]))

    def on_all(self, event: Any) -> None:
        """An event of the scheduler's ``all`` topic: a worker added or removed, or nothing."""
        item = scheduler_item(event)
        if item is not None:
            self.put(item)

    def batch(self, wait: float = 0.05, limit: int = 2000) -> list[tuple[str, Any]]:
        """What has arrived (waiting up to ``wait`` seconds for the first item), oldest first."""
        items: list[tuple[str, Any]] = []
        try:
            items.append(self.get(timeout=wait))
            while len(items) < limit:
                items.append(self.get_nowait())
        except queue.Empty:
            pass
        return items
