"""Worker side of the driver's direct links: launch, control and the message stream.

A Dask task per trial costs a scheduler round trip (milliseconds, more under
load) before the trial starts, and worker events reach the client through the
scheduler's batched streams (milliseconds again). For short trials
that is most of the per-trial overhead, so the driver talks to each worker
directly instead, over the comm layer Dask already has (the way actors do):

* ``nbtune_launch(job)``: start one trial rank on this worker
  (:func:`.rank_runner.start_rank`); rank 0 of a multi-worker trial picks the
  rendezvous port on its own host and returns it, so the driver can pass it
  to the other ranks (no shared variable, no fixed port).
* ``nbtune_control(keys, msg)``: stop / pause / kill for running ranks.
* ``nbtune_stream(topic)``: a long-lived connection the driver opens to each
  worker; every message of that runtime's trials (and the utilization
  samples) is written to it as soon as it exists. Without a stream (none
  opened yet, or it broke) messages go through ``worker.log_event`` to the
  same topic, which the driver also subscribes to: nothing is dropped.

:class:`~nbtune.runtimes.dask.worker_side.plugin.WarmPoolPlugin` installs the handlers
on every worker, present and future.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import pickle
import traceback
from collections.abc import Callable
from typing import Any

from nbtune.runtimes.dask.trial_side import ddp
from nbtune.runtimes.dask.worker_side.rank_runner import deliver, start_rank

__all__ = ["install", "emitter", "launch_via_scheduler"]

#: (worker address, topic) -> queue of message batches for that runtime's open stream (touched
#: on the worker's event loop only); keyed by worker too: a LocalCluster(processes=False) runs
#: several workers in one process
_STREAMS: dict[tuple[str, str], asyncio.Queue[list[dict[str, Any]] | None]] = {}


def install(worker: Any) -> None:
    """Register the handlers on ``worker`` (idempotent: a later runtime re-registers)."""
    worker.handlers["nbtune_launch"] = _launch_handler(worker)
    worker.handlers["nbtune_control"] = _control
    worker.handlers["nbtune_stream"] = _stream_handler(worker)


def emitter(worker: Any) -> Callable[[str, list[dict[str, Any]]], None]:
    """A thread-safe ``emit(topic, batch)`` for code running on ``worker``'s threads."""

    def emit(topic: str, batch: list[dict[str, Any]]) -> None:
        worker.loop.add_callback(_put, worker, topic, batch)

    return emit


def _put(worker: Any, topic: str, batch: list[dict[str, Any]]) -> None:
    # on the worker's event loop, like every change to _STREAMS: no stream can close between
    # the look-up and the put
    q = _STREAMS.get((worker.address, topic))
    if q is not None:
        q.put_nowait(batch)
    else:
        worker.log_event(topic, batch)


def _host(worker: Any) -> str:
    return str(worker.address).split("://")[-1].rsplit(":", 1)[0].strip("[]")


def _launch_handler(worker: Any) -> Callable[..., dict[str, Any]]:
    def nbtune_launch(job: bytes) -> dict[str, Any]:
        # an error here is the launch's, not the connection's: it is answered, not raised,
        # so the driver can tell it from an unreachable worker (whose trials it requeues)
        try:
            j = pickle.loads(job)
            out: dict[str, Any] = {}
            if int(j["world_size"]) > 1 and int(j["rank"]) == 0:
                host = _host(worker)
                out = {"master_addr": host, "master_port": ddp.free_port(host)}
                j.update(out)
            start_rank(worker, j, emitter(worker), functools.partial(_put, worker))
        except Exception:
            return {"started": False, "error": traceback.format_exc()}
        return {"started": True, **out}

    return nbtune_launch


def launch_via_scheduler(job: bytes, dask_worker: Any = None) -> dict[str, Any]:
    """``nbtune_launch`` for a worker the client cannot reach directly (``client.run``)."""
    return _launch_handler(dask_worker)(job)


def _control(keys: list[str], msg: dict[str, Any]) -> int:
    return deliver(keys, msg)


def _stream_handler(worker: Any) -> Callable[..., Any]:
    async def nbtune_stream(comm: Any, topic: str) -> None:
        q: asyncio.Queue[list[dict[str, Any]] | None] = asyncio.Queue()
        key = (worker.address, topic)
        old = _STREAMS.get(key)
        _STREAMS[key] = q
        if old is not None:
            old.put_nowait(None)  # the driver reconnected: the older stream ends
        reader: asyncio.Future[Any] | None = None
        try:
            await comm.write({"ready": True})
            # the driver never writes again: a read that returns means it hung up
            reader = asyncio.ensure_future(comm.read())
            while True:
                getter = asyncio.ensure_future(q.get())
                done, _ = await asyncio.wait({reader, getter},
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    break
                batch = getter.result()
                if batch is None:
                    break
                await comm.write(batch)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            if _STREAMS.get(key) is q:
                del _STREAMS[key]
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(BaseException):
                    reader.exception()
            while not q.empty():  # queued after the driver left: the slow way, not nowhere
                batch = q.get_nowait()
                if batch:
                    worker.log_event(topic, batch)
            if not comm.closed():
                comm.abort()

    return nbtune_stream
