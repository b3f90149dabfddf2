"""Worker side: warm trial processes, the relay thread of each rank, control delivery.

Each trial rank runs on a thread of the worker that owns its GPU, started by
the worker's ``nbtune_launch`` handler (:mod:`.handlers`), so a one-thread
worker can host several packed trials and a launch costs one direct message
instead of a scheduler round trip. The thread takes a pre-started process
from the worker's :class:`WarmPool` (torch already imported), hands it the
job over a pipe and relays: trial messages go to the driver (batched per
poll, in order), control messages from the driver (:func:`deliver`) go to
the trial process. The relay also enforces ``trial_memory_limit`` and
notices a process that died without saying goodbye (a segfault, the
kernel's OOM killer).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psutil
from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["WarmPool", "WarmPoolPlugin", "run_rank", "deliver", "active_children", "get_pool",
           "wait_pool_ready", "start_rank"]

POLL = 0.02
MAILBOX_TTL = 600.0  # seconds undelivered control is kept for a rank that has not started
_LOCK = threading.Lock()
_ACTIVE: dict[str, _Active] = {}
_MAILBOX: dict[str, list[dict[str, Any]]] = {}  # control that arrived before its rank started
_POOL: WarmPool | None = None


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    conn: Connection
    ready: bool = False  # said "ready": its preload imports are done

    def alive(self) -> bool:
        return self.proc.poll() is None

    def await_ready(self, timeout: float) -> bool:
        """Read the process's "ready" (only while no trial owns it: one reader per pipe)."""
        with contextlib.suppress(EOFError, OSError):
            while not self.ready and self.conn.poll(max(timeout, 0.0)):
                self.ready = self.conn.recv().get("k") == "ready"
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


@dataclass
class _Active:
    slot: int
    control: queue.SimpleQueue[dict[str, Any]] = field(default_factory=queue.SimpleQueue)
    child: _Child | None = None
    killed: bool = False


class WarmPool:
    """Keeps ``size`` trial processes started and idle, so a launch does not pay torch's import."""

    def __init__(self, size: int = 2, preload: tuple[str, ...] = ("torch",)) -> None:
        self.size = max(int(size), 0)
        self.preload = tuple(preload)
        self._idle: deque[_Child] = deque()
        self._lock = threading.Lock()
        self._closed = False
        self._filling = False
        self._ready = threading.Condition(self._lock)

    def _spawn(self) -> _Child:
        ours, theirs = Pipe(duplex=True)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[3])  # the directory holding `nbtune`
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "nbtune.runtimes.dask._child", str(theirs.fileno()),
             ",".join(self.preload)],
            pass_fds=(theirs.fileno(),), env=env,
        )
        theirs.close()
        return _Child(proc, ours)

    def fill(self) -> None:
        """Start processes until ``size`` are idle (one filler at a time: no overshoot)."""
        with self._lock:
            if self._filling:
                return
            self._filling = True
        try:
            while True:
                with self._lock:
                    if self._closed or len(self._idle) >= self.size:
                        return
                child = self._spawn()
                with self._lock:
                    if self._closed:
                        child.kill()
                        return
                    self._idle.append(child)
                    self._ready.notify_all()
        finally:
            with self._lock:
                self._filling = False
                self._ready.notify_all()

    def wait_ready(self, timeout: float) -> bool:
        """Block until ``size`` idle processes have finished their imports, or ``timeout``.

        A runtime calls this before its experiment's clock starts, so that the
        first trials do not pay interpreter start-up and ``preload`` imports
        (the cluster is started, then the experiment). The idle processes are
        taken out of the pool while they are waited on: a pipe has one reader.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.fill()
            with self._lock:
                waiting, self._idle = list(self._idle), deque()
            if not waiting:  # another thread is still starting them
                time.sleep(0.05)
            try:
                for c in waiting:
                    c.await_ready(deadline - time.monotonic())
            finally:
                with self._lock:
                    self._idle.extendleft(reversed([c for c in waiting if c.alive()]))
                    enough = sum(c.ready for c in self._idle) >= self.size
                    self._ready.notify_all()
            if enough or self._closed or time.monotonic() >= deadline:
                return enough

    def fill_async(self) -> None:
        threading.Thread(target=self.fill, name="nbtune-warm-pool", daemon=True).start()

    def take_idle(self, refill: bool = True) -> _Child | None:
        """An idle live process now, or None (never waits, never spawns: safe on an event loop)."""
        with self._lock:
            while self._idle:
                c = self._idle.popleft()
                if c.alive():
                    break
                c.conn.close()
            else:
                return None
        if refill:
            self.fill_async()
        return c

    def take(self, refill: bool = True) -> _Child:
        """An idle started process, else a fresh one; with ``refill`` the pool refills behind.

        A process the filler is starting right now is waited for rather than
        duplicated: two torch imports at once on a small machine take twice as
        long each. Pools of reusable (CPU) processes need no refill: finished
        trials hand their process back.
        """
        child = None
        deadline = time.monotonic() + 60
        with self._ready:
            while child is None:
                while self._idle:
                    c = self._idle.popleft()
                    if c.alive():
                        child = c
                        break
                    c.conn.close()
                if child is not None or not self._filling or time.monotonic() > deadline:
                    break
                self._ready.wait(0.5)
        if child is None:
            child = self._spawn()
        if refill:
            self.fill_async()
        return child

    def give_back(self, child: _Child) -> None:
        """A process that finished a trial cleanly serves again (CPU trials only)."""
        with self._lock:
            if not self._closed and child.alive() and len(self._idle) < 2 * max(self.size, 1):
                self._idle.append(child)
                self._ready.notify_all()
                return
        child.kill()

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = list(self._idle), deque()
        for c in idle:
            c.kill()

    @property
    def idle(self) -> int:
        return len(self._idle)


def get_pool(size: int | None = None, preload: tuple[str, ...] | None = None) -> WarmPool:
    """This worker process's pool, created on first use; a new size or preload reconfigures it."""
    global _POOL
    stale: list[_Child] = []
    with _LOCK:
        if _POOL is None or _POOL._closed:
            _POOL = WarmPool(2 if size is None else size, ("torch",) if preload is None else preload)
        else:
            if size is not None:
                _POOL.size = max(int(size), 0)
            if preload is not None and tuple(preload) != _POOL.preload:
                _POOL.preload = tuple(preload)
                with _POOL._lock:  # idle processes imported the old modules: start afresh
                    stale, _POOL._idle = list(_POOL._idle), deque()
        pool = _POOL
    for c in stale:
        c.kill()
    return pool


def wait_pool_ready(timeout: float = 120.0) -> bool:
    """Run on every worker by ``DaskRuntime.connect``: True once its warm pool is ready."""
    return get_pool().wait_ready(timeout)


def _shutdown_all() -> None:
    with _LOCK:
        pool, entries = _POOL, list(_ACTIVE.values())
    if pool is not None:
        pool.shutdown()
    for e in entries:
        if e.child is not None:
            e.child.kill()


atexit.register(_shutdown_all)


class WarmPoolPlugin(WorkerPlugin):
    """Starts (or reconfigures) the warm pool on every worker, present and future.

    Registering it again (another runtime on the same cluster) only changes
    the pool's size and preload; running trials are untouched. Trial
    processes end with their worker: an ``atexit`` hook kills them on a clean
    shutdown, and each one exits by itself when its parent disappears.
    """

    name = "nbtune-warm-pool"

    def __init__(self, size: int = 2, preload: tuple[str, ...] = ("torch",)) -> None:
        self.size = size
        self.preload = tuple(preload)

    def setup(self, worker: Any) -> None:
        from nbtune.runtimes.dask.handlers import install

        install(worker)
        get_pool(self.size, self.preload).fill_async()



# ------------------------------------------------------------------ control
def deliver(keys: list[str], msg: dict[str, Any]) -> int:
    """Queue control ``msg`` for the named trial ranks (``run_key/rank``) of this worker.

    A rank that has not started yet finds its mail when it does (a stop can
    overtake its launch: they travel on separate connections).
    """
    n = 0
    now = time.monotonic()
    with _LOCK:
        for k in keys:
            e = _ACTIVE.get(k)
            if e is not None:
                e.control.put(dict(msg))
                e.killed = e.killed or msg.get("k") == "kill"
                n += 1
            else:
                _MAILBOX.setdefault(k, []).append({**msg, "_at": now})
        for k in [k for k, ms in _MAILBOX.items() if now - ms[-1]["_at"] > MAILBOX_TTL]:
            del _MAILBOX[k]  # for runs that ended before their mail came, or never started
    return n


def active_children() -> list[tuple[int, int]]:
    """``(slot, pid)`` of every trial process running on this worker (for sampling)."""
    with _LOCK:
        return [(e.slot, e.child.proc.pid) for e in _ACTIVE.values()
                if e.child is not None and e.child.alive()]


def _tree_rss(pid: int) -> int:
    try:
        p = psutil.Process(pid)
        return p.memory_info().rss + sum(c.memory_info().rss for c in p.children(recursive=True))
    except psutil.Error:
        return 0


# -------------------------------------------------------------------- relay
Emit = Callable[[str, list[dict[str, Any]]], None]
FAST_HANDOFF = 1 << 16  # bytes: a job this small is written to an idle process's pipe at once


def start_rank(worker: Any, job: dict[str, Any], emit: Emit) -> None:
    """Start one trial rank (on the worker's event loop, from the ``nbtune_launch`` handler).

    Not a Dask task: a task costs a scheduler round trip per trial, and a trial
    would hold a thread of the worker's pool for its whole life. When a warm
    process is idle (the usual case) the job goes down its pipe right here, so
    the trial starts before the relay thread does; the relay thread then
    watches it (:func:`run_rank`). ``emit`` sends a batch of messages to the
    driver; the last one of a rank is always its ``exit``.
    """
    key = f"{job['run_key']}/{job['rank']}"
    entry = _Active(slot=int(job.get("slot", 0)))
    with _LOCK:
        _ACTIVE[key] = entry
        early = _MAILBOX.pop(key, [])
    for m in early:
        entry.control.put(m)
    entry.killed = any(m.get("k") == "kill" for m in early)
    child_job = _child_job(worker, job)
    if not entry.killed and len(job.get("fn", b"")) < FAST_HANDOFF:
        entry.child = get_pool().take_idle(refill=not job.get("reuse"))
        if entry.child is not None:
            try:
                entry.child.conn.send(child_job)
            except OSError:  # it died while idle: the relay thread takes another
                entry.child = None
    sent = entry.child is not None
    threading.Thread(target=run_rank, args=(worker, job, entry, child_job, sent, emit),
                     daemon=True, name=f"nbtune-{job['run_key']}-r{job['rank']}").start()


def _child_job(worker: Any, job: dict[str, Any]) -> dict[str, Any]:
    """What the trial process gets: the job with its environment completed."""
    child_job = {k: v for k, v in job.items() if k not in ("topic", "memory_limit")}
    env = dict(child_job.get("env", {}))
    for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
        if k in os.environ:
            env.setdefault(k, os.environ[k])
    if int(job["world_size"]) > 1:
        addr = str(job["master_addr"])
        env.update(MASTER_ADDR=addr, MASTER_PORT=str(job["master_port"]),
                   RANK=str(job["rank"]), WORLD_SIZE=str(job["world_size"]), LOCAL_RANK="0")
        if addr.startswith("127."):
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env["NBTUNE_WORKER"] = worker.address
    child_job["env"] = env
    child_job["k"] = "job"
    child_job["sys_path"] = list(dict.fromkeys([*job.get("sys_path", []), *sys.path]))
    return child_job


def run_rank(worker: Any, job: dict[str, Any], entry: _Active, child_job: dict[str, Any],
             sent: bool, emit: Emit) -> dict[str, Any]:
    """The relay thread of one rank: its process (taken now unless ``sent``), until it exits."""
    key = f"{job['run_key']}/{job['rank']}"
    tag = {"trial": job["trial_id"], "run": job["run_id"], "rank": job["rank"]}
    try:
        if not sent:
            if entry.killed:
                out = {"k": "exit", "ok": False, "killed": True, "oom": False,
                       "error": "killed before it started", **tag}
                emit(job["topic"], [out])
                return out
            entry.child = get_pool().take(refill=not job.get("reuse"))
            entry.child.conn.send(child_job)
        out = _relay(entry, tag, job["topic"], job.get("memory_limit"), emit)
        assert entry.child is not None
        if out.get("reusable") and entry.child.alive():
            get_pool().give_back(entry.child)
            entry.child = None
    except BaseException as exc:
        import traceback

        out = {"k": "exit", "ok": False, "error": traceback.format_exc(), "oom": False, **tag}
        emit(job["topic"], [out])
        if not isinstance(exc, Exception):
            raise
    finally:
        with _LOCK:
            _ACTIVE.pop(key, None)
        if entry.child is not None:
            entry.child.kill()
    return out


def _relay(entry: _Active, tag: dict[str, Any], topic: str, memory_limit: float | None,
           emit: Callable[[str, list[dict[str, Any]]], None]) -> dict[str, Any]:
    child = entry.child
    assert child is not None
    exit_msg: dict[str, Any] | None = None
    next_mem = 0.0
    while exit_msg is None:
        batch: list[dict[str, Any]] = []
        while True:
            try:
                msg = entry.control.get_nowait()
            except queue.Empty:
                break
            if msg.get("k") == "kill":
                child.kill()
                exit_msg = {"k": "exit", "ok": False, "killed": True, "oom": False,
                            "error": str(msg.get("reason", "killed by the runtime"))}
                break
            with contextlib.suppress(OSError):
                child.conn.send(msg)
        if exit_msg is None:
            batch.extend(_drain(child, POLL))
            exit_msg = next((m for m in batch if m.get("k") == "exit"), None)
        if exit_msg is None and child.proc.poll() is not None:
            batch.extend(_drain(child, 0))
            exit_msg = next((m for m in batch if m.get("k") == "exit"), None)
            if exit_msg is None:
                rc = child.proc.returncode
                exit_msg = {"k": "exit", "ok": False, "oom": rc == -9,
                            "error": f"trial process died with exit code {rc}"
                            + (" (SIGKILL: likely the kernel's out-of-memory killer)"
                               if rc == -9 else "")}
        now = time.monotonic()
        if exit_msg is None and memory_limit and now >= next_mem:
            next_mem = now + 0.1
            rss = _tree_rss(child.proc.pid)
            if rss > memory_limit:
                child.kill()
                exit_msg = {"k": "exit", "ok": False, "oom": True,
                            "error": f"trial used {rss / 1e9:.2f} GB, more than its "
                                     f"trial_memory_limit of {memory_limit / 1e9:.2f} GB"}
        if exit_msg is not None and exit_msg not in batch:
            batch.append(exit_msg)
        if batch:
            for m in batch:
                m.update(tag)
            emit(topic, batch)
    return exit_msg


def _drain(child: _Child, timeout: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        if child.conn.poll(timeout):
            while True:
                msg = child.conn.recv()
                if msg.get("k") == "ready":  # a process nobody waited on to be ready
                    child.ready = True
                else:
                    out.append(msg)
                if msg.get("k") == "exit" or not child.conn.poll(0):
                    break
    except (EOFError, OSError):
        pass
    return out
