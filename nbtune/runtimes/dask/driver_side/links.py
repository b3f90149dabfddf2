"""Driver side of the direct links to the workers (see :mod:`.handlers` for why they exist).

Everything here runs on the Dask client's event loop; the driver thread only
schedules coroutines and never waits on them, except :meth:`WorkerLinks.open_all`
at start. What comes back (message batches, a launch that failed, a stream
that broke, a worker linked) goes into the driver's inbox like everything else:

* ``("msgs", batch)``: trial messages read from a worker's stream;
* ``("launch_failed", (run_id, rank, error, lost))``: a rank never started;
  ``lost`` says the worker could not be reached (its trial is requeued, not failed);
* ``("unlinked", address)``: a stream broke while the worker was still ours;
* ``("linked", address)``: a stream to a new (or returning) worker is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import queue
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbtune.runtimes.dask.driver_side.kernel_slot import KernelSlot

__all__ = ["WorkerLinks", "LinkError", "LaunchError"]

log = logging.getLogger("nbtune.dask")
OPEN_TIMEOUT = 10.0  # a new worker may still be setting up its plugins when it is announced


class LinkError(RuntimeError):
    """A worker offers no nbtune stream (its plugins are not set up, or it is gone)."""


class LaunchError(RuntimeError):
    """The worker was reached but could not start the rank (its answer says why)."""


class WorkerLinks:
    """One stream per worker into the driver's inbox, and direct launch / control calls."""

    def __init__(self, client: Any, topic: str, inbox: queue.SimpleQueue[tuple[str, Any]],
                 kernel: KernelSlot | None = None) -> None:
        self.client = client  # None until the cluster is up (a kernel slot runs trials before)
        self.topic = topic
        self.inbox = inbox
        #: the kernel slot (.kernel_slot): launched and controlled by a call, no connection
        self.kernel = kernel
        self._comms: dict[str, Any] = {}
        #: workers the client cannot reach directly (only the scheduler can): launches and
        #: control go through the scheduler (``client.run``), messages through the topic
        self.relayed: set[str] = set()
        self._closing = False

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        return self.client.loop.asyncio_loop

    def linked(self, address: str) -> bool:
        return (address in self._comms or address in self.relayed
                or (self.kernel is not None and self.kernel.owns(address)))

    def attach(self, client: Any) -> None:
        """The cluster is up: Dask workers can be reached through ``client`` from now on."""
        self.client = client

    def _fall_back(self, address: str, exc: BaseException) -> None:
        """No direct stream to ``address``: reach it through the scheduler instead (slower).

        Clients that can talk only to the scheduler (Dask Gateway, some Kubernetes
        set-ups) still run trials, at the cost of a scheduler round trip per message.
        """
        if address not in self.relayed:
            log.warning("nbtune: no direct connection to worker %s (%r); its trials are "
                        "launched and report through the scheduler (slower)", address, exc)
        self.relayed.add(address)

    # ------------------------------------------------------------------ streams
    def open_all(self, addresses: list[str], timeout: float = OPEN_TIMEOUT) -> None:
        """Open streams to ``addresses`` now (blocking); a worker no stream reaches is driven
        through the scheduler instead."""

        async def all_() -> list[Any]:
            return await asyncio.gather(*(self._open(a, timeout) for a in addresses),
                                        return_exceptions=True)

        res = asyncio.run_coroutine_threadsafe(all_(), self._loop).result(timeout + 5)
        for a, r in zip(addresses, res, strict=True):
            if isinstance(r, BaseException):
                self._fall_back(a, r)

    def open_later(self, address: str) -> None:
        """Open a stream in the background; ``("linked", address)`` tells when it is up."""

        async def go() -> None:
            try:
                await self._open(address, OPEN_TIMEOUT)
            except Exception as exc:
                if self._closing:
                    return
                self._fall_back(address, exc)
            self.inbox.put(("linked", address))

        asyncio.run_coroutine_threadsafe(go(), self._loop)

    async def _open(self, address: str, timeout: float) -> None:
        from distributed.comm import connect

        deadline = time.monotonic() + timeout
        while True:
            comm = None
            try:
                comm = await connect(address, timeout=max(deadline - time.monotonic(), 0.5),
                                     **self.client.connection_args)
                await comm.write({"op": "nbtune_stream", "topic": self.topic, "reply": True})
                ack = await asyncio.wait_for(comm.read(), max(deadline - time.monotonic(), 0.5))
                if not (isinstance(ack, dict) and ack.get("ready")):
                    raise LinkError(f"worker {address} answered {ack!r} (nbtune handlers missing)")
                break
            except Exception:
                if comm is not None:
                    comm.abort()
                if self._closing or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        if self._closing:  # the runtime closed while this stream was opening
            comm.abort()
            raise LinkError("the runtime is closed")
        old = self._comms.pop(address, None)
        if old is not None:
            old.abort()
        self._comms[address] = comm
        asyncio.ensure_future(self._read(address, comm))

    async def _read(self, address: str, comm: Any) -> None:
        try:
            while True:
                batch = await comm.read()
                if batch:
                    self.inbox.put(("msgs", batch))
        except Exception:
            if self._comms.get(address) is comm:
                del self._comms[address]
                if not self._closing:
                    self.inbox.put(("unlinked", address))

    def drop(self, address: str) -> None:
        """Forget a worker that left (its stream, if any, is closed), on the loop like every
        other change to the open streams."""

        def go() -> None:
            self.relayed.discard(address)
            comm = self._comms.pop(address, None)
            if comm is not None:
                comm.abort()

        with contextlib.suppress(RuntimeError):  # the loop is closing
            self._loop.call_soon_threadsafe(go)

    # ------------------------------------------------------------------ calls
    def launch(self, run_id: int, ranks: list[tuple[str, dict[str, Any]]]) -> None:
        """Start every rank of one run; rank 0 first when ranks must meet (its port)."""
        kernel = self.kernel
        if kernel is not None and any(kernel.owns(w) for w, _ in ranks):
            if len(ranks) == 1:
                kernel.launch(run_id, 0, ranks[0][1], ranks[0][0])
            else:  # a DDP trial cannot have a thread for a rank
                for rank in range(len(ranks)):
                    self._failed(run_id, rank, LaunchError("a multi-worker trial cannot have a "
                                                           "rank in the kernel slot"))
            return
        asyncio.run_coroutine_threadsafe(self._launch(run_id, ranks), self._loop)

    async def _launch(self, run_id: int, ranks: list[tuple[str, dict[str, Any]]]) -> None:
        started = 0
        try:
            w0, j0 = ranks[0]
            first = await self._launch_one(w0, j0)
            started = 1
            for _w, j in ranks[1:]:
                j.update(first)  # MASTER_ADDR / MASTER_PORT picked by rank 0's worker
            res = await asyncio.gather(*(self._launch_one(w, j) for w, j in ranks[1:]),
                                       return_exceptions=True)
            for rank, r in enumerate(res, start=1):
                if isinstance(r, BaseException):
                    self._failed(run_id, rank, r)
        except Exception as exc:
            for rank in range(started, len(ranks)):
                self._failed(run_id, rank, exc)

    async def _launch_one(self, worker: str, job: dict[str, Any]) -> dict[str, Any]:
        if worker in self.relayed:
            from nbtune.runtimes.dask.worker_side.handlers import launch_via_scheduler

            res = await self.client.run(launch_via_scheduler, pickle.dumps(job),
                                        workers=[worker], asynchronous=True)
            reply = res.get(worker) if isinstance(res, dict) else None
        else:
            reply = await self.client.rpc(worker).nbtune_launch(job=pickle.dumps(job))
        if not isinstance(reply, dict):
            # a worker without the handler answers None (and logs "No handler")
            raise LinkError(f"worker {worker} has no nbtune launch handler (answered {reply!r})")
        if not reply.pop("started", False):
            raise LaunchError(f"worker {worker} could not start it:\n{reply.get('error')}")
        return reply

    def _failed(self, run_id: int, rank: int, exc: BaseException) -> None:
        # only a connection that failed means the worker is gone; the handler's own errors
        # come back as answers (LaunchError) and fail the trial
        lost = isinstance(exc, OSError | asyncio.TimeoutError)
        self.inbox.put(("launch_failed", (run_id, rank, f"could not start the trial: {exc!r}",
                                          lost)))

    def control(self, worker: str, keys: list[str], msg: dict[str, Any]) -> None:
        """Deliver ``msg`` to ranks ``keys`` on ``worker``; never blocks the driver thread.

        A worker that died but is not yet removed costs a connect timeout, which
        must not stall every other trial: the call runs on the client's loop.
        """
        if self.kernel is not None and self.kernel.owns(worker):
            self.kernel.control(keys, msg)
            return

        async def go() -> None:
            try:
                if worker in self.relayed:
                    from nbtune.runtimes.dask.worker_side.rank_runner import deliver

                    await self.client.run(deliver, keys, msg, workers=[worker],
                                          on_error="ignore", asynchronous=True)
                else:
                    await self.client.rpc(worker).nbtune_control(keys=keys, msg=msg)
            except Exception as exc:  # the worker's loss is handled when it is reported
                log.debug("control to %s failed: %r", worker, exc)

        with contextlib.suppress(RuntimeError):  # the loop is closing
            asyncio.run_coroutine_threadsafe(go(), self._loop)

    def close(self) -> None:
        self._closing = True
        if self.client is None:
            return

        def go() -> None:
            comms = list(self._comms.values())
            self._comms.clear()
            for c in comms:
                c.abort()

        with contextlib.suppress(RuntimeError):  # the loop is closing
            self._loop.call_soon_threadsafe(go)
