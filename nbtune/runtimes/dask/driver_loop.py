"""The Dask runtime's driver thread: the one owner of the engine while an experiment runs.

Everything that happens reaches it through the runtime's :class:`~.inbox.Inbox`;
it routes each item (worker arrivals and losses to membership, trial messages to
the run driver), calls ``engine.handle`` once on the batch and hands the commands
to the run driver. After each batch it publishes what other threads may read as
new immutable objects (:attr:`DaskRuntime.placements`), never the engine's own
mappings, which only this thread changes.
"""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import Any

from nbtune.runtimes.dask.inbox import route

__all__ = ["drive"]

log = logging.getLogger("nbtune.dask")


def drive(rt: Any) -> None:
    """The driver thread's body for runtime ``rt`` (until Finish, ``close()`` or a failure)."""
    engine, driver, members = rt._engine, rt._driver, rt._members
    assert engine is not None and driver is not None and members is not None
    try:
        while not rt._halt.is_set():
            items = rt._inbox.batch()
            events = driver.take_pending()
            if items and log.isEnabledFor(logging.DEBUG):
                log.debug("t=%.3f inbox %s", rt._clock.now(), [k for k, _ in items])
            for kind, payload in items:  # to membership or the run driver (.inbox)
                events.extend(route(kind, payload, members, driver, rt._clock))
            driver.enforce_deadlines()
            if events:
                driver.execute(engine.handle(*events))
                rt._placed = MappingProxyType(dict(engine.running))  # a new one: readers keep theirs
                # the engine just changed: the Dask dashboard's page may show it
                rt._page.tick(rt.client, engine, rt.inventory, rt._topic, rt._clock.now(),
                              force=engine.done)
            if driver.finished:
                break
    except BaseException as exc:  # surfaced by wait(); the trials must not outlive it
        log.exception("nbtune Dask driver failed")
        rt._error = exc
        if rt._links is not None:
            driver.kill_all(f"driver error: {exc!r}")
    finally:
        if rt._cluster is not None and not rt._halt.is_set() and not rt.keep:
            rt.close()  # a cluster we started ends with its experiment; else the
        # subscriptions stay until the next experiment or close() (releasing them here
        # raced the last messages of the ending runs)
        rt._done.set()
