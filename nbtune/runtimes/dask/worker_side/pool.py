"""Warm trial processes: each worker keeps a few started, with torch already imported.

A launch takes an idle process instead of paying interpreter start-up and
``import torch`` (seconds) per trial; on CPU a process that ended a trial
cleanly serves the next one (:meth:`WarmPool.give_back`).
:class:`~nbtune.runtimes.dask.worker_side.plugin.WarmPoolPlugin` sets the pool up on every worker, present and
future, and installs nbtune's handlers there (:mod:`.handlers`).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from nbtune.runtimes.dask.protocol import Import, Ready, encode, kind_of

if TYPE_CHECKING:
    from nbtune.runtimes.dask.forkserver_side.forkserver import ForkedProcess

__all__ = ["WarmPool", "get_pool", "wait_pool_ready", "pool_imports", "pool_ready_times"]

#: seconds the filler waits for a new process's imports before starting the next anyway
READY_TIMEOUT = 120.0

_LOCK = threading.Lock()
_POOL: WarmPool | None = None


@dataclass
class _Child:
    proc: subprocess.Popen[bytes] | ForkedProcess
    conn: Connection
    ready: bool = False  # said "ready": its preload imports are done
    #: the GPU and MPS share its CUDA context is bound to (``trial_process.cuda_key``); None: no
    #: context yet, so it fits any trial
    cuda: str | None = None

    def fits(self, cuda: str | None) -> bool:
        return self.cuda is None or self.cuda == cuda

    def alive(self) -> bool:
        return self.proc.poll() is None

    def await_ready(self, timeout: float) -> bool:
        """Read the process's "ready" (only while no trial owns it: one reader per pipe)."""
        with contextlib.suppress(EOFError, OSError):
            while not self.ready and self.conn.poll(max(timeout, 0.0)):
                self.ready = kind_of(self.conn.recv()) is Ready
        return self.ready

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                for p in psutil.Process(self.proc.pid).children(recursive=True):
                    p.kill()
            except psutil.Error:
                pass
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.conn.close()



class WarmPool:
    """Keeps ``size`` trial processes started and idle, so a launch does not pay torch's import."""

    def __init__(self, size: int = 2, preload: tuple[str, ...] = ("torch",),
                 fork_server: str | None = None) -> None:
        self.size = max(int(size), 0)
        self.preload = tuple(preload)
        #: a :mod:`.forkserver`'s address: processes are forked there (preloads imported
        #: once per machine) instead of started here; None, or the server gone: started
        self.fork_server = fork_server
        #: the trainables' own modules (:meth:`add_imports`), imported after ``preload``
        self.imports: list[str] = []
        self._idle: deque[_Child] = deque()
        #: out of ``_idle`` for a moment (being started, or waited on): imports reach them too
        self._held: list[_Child] = []
        self._lock = threading.Lock()
        self._closed = False
        self._filling = False
        self._ready = threading.Condition(self._lock)
        #: wall-clock times (``time.time()``) at which started processes said ready
        self.ready_at: list[float] = []

    def _spawn(self, imports: list[str] | None = None) -> _Child:
        imports = list(self.imports) if imports is None else imports
        ours, theirs = Pipe(duplex=True)
        if self.fork_server:
            from nbtune.runtimes.dask.forkserver_side.forkserver import fork_client

            try:
                proc = fork_client(self.fork_server).spawn(theirs.fileno(), imports,
                                                           READY_TIMEOUT)
                theirs.close()
                return _Child(proc, ours)
            except Exception as exc:  # noqa: BLE001 - started here instead, as without one
                logging.getLogger("nbtune.dask").warning(
                    "the fork server at %s did not answer (%r); starting trial processes "
                    "here", self.fork_server, exc)
                self.fork_server = None
        from nbtune.runtimes.dask.trial_env import trial_env

        env = trial_env(os.environ)  # not Dask's malloc settings for the worker (.trial_env)
        root = str(Path(__file__).resolve().parents[3])  # the directory holding `nbtune`
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "nbtune.runtimes.dask.trial_side.trial_process", str(theirs.fileno()),
             ",".join(self.preload), ",".join(imports)],
            pass_fds=(theirs.fileno(),), env=env,
            # its own session: a kernel interrupt (SIGINT to the kernel's process group)
            # is for exp.wait(), never for a trial; it still ends with its worker (_watch_parent)
            start_new_session=True,
        )
        theirs.close()
        return _Child(proc, ours)

    def fill(self) -> None:
        """Start processes until ``size`` are idle (one filler at a time: no overshoot).

        One at a time, each joining the pool once its imports are done: started
        together, two processes importing torch on a machine with few cores (times
        the workers) would both be ready only after twice as long, and the first
        trial would wait for both.
        """
        with self._lock:
            if self._filling:
                return
            self._filling = True
        try:
            while True:
                with self._lock:
                    if self._closed or len(self._idle) >= self.size:
                        return
                    known = list(self.imports)
                child = self._spawn(known)
                with self._lock:  # modules added while it was started: sent behind its preload
                    self._held.append(child)
                    late = [m for m in self.imports if m not in known]
                if late:
                    _send_imports(child, late)
                ready = child.await_ready(READY_TIMEOUT)  # ours alone until it joins the pool
                with self._lock:
                    self._held.remove(child)
                    if ready:
                        self.ready_at.append(time.time())
                    if self._closed:
                        child.kill()
                        return
                    self._idle.append(child)
                    self._ready.notify_all()
        finally:
            with self._lock:
                self._filling = False
                self._ready.notify_all()

    def wait_ready(self, timeout: float, need: int | None = None) -> bool:
        """Block until ``need`` (default ``size``) idle processes have done their imports.

        A runtime calls this before its experiment's clock starts, so that the
        first trials do not pay interpreter start-up and ``preload`` imports
        (the cluster is started, then the experiment); it waits for one per
        worker, the rest fill in behind. The idle processes are taken out of
        the pool while they are waited on: a pipe has one reader.
        """
        need = self.size if need is None else min(max(int(need), 0), self.size)
        deadline = time.monotonic() + timeout
        while True:
            if not self._filling:  # the filler waits for each process: not on this thread
                self.fill_async()
            with self._lock:
                waiting, self._idle = list(self._idle), deque()
                self._held.extend(waiting)
            if not waiting:  # another thread is still starting them
                time.sleep(0.05)
            try:
                for c in waiting:
                    c.await_ready(deadline - time.monotonic())
            finally:
                with self._lock:
                    self._held = [c for c in self._held if c not in waiting]
                    self._idle.extendleft(reversed([c for c in waiting if c.alive()]))
                    enough = sum(c.ready for c in self._idle) >= need
                    self._ready.notify_all()
            if enough or self._closed or time.monotonic() >= deadline:
                return enough

    def add_imports(self, modules: list[str]) -> None:
        """Have every idle process, and every one started from now on, import ``modules``.

        The training function's own imports
        (:func:`~nbtune.runtimes.dask.driver_side.worker_setup.trainable_imports`), so that
        a trial does not pay them in its first epoch. Additive: processes that imported an
        earlier experiment's modules stay warm.
        """
        with self._lock:
            new = [m for m in modules if m not in self.imports and m not in self.preload]
            self.imports.extend(new)
            idle = [*self._idle, *self._held]
        if new and self.fork_server:
            from nbtune.runtimes.dask.forkserver_side.forkserver import send_imports

            send_imports(self.fork_server, new)  # processes forked later are born with them
        if new:
            for c in idle:
                _send_imports(c, new)

    def fill_async(self) -> None:
        threading.Thread(target=self.fill, name="nbtune-warm-pool", daemon=True).start()

    def take_idle(self, refill: bool = True, cuda: str | None = None) -> _Child | None:
        """An idle live process now, or None (never waits, never spawns: safe on an event loop).

        ``cuda``: the trial's GPU and MPS share (``trial_process.cuda_key``); only a process with
        no CUDA context or one made for them is taken."""
        with self._lock:
            c = self._pop_live(cuda)
        if c is not None and refill:
            self.fill_async()
        return c

    def take(self, refill: bool = True, cuda: str | None = None) -> _Child:
        """An idle started process that fits ``cuda`` (:meth:`take_idle`), else one that
        becomes idle soon; with ``refill`` the pool refills behind.

        A process the filler is starting right now is waited for rather than
        duplicated: two torch imports at once on a small machine take twice as
        long each. With none idle, a filler is started and whichever comes
        first is taken: the new process, or one a finishing trial hands back
        (:meth:`give_back`; on CPU a trial's process serves the next one,
        and the next launch often comes a few milliseconds before the
        previous process is back). Only a pool of size 0 spawns on the spot.
        """
        child = None
        deadline = time.monotonic() + 60
        asked_at: float | None = None
        while child is None and self.size > 0 and time.monotonic() < deadline:
            with self._ready:
                child = self._pop_live(cuda)
                if child is not None:
                    break
                starting = asked_at is not None and time.monotonic() - asked_at < 1.0
                if not (self._filling or starting):
                    if asked_at is not None:
                        break  # the filler ended and left nothing: start one here
                    asked_at = time.monotonic()
                else:
                    self._ready.wait(0.05)
                    continue
            self.fill_async()
        if child is None:
            child = self._spawn()
        if refill:
            self.fill_async()
        return child

    def _pop_live(self, cuda: str | None = None) -> _Child | None:
        """A live idle process that fits ``cuda``, dead ones dropped: first one whose CUDA
        context is made for it (a GPU trial then skips CUDA's set-up), then one known to
        be ready.

        A process started moments ago may still be importing; one handed back
        by a finished trial, or waited on by :meth:`wait_ready`, is not. Call
        with the lock held.
        """
        for c in [c for c in self._idle if not c.alive()]:
            self._idle.remove(c)
            c.conn.close()
        fit = [c for c in self._idle if c.fits(cuda)]
        best = ([c for c in fit if cuda is not None and c.cuda == cuda]
                or [c for c in fit if c.ready] or fit[:1])
        if not best:
            return None
        self._idle.remove(best[0])
        return best[0]

    def give_back(self, child: _Child) -> None:
        """A process that finished a trial cleanly serves again (a GPU one: trials of its
        GPU and MPS share, :attr:`_Child.cuda`).

        First in line: it has paid what a first trial pays beyond the imports (the
        data set read on first use, torch's first-operation set-up: seconds of a short
        first epoch), which a process that never ran a trial has not.
        """
        with self._lock:
            if not self._closed and child.alive() and len(self._idle) < 2 * max(self.size, 1):
                self._idle.appendleft(child)
                self._ready.notify_all()
                return
        child.kill()

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = list(self._idle), deque()
        for c in idle:  # every kill sent before any wait: a worker's exit waits for one
            with contextlib.suppress(OSError):
                c.proc.kill()
        for c in idle:
            c.kill()

    @property
    def idle(self) -> int:
        return len(self._idle)

    @property
    def closed(self) -> bool:
        """:meth:`close` was called: a new pool takes its place."""
        return self._closed

    def take_idle_all(self) -> list[_Child]:
        """Take every idle process out of the pool (they imported modules no longer wanted);
        the caller ends them."""
        with self._lock:
            stale, self._idle = list(self._idle), deque()
        return stale


def _send_imports(child: _Child, modules: list[str]) -> None:
    """Tell a process that has no job yet to import ``modules`` (after its preload)."""
    with contextlib.suppress(OSError, ValueError):
        child.conn.send(encode(Import(modules=modules)))


def get_pool(size: int | None = None, preload: tuple[str, ...] | None = None,
             fork_server: str | None = None) -> WarmPool:
    """This worker process's pool, created on first use; a new size or preload reconfigures it.

    ``fork_server`` (given with a size: a plugin's setup) replaces the pool's.
    """
    global _POOL
    stale: list[_Child] = []
    with _LOCK:
        if _POOL is None or _POOL.closed:
            _POOL = WarmPool(2 if size is None else size, ("torch",) if preload is None else preload,
                             fork_server)
        else:
            if size is not None:
                _POOL.size, _POOL.fork_server = max(int(size), 0), fork_server
            if preload is not None and tuple(preload) != _POOL.preload:
                _POOL.preload = tuple(preload)
                stale = _POOL.take_idle_all()  # they imported other modules: start afresh
        pool = _POOL
    for c in stale:
        c.kill()
    return pool


async def wait_pool_ready(timeout: float = 120.0, need: int | None = None) -> bool:
    """Run on every worker by ``DaskRuntime.connect``: True once ``need`` (default: all) of
    its warm processes are ready.

    A coroutine, waiting in a thread: ``client.run`` calls a plain function on the
    worker's event loop, which forwards every running trial's messages.
    """
    import asyncio

    return await asyncio.to_thread(get_pool().wait_ready, timeout, need)


def pool_ready_times() -> list[float]:
    """Run on a worker (``client.run``): when its warm processes said ready (start-up benchmark)."""
    return list(get_pool().ready_at)


async def pool_imports(modules: list[str]) -> None:
    """Run on every worker when an experiment starts: its trainable's modules, preloaded.

    A coroutine: ``client.run(..., wait=False)`` takes only those (sending on
    the idle processes' pipes does not block the worker's loop).
    """
    get_pool().add_imports(list(modules))


def _shutdown_pool() -> None:
    with _LOCK:
        pool = _POOL
    if pool is not None:
        pool.shutdown()


atexit.register(_shutdown_pool)
