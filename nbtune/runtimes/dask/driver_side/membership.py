"""The cluster's membership as the engine sees it: workers arriving, leaving, streams breaking.

A worker that joins becomes GPUs once its direct stream is open (``linked``);
a lost worker's runs end (through the driver's callback) and its GPUs leave
the inventory; a broken stream counts as a loss, then reopens. Each change
becomes ``ResourcesChanged``, and with no GPU left the experiment pauses until
a worker returns. Used on the driver thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbtune.core import events as ev

if TYPE_CHECKING:
    from nbtune.runtimes.dask.driver_side.cluster import Inventory
    from nbtune.runtimes.dask.driver_side.links import WorkerLinks

__all__ = ["ITEMS", "Membership", "scheduler_item"]

log = logging.getLogger("nbtune.dask")

#: the inbox items :meth:`Membership.on` handles (the runtime's loop routes them here)
ITEMS = frozenset({"lost", "joined", "linked", "probed", "unlinked"})


def scheduler_item(event: Any) -> tuple[str, str] | None:
    """The inbox item for an event of the scheduler's ``all`` topic: a worker added or removed."""
    msg = event[1]
    if not isinstance(msg, dict):
        return None
    action = msg.get("action")
    if action == "remove-worker" and "worker" in msg:
        return ("lost", msg["worker"])
    if action == "add-worker" and "worker" in msg:
        return ("joined", msg["worker"])
    return None


class Membership:
    """Worker arrivals and losses of one experiment, turned into engine events.

    ``end_runs(address, now)`` ends the runs with a rank on ``address`` and
    returns the events that says; after Finish (``finishing``) the cluster's
    changes are no longer reported, so the experiment can finish.
    """

    def __init__(self, client: Any, inventory: Inventory, links: WorkerLinks,
                 end_runs: Callable[[str, float], list[ev.Event]]) -> None:
        self.client = client
        self.inventory = inventory
        self.links = links
        self._end_runs = end_runs
        self.paused_empty = False  # ExperimentPauseRequested sent: the cluster has no GPU left
        #: workers the scheduler removed: a late "linked" for one (a stream that could not be
        #: reopened falls back to the scheduler and says "linked") must not probe it, which
        #: would wait out a 30 s connect timeout (a worker killed mid-run)
        self.gone: set[str] = set()

    def on(self, kind: str, address: Any, now: float, *, finishing: bool) -> list[ev.Event]:
        """Handle one inbox item: ``lost``, ``joined``, ``linked``, ``probed`` or ``unlinked``."""
        if kind == "lost":
            self.gone.add(address)
            return self.lost(address, now, finishing)
        if kind == "joined":  # it becomes GPUs once its stream is open ("linked")
            self.gone.discard(address)
            if not finishing and not self.links.linked(address):
                self.links.open_later(address)
            return []
        if kind == "linked":  # probe it off the driver thread: the answer comes as "probed"
            if address in self.gone:
                self.links.drop(address)
            elif not finishing:
                self.probe_later(address)
            return []
        if kind == "probed":
            address, info = address
            if not finishing and address not in self.gone and self.inventory.add(info):
                return self.changed(now)
            return []
        if kind == "unlinked":
            return self.unlinked(address, now, finishing)
        raise AssertionError(f"unknown membership item {kind!r}")

    def probe_later(self, address: str) -> None:
        """Probe a newly linked worker on the client's loop; ``("probed", (address, info))``.

        Probing it on the driver thread would stall the whole experiment for a 30 s
        connect timeout whenever the worker died before answering; a worker that
        never answers is just never adopted.
        """
        import asyncio

        from nbtune.runtimes.dask.driver_side.cluster import probe_worker

        async def go() -> None:
            try:
                info = await self.client.run(probe_worker, self.inventory.gpus,
                                             workers=[address], on_error="ignore",
                                             asynchronous=True)
            except Exception:  # the worker or the scheduler went away meanwhile
                info = {}
            self.links.inbox.put(("probed", (address, info)))

        asyncio.run_coroutine_threadsafe(go(), self.client.loop.asyncio_loop)

    def lost(self, address: str, now: float, finishing: bool) -> list[ev.Event]:
        """A worker left (or its stream broke): its runs end, its GPUs leave the inventory."""
        # its GPUs leave the inventory first: a relaunch that was waiting for one of its runs
        # to end (and starts as it ends) must not be sent to it
        dropped = self.inventory.drop_worker(address)
        out = self._end_runs(address, now)
        self.links.drop(address)
        if dropped and not finishing:
            out.extend(self.changed(now))
        return out

    def unlinked(self, address: str, now: float, finishing: bool) -> list[ev.Event]:
        """A worker's stream broke: messages may be lost, so its runs count as lost.

        If the worker itself is gone the scheduler says so too (handled the
        same way, once); if it is alive, the stream reopens and the worker
        comes back as new GPUs.
        """
        if not any(s.worker == address for s in self.inventory.slots.values()):
            return []
        out = self.lost(address, now, finishing)
        if not finishing:
            self.links.open_later(address)
        return out

    def changed(self, now: float) -> list[ev.Event]:
        """ResourcesChanged; with no GPU left, pause the experiment until a worker returns.

        An engine cannot schedule onto an empty cluster (it would report the
        pending trials as unplaceable), and a nanny usually restarts a dead
        worker within seconds.
        """
        if not self.inventory.slots:
            if self.paused_empty:
                return []
            self.paused_empty = True
            log.warning("no Dask worker left: the experiment waits for one to join")
            return [ev.ExperimentPauseRequested(now)]
        out: list[ev.Event] = [ev.ResourcesChanged(now, self.inventory.spec())]
        if self.paused_empty:
            self.paused_empty = False
            out.append(ev.ExperimentResumeRequested(now))
        return out
