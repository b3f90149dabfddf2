"""Thread mode (``DaskRuntime(execution="thread")``): a trial runs in a thread of its worker.

A trial process (:mod:`.trial_process`) isolates a trial: a crash, a hang or a leak
takes the process, never the worker, and a kill always works. The price is a
process boundary on every message: the job and the pickled function down a
pipe at each launch, each report up the pipe to the worker and each verdict
or stop down it through the relay thread. For a loop whose steps take a few
milliseconds that costs more than the work (:mod:`.execution_mode` measures it),
so here the training function runs in a thread of the Dask worker process
itself, with the same :class:`~.trial_api.Trial` and the same messages: its
reports go straight onto the worker's stream to the driver and its control
(verdicts, stops, ``go``) straight from the rank's queue into ``report``.

What a thread cannot do, and what thread mode does instead:

* **It cannot be killed.** A stop or a verdict is seen at the next
  ``report``, as in a process. A kill (Finish's grace over, a lost link, the
  runtime closed) ends the run at once for the driver (its exit is sent for
  it), the thread is told to stop and raises at its next ``report``; until
  then it runs on, unseen. So :mod:`.execution_mode` picks threads only for loops
  that report often, and ``trial_timeout`` and ``trial_memory_limit`` (which
  need a process to kill or to measure) refuse thread mode.
* **An exception is the trial's error**, never the worker's: the function is
  called by the same :func:`.trial_process.call_trainable` as in a process. A crash
  of the interpreter itself (a segfault in an extension) takes the worker.
* **The GIL**: Python code in two trial threads of one worker takes turns.
  With one core per worker (the LocalCluster nbtune starts) only one trial
  computes per worker anyway; torch is set to the job's thread count (1 by
  default), as the process path does. ``os.environ`` is the worker's: a job's
  environment (``OMP_NUM_THREADS``...) is not applied, CPU pinning is, per thread.
* Module globals the function sets persist into the next trial (the function
  is unpickled once per worker and kept), as with ``reuse_processes``.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from nbtune.runtimes.dask.protocol import (
    Control,
    Exit,
    Kill,
    StopRequest,
    TrialMessage,
    decode,
    encode,
)

__all__ = ["ThreadChannel", "start_thread"]

Emit = Callable[[str, list[dict[str, Any]]], None]

#: seconds a thread holds the GIL before another may take it (Python's default: 5 ms). A trial
#: thread computing in Python would make the worker's event loop wait that long for every
#: message it forwards (a report out, a verdict in); 1 ms keeps that under the work
SWITCH_INTERVAL = 0.001

_FNS: dict[bytes, Any] = {}  # the training functions unpickled on this worker, newest last
_FNS_KEPT = 8
_FNS_LOCK = threading.Lock()


class ThreadChannel:
    """Trial <-> driver from a thread: out on the worker's stream, control from the rank's queue.

    ``end`` sends the rank's exit once; whatever the trial says after it (a
    thread that was killed and has not reached a ``report`` yet) is dropped.
    """

    def __init__(self, control: queue.SimpleQueue[dict[str, Any]], emit: Emit, topic: str,
                 tag: dict[str, Any]) -> None:
        self.control, self.emit, self.topic, self.tag = control, emit, topic, tag
        self.ended = False
        self._lock = threading.Lock()

    def send(self, msg: TrialMessage) -> None:
        raw = encode(msg, **self.tag)
        raw.setdefault("t", time.time())
        with self._lock:
            if not self.ended:
                self.emit(self.topic, [raw])

    def end(self, msg: Exit) -> bool:
        """Send the rank's exit (False: it was sent already, for a kill)."""
        with self._lock:
            if self.ended:
                return False
            self.ended = True
            self.emit(self.topic, [encode(msg, **self.tag)])
            return True

    def kill(self, msg: Kill) -> None:
        """A kill: the run ends now for the driver; the thread stops at its next ``report``."""
        self.end(Exit(ok=False, killed=True, oom=False, error=str(msg.reason)))

    def poll_control(self) -> list[Control]:
        out = []
        with contextlib.suppress(queue.Empty):
            while True:
                out.append(self._seen(self.control.get_nowait()))
        return out

    def wait_control(self, timeout: float) -> list[Control]:
        """Control messages, waiting up to ``timeout`` s for the first (a held trial)."""
        try:
            first = self._seen(self.control.get(timeout=max(timeout, 0.0)))
        except queue.Empty:
            return []
        return [first, *self.poll_control()]

    @staticmethod
    def _seen(raw: dict[str, Any]) -> Control:
        # the kill itself was acted on when it was delivered (rank_runner.deliver -> kill)
        msg = decode(raw)
        assert isinstance(msg, Control)
        return StopRequest(reason="killed") if isinstance(msg, Kill) else msg


def _load(fn: bytes) -> Any:
    """The training function, unpickled once per worker (a launch then costs no unpickling)."""
    with _FNS_LOCK:
        hit = _FNS.get(fn)
    if hit is not None:
        return hit
    import cloudpickle

    loaded = cloudpickle.loads(fn)
    with _FNS_LOCK:
        _FNS[fn] = loaded
        while len(_FNS) > _FNS_KEPT:
            del _FNS[next(iter(_FNS))]
    return loaded


def _prepare(job: dict[str, Any]) -> None:
    """What a trial process does to itself, where a thread can: path, cores, torch threads."""
    from nbtune.runtimes.dask.trial_side.trial_process import _pin

    for p in job.get("sys_path", ()):
        if p not in sys.path:
            sys.path.append(p)
    _pin(str(job.get("env", {}).get("NBTUNE_CPU_CORES", "")))  # this thread's cores (Linux)
    threads = job.get("threads")
    if threads and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))
    if sys.getswitchinterval() > SWITCH_INTERVAL:
        sys.setswitchinterval(SWITCH_INTERVAL)


def start_thread(job: dict[str, Any], entry: Any, emit: Emit, forget: Callable[[], None]) -> None:
    """Run one trial rank in a new thread of this worker (from ``rank_runner.start_rank``).

    ``entry`` is the rank's :class:`~.rank_runner._Active` (its control queue; a kill
    reaches :meth:`ThreadChannel.kill` through ``entry.on_kill``); ``forget``
    drops it from the worker's table once the function has returned.
    """
    tag = {"trial": job["trial_id"], "run": job["run_id"], "rank": job["rank"]}
    channel = ThreadChannel(entry.control, emit, job["topic"], tag)
    entry.on_kill = channel.kill
    if entry.killed:  # a kill overtook the launch
        channel.kill(Kill(reason="killed before it started"))
        forget()
        return

    def run() -> None:
        entry.thread = threading.get_native_id()  # its CPU time is its slot's (.sampling)
        try:
            _prepare(job)
            out = _child_call(job, channel)
        except BaseException:  # noqa: BLE001 - nbtune's own failure: still the trial's error
            out = Exit(ok=False, oom=False, error=traceback.format_exc())
        finally:
            forget()
        channel.end(out)

    threading.Thread(target=run, daemon=True,
                     name=f"nbtune-trial-{job['run_key']}-r{job['rank']}").start()


def _child_call(job: dict[str, Any], channel: ThreadChannel) -> Exit:
    from nbtune.runtimes.dask.trial_side.trial_process import call_trainable

    out = call_trainable(job, channel, lambda: _load(job["fn"]), in_thread=True)
    out.pid = os.getpid()
    return out
