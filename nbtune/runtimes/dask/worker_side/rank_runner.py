"""Worker side: each trial rank's process, its relay thread, control delivery.

Each trial rank is started by the worker's ``nbtune_launch`` handler
(:mod:`.handlers`) on the worker that owns its GPU, so a one-thread worker
can host several packed trials and a launch costs one direct message instead
of a scheduler round trip. It takes a pre-started process from the worker's
:class:`~nbtune.runtimes.dask.worker_side.pool.WarmPool` (torch already imported) and
hands it the job over a pipe; the event loop forwards what the process says
to the driver (:class:`_PipeReader`) and a relay thread passes control
messages from the driver (:func:`deliver`) to the process. The relay also enforces ``trial_memory_limit`` and
notices a process that died without saying goodbye (a segfault, the
kernel's OOM killer).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from nbtune.runtimes.dask.protocol import Exit, Job, Kill, Ready, decode, encode, kind_of
from nbtune.runtimes.dask.trial_side.trial_process import cuda_key
from nbtune.runtimes.dask.worker_side.pool import _Child, get_pool

__all__ = ["start_rank", "run_rank", "deliver", "active_children"]

POLL = 0.02
_WAKE: dict[str, Any] = {}  # the reader's "the process ended" to a sleeping relay
MAILBOX_TTL = 600.0  # seconds undelivered control is kept for a rank that has not started
_LOCK = threading.Lock()
_ACTIVE: dict[str, _Active] = {}
#: control (wire form) that arrived before its rank started, with when it arrived
_MAILBOX: dict[str, list[tuple[float, dict[str, Any]]]] = {}


@dataclass
class _Active:
    slot: int
    control: queue.SimpleQueue[dict[str, Any]] = field(default_factory=queue.SimpleQueue)
    child: _Child | None = None
    killed: bool = False
    reader: _PipeReader | None = None
    on_kill: Callable[[Kill], None] | None = None  # thread mode (.threads)
    thread: int | None = None  # thread mode: the trial thread's native id, for sampling


class _PipeReader:
    """Reads one rank's pipe on the worker's event loop and forwards each batch at once.

    The relay thread could read it too, but a message would then wake the
    relay thread and then the event loop (which writes to the driver's
    stream): one thread hand-off more per report, on the path between a
    trial's last report and the next trial's launch. The relay thread learns
    of the end through ``done``: the exit message, or None when the process
    closed its pipe without one.
    """

    def __init__(self, loop: Any, child: _Child, tag: dict[str, Any], topic: str,
                 put: Emit, wake: Any = None) -> None:
        self.loop, self.child, self.tag, self.topic, self.put = loop, child, tag, topic, put
        self.done: queue.SimpleQueue[Exit | None] = queue.SimpleQueue()
        self.wake = wake  # the relay's control queue: it sleeps on it (see _relay)
        self._fd = child.conn.fileno()
        self._on = False

    def start(self) -> None:
        """On the loop: watch the pipe (anything already in it is read at once)."""
        self._on = True
        self.loop.add_reader(self._fd, self._readable)
        self._readable()

    def _readable(self) -> None:
        if not self._on:
            return
        batch: list[dict[str, Any]] = []
        end, exit_msg = False, None
        try:
            while self.child.conn.poll(0):
                msg = self.child.conn.recv()
                kind = kind_of(msg)
                if kind is Ready:  # a process nobody waited on to be ready
                    self.child.ready = True
                    continue
                msg.update(self.tag)  # forwarded as it came, with its route
                batch.append(msg)
                if kind is Exit:
                    end, exit_msg = True, decode(msg)
                    break
        except (EOFError, OSError):
            end = True
        if batch:
            self.put(self.topic, batch)
        if end:
            self._off()
            self.done.put(exit_msg)
            if self.wake is not None:
                self.wake.put(_WAKE)

    def _off(self) -> None:
        if self._on:
            self._on = False
            self.loop.remove_reader(self._fd)

    def stop(self, timeout: float = 60.0) -> None:
        """From another thread: stop watching (before the pipe is closed or handed on).

        Waits for the loop to confirm: closing a pipe the loop still watches would
        leave a stale selector entry for the next pipe given that descriptor.
        """
        stopped = threading.Event()

        def off() -> None:
            self._off()
            stopped.set()

        try:
            self.loop.call_soon_threadsafe(off)
        except RuntimeError:  # the loop is closed: nothing watches the pipe any more
            return
        stopped.wait(timeout)


def _kill_active() -> None:
    """At the worker's exit: no trial process may outlive it."""
    with _LOCK:
        entries = list(_ACTIVE.values())
    for e in entries:
        if e.child is not None:
            e.child.kill()


atexit.register(_kill_active)


# ------------------------------------------------------------------ control
def deliver(keys: list[str], msg: dict[str, Any]) -> int:
    """Queue control ``msg`` (its wire form) for the named trial ranks (``run_key/rank``)
    of this worker.

    A rank that has not started yet finds its mail when it does (a stop can
    overtake its launch: they travel on separate connections).
    """
    n = 0
    now = time.monotonic()
    kill = decode(msg) if kind_of(msg) is Kill else None
    with _LOCK:
        for k in keys:
            e = _ACTIVE.get(k)
            if e is not None:
                e.control.put(dict(msg))
                e.killed = e.killed or kill is not None
                if e.on_kill is not None and isinstance(kill, Kill):
                    e.on_kill(kill)  # a thread cannot be killed: its run ends now (.threads)
                n += 1
            else:
                _MAILBOX.setdefault(k, []).append((now, msg))
        for k in [k for k, ms in _MAILBOX.items() if now - ms[-1][0] > MAILBOX_TTL]:
            del _MAILBOX[k]  # for runs that ended before their mail came, or never started
    return n


def active_children() -> list[tuple[int, int]]:
    """``(slot, pid)`` of every trial process running on this worker (for sampling)."""
    with _LOCK:
        entries = [(e.slot, e.child) for e in _ACTIVE.values()]
    # each child read once: the run's own thread clears it when the process ends, so a second
    # read after the test could find None
    return [(slot, child.proc.pid) for slot, child in entries
            if child is not None and child.alive()]


def active_threads() -> list[tuple[int, int]]:
    """``(slot, native thread id)`` of every trial running as a thread of this worker."""
    with _LOCK:
        return [(e.slot, e.thread) for e in _ACTIVE.values() if e.thread is not None]


def _tree_rss(pid: int) -> int:
    try:
        p = psutil.Process(pid)
        return p.memory_info().rss + sum(c.memory_info().rss for c in p.children(recursive=True))
    except psutil.Error:
        return 0


# -------------------------------------------------------------------- relay
Emit = Callable[[str, list[dict[str, Any]]], None]
FAST_HANDOFF = 1 << 16  # bytes: a job this small is written to an idle process's pipe at once


def start_rank(worker: Any, job: dict[str, Any], emit: Emit, put: Emit) -> None:
    """Start one trial rank (on the worker's event loop, from the ``nbtune_launch`` handler).

    Not a Dask task: a task costs a scheduler round trip per trial, and a trial
    would hold a thread of the worker's pool for its whole life. When a warm
    process is idle (the usual case) the job goes down its pipe right here, so
    the trial starts before the relay thread does; the relay thread then
    watches it (:func:`run_rank`) while the loop forwards what it says
    (:class:`_PipeReader`). ``emit`` sends a batch of messages to the driver
    from any thread, ``put`` from the loop; the last message of a rank is
    always its ``exit``.
    """
    key = f"{job['run_key']}/{job['rank']}"
    entry = _Active(slot=int(job.get("slot", 0)))
    with _LOCK:
        _ACTIVE[key] = entry
        early = _MAILBOX.pop(key, [])
    for _, m in early:
        entry.control.put(m)
    entry.killed = any(kind_of(m) is Kill for _, m in early)
    if job.get("execution") == "thread":  # in a thread of this process (.threads)
        from nbtune.runtimes.dask.worker_side.threads import start_thread

        start_thread(job, entry, emit, lambda: _forget(key))
        return
    child_job = _child_job(worker, job)
    if not entry.killed and len(job.get("fn", b"")) < FAST_HANDOFF:
        entry.child = get_pool().take_idle(refill=not job.get("reuse"),
                                           cuda=_cuda_of(child_job))
        if entry.child is not None:
            try:
                entry.child.conn.send(encode(Job(spec=child_job)))
            except OSError:  # it died while idle: the relay thread takes another
                entry.child = None
    sent = entry.child is not None
    loop = worker.loop.asyncio_loop
    if sent:
        assert entry.child is not None
        entry.reader = _PipeReader(loop, entry.child, _tag(job), job["topic"], put, entry.control)
        entry.reader.start()
    threading.Thread(target=run_rank, args=(worker, job, entry, child_job, sent, emit, put),
                     daemon=True, name=f"nbtune-{job['run_key']}-r{job['rank']}").start()


def _forget(key: str) -> None:
    with _LOCK:
        _ACTIVE.pop(key, None)


def _tag(job: dict[str, Any]) -> dict[str, Any]:
    return {"trial": job["trial_id"], "run": job["run_id"], "rank": job["rank"]}


def _cuda_of(child_job: dict[str, Any]) -> str | None:
    """The GPU and MPS share a trial's process must have (None: a CPU trial)."""
    env = child_job.get("env", {})  # over the worker's, as the process will have it
    return cuda_key({**os.environ, **env}) if "CUDA_VISIBLE_DEVICES" in env else None


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
    child_job["sys_path"] = list(dict.fromkeys([*job.get("sys_path", []), *sys.path]))
    return child_job


def run_rank(worker: Any, job: dict[str, Any], entry: _Active, child_job: dict[str, Any],
             sent: bool, emit: Emit, put: Emit) -> Exit:
    """The relay thread of one rank: its process (taken now unless ``sent``), until it exits."""
    key = f"{job['run_key']}/{job['rank']}"
    tag = _tag(job)
    try:
        if not sent:
            if entry.killed:
                out = Exit(ok=False, killed=True, oom=False, error="killed before it started")
                emit(job["topic"], [encode(out, **tag)])
                return out
            entry.child = get_pool().take(refill=not job.get("reuse"), cuda=_cuda_of(child_job))
            entry.child.conn.send(encode(Job(spec=child_job)))
            entry.reader = _PipeReader(worker.loop.asyncio_loop, entry.child, tag, job["topic"],
                                       put, entry.control)
            worker.loop.add_callback(entry.reader.start)
        out = _relay(entry, tag, job["topic"], job.get("memory_limit"), emit)
        assert entry.child is not None
        if out.reusable and entry.child.alive():
            entry.child.cuda = out.cuda or entry.child.cuda
            get_pool().give_back(entry.child)
            entry.child = None
    except BaseException as exc:
        import traceback

        out = Exit(ok=False, error=traceback.format_exc(), oom=False)
        emit(job["topic"], [encode(out, **tag)])
        if not isinstance(exc, Exception):
            raise
    finally:
        with _LOCK:
            _ACTIVE.pop(key, None)
        if entry.reader is not None:
            entry.reader.stop()
        if entry.child is not None:
            entry.child.kill()
    return out


def _ended(child: _Child, reader: _PipeReader, said: Exit | None | bool,
           tag: dict[str, Any], topic: str, emit: Emit) -> Exit:
    """The process is gone (or its pipe closed): its last words, then an exit it did not send.

    Normally the reader forwards what is left and the process's own exit; if the
    worker's loop is slow to get there, the relay stops the reader and reads the
    rest itself, so a clean end is never taken for a crash.
    """
    if said is not None:  # the process ended: its pipe gives EOF once the loop reads it
        with contextlib.suppress(queue.Empty):
            said = reader.done.get(timeout=10.0)
        if isinstance(said, Exit):
            return said
    reader.stop()
    rest: list[dict[str, Any]] = []
    with contextlib.suppress(EOFError, OSError):
        while child.conn.poll(0):
            msg = child.conn.recv()
            if kind_of(msg) is not Ready:
                rest.append({**msg, **tag})
    said_exit = next((m for m in rest if kind_of(m) is Exit), None)
    if said_exit is not None:
        out = decode(said_exit)
        assert isinstance(out, Exit)
    else:
        rc = child.proc.poll()
        if rc is None:  # its pipe closed but it lives on: it cannot be talked to any more
            child.kill()
            rc = child.proc.returncode
        out = Exit(ok=False, oom=rc == -9, error=f"trial process died with exit code {rc}"
                   + (" (SIGKILL: likely the kernel's out-of-memory killer)" if rc == -9 else ""))
        rest.append(encode(out, **tag))
    emit(topic, rest)
    return out


def _relay(entry: _Active, tag: dict[str, Any], topic: str, memory_limit: float | None,
           emit: Emit) -> Exit:
    """Until the rank's process ends: control to it, its death and memory watched.

    Its messages are forwarded by its :class:`_PipeReader` on the loop; an exit
    this thread makes up (killed, died, out of memory) is emitted here, after
    the reader has stopped, so it is the rank's last message.
    """
    child, reader = entry.child, entry.reader
    assert child is not None and reader is not None
    exit_msg: Exit | None = None
    next_mem = 0.0
    while exit_msg is None:
        made_up: Exit | None = None
        msgs: list[dict[str, Any]] = []
        with contextlib.suppress(queue.Empty):  # asleep until control or the end (_WAKE)
            msgs.append(entry.control.get(timeout=POLL))  # a verdict waits no poll
            while True:
                msgs.append(entry.control.get_nowait())
        for msg in msgs:
            if msg is _WAKE:
                continue
            if kind_of(msg) is Kill:
                kill = decode(msg)
                assert isinstance(kill, Kill)
                made_up = Exit(ok=False, killed=True, oom=False, error=str(kill.reason))
                break
            with contextlib.suppress(OSError):
                child.conn.send(msg)
        if made_up is None:
            try:
                said = reader.done.get_nowait()
            except queue.Empty:
                said = False
            if isinstance(said, Exit):
                return said  # the process's own exit, already forwarded
            if said is None or child.proc.poll() is not None:
                return _ended(child, reader, said, tag, topic, emit)
        now = time.monotonic()
        if made_up is None and memory_limit and now >= next_mem:
            next_mem = now + 0.1
            rss = _tree_rss(child.proc.pid)
            if rss > memory_limit:
                made_up = Exit(ok=False, oom=True,
                               error=f"trial used {rss / 1e9:.2f} GB, more than its "
                                     f"trial_memory_limit of {memory_limit / 1e9:.2f} GB")
        if made_up is not None:
            reader.stop()
            child.kill()
            exit_msg = made_up
            emit(topic, [encode(made_up, **tag)])
    return exit_msg
