"""The gate between one host stage and the guest beside it: the guest runs only in bubbles.

Hydro §5.1 lets a HydroTrial run only inside the bubbles of a pipeline stage:
the host reports when it computes, the trial pauses at a layer boundary
(hooks on every module) and Linux signals stop it when it does not. This is
that mechanism for processes on one machine:

* one lock is the stage's compute slot. The guest holds it while it runs;
  before each compute chunk the host stage raises ``want`` and takes the lock;
  the guest, at its next checkpoint (a module's forward or backward, or a step
  boundary), sees ``want``, gives the lock up and sleeps until the host posts that it is idle.
  Because the host's busy timestamp is taken after it holds the lock and the
  guest's pause timestamp before it lets go, a cooperative guest's running
  intervals cannot overlap the host's compute intervals at all; the handshake's
  latency is paid by the host, and it is measured (``HostSide.handoffs``).
* fallback: if the guest does not let go within ``grace`` seconds (a long op
  with no checkpoint, or it was descheduled holding the slot; ``grace=0``: if it
  is not paused already, so the host never sleeps at a handoff), the host ``SIGSTOP``\\ s it, computes, and ``SIGCONT``\\ s
  it when the chunk ends. A stopped process resumes exactly where it stopped.
* nobody waits forever: the host waits ``grace`` at most; the guest waits in
  short slices, and runs freely once the host has ended, has died, or after
  ``max_wait`` seconds of waiting in one bubble-less stretch.

All state is multiprocessing primitives created by the parent and handed to
both processes at spawn, so the scheduler side can read ``want`` (busy now)
and ``state`` at any time.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psutil

from nbtune.bubbles.timeline import Interval, now

__all__ = ["Gate", "HostSide", "GuestSide", "NOT_STARTED", "RUNNING", "ENDED"]

NOT_STARTED, RUNNING, ENDED = 0, 1, 2


class Gate:
    """The shared state of one stage's gate; create it in the parent, pass it to both sides."""

    def __init__(self, ctx: Any) -> None:
        self.lock = ctx.Lock()
        # "the host has been idle since": one token, posted without waiting. Not an Event: an
        # Event's set() waits until every sleeper has woken (multiprocessing's Condition.notify),
        # which would make the host wait for a low-priority guest to be scheduled at every chunk end
        self.wake = ctx.BoundedSemaphore(1)
        self.wake.acquire()
        self.want = ctx.RawValue("b", 0)  # 1 while the host stage computes or is about to
        self.state = ctx.RawValue("b", NOT_STARTED)  # the host's NOT_STARTED / RUNNING / ENDED
        self.host_pid = ctx.RawValue("i", 0)
        self.guest_pid = ctx.RawValue("i", 0)
        self.stops = ctx.RawValue("i", 0)  # SIGSTOP fallbacks used


def _post(sem: Any) -> None:
    """Post the wake-up token unless one is already there (never blocks)."""
    with suppress(ValueError):
        sem.release()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class HostSide:
    """The host stage's end: wrap each compute chunk in :meth:`busy`."""

    def __init__(self, gate: Gate | None, *, grace: float = 0.05) -> None:
        self.gate = gate
        self.grace = grace
        self.intervals: list[Interval] = []
        self.handoffs: list[float] = []  # seconds from wanting the slot to holding it
        #: ("stopped", SIGSTOP sent, SIGCONT sent): the guest's running intervals include these
        #: stretches, in which it did not run (subtract them before comparing clocks)
        self.stopped: list[Interval] = []
        self._held = self._stopped = self._holding = False
        self._stop_t = 0.0

    def start(self) -> None:
        if self.gate is not None:
            self.gate.host_pid.value = os.getpid()
            self.gate.state.value = RUNNING
            _post(self.gate.wake)

    def end(self) -> None:
        """Give the stage up for good: a paused guest is released to run freely."""
        if self.gate is not None:
            self.gate.state.value = ENDED
            self.gate.want.value = 0
            _post(self.gate.wake)

    def hold(self) -> None:
        """Keep the slot across chunks (and bubbles) until :meth:`release`: the guest does not
        run at all meanwhile. The benchmark's "host alone" iterations, interleaved with gated ones."""
        self._enter()
        self._holding = True

    def release(self) -> None:
        self._holding = False
        self._exit()

    def _enter(self) -> None:
        g = self.gate
        if g is None or self._holding:
            return
        g.want.value = 1
        t = now()
        # grace 0: never sleep here (on a crowded core every sleep costs a scheduling delay);
        # take the slot if the guest is paused already, else stop it at once
        self._held = (g.lock.acquire(timeout=self.grace) if self.grace > 0
                      else g.lock.acquire(False))
        if not self._held and g.guest_pid.value:
            try:
                os.kill(g.guest_pid.value, signal.SIGSTOP)
                self._stopped = True
                self._stop_t = now()
                g.stops.value += 1
            except ProcessLookupError:
                g.guest_pid.value = 0  # the guest has gone: nothing to protect from
        self.handoffs.append(now() - t)

    def _exit(self) -> None:
        g = self.gate
        if g is None or self._holding:
            return
        g.want.value = 0
        if self._held:
            g.lock.release()
            self._held = False
        if self._stopped:
            self.stopped.append(("stopped", self._stop_t, now()))
            with suppress(ProcessLookupError):
                os.kill(g.guest_pid.value, signal.SIGCONT)
            self._stopped = False
        _post(g.wake)

    @contextmanager
    def busy(self, kind: str) -> Iterator[None]:
        """The stage computes ``kind`` ("F", "B", "L", "O") inside; record it and keep the guest out."""
        self._enter()
        t0 = now()
        try:
            yield
        finally:
            t1 = now()
            self._exit()
            self.intervals.append((kind, t0, t1))

    def take(self) -> list[Interval]:
        """The intervals recorded since the last call (what a stage publishes per iteration)."""
        out, self.intervals = self.intervals, []
        return out


class GuestSide:
    """The guest's end: call :meth:`checkpoint` often (hooks do it per module), it returns
    when the guest may compute."""

    def __init__(self, gate: Gate, *, max_wait: float = 30.0, slice_s: float = 0.2,
                 sync: Any = None) -> None:
        self.gate = gate
        #: waits for the guest's kernels (a GPU guest; :func:`~nbtune.bubbles.device.synchronizer`),
        #: called at every checkpoint so that at most one layer's work is in flight
        self.sync = sync
        self.max_wait = max_wait
        self.slice_s = slice_s
        self.free = False  # the host has ended (or died, or never came): no more gating
        self.intervals: list[Interval] = []  # ("run", start, end) while gated, ("free", ...) after
        self.pauses = 0
        self._run_start = 0.0
        self._held = False

    def start(self, *, start_timeout: float = 120.0) -> None:
        """Register, wait (bounded) for the host to start, and take the slot."""
        self.gate.guest_pid.value = os.getpid()
        deadline = now() + start_timeout
        while self.gate.state.value == NOT_STARTED and now() < deadline:
            self.gate.wake.acquire(timeout=self.slice_s)
        if self.gate.state.value == NOT_STARTED:
            self.free = True  # the host never came: run on our own
        else:
            self._acquire()
        self._run_start = now()

    def finish(self) -> None:
        self._close("free" if self.free else "run")
        if self._held:
            self.gate.lock.release()
            self._held = False
        self.gate.guest_pid.value = 0

    def checkpoint(self) -> None:
        """A safe point: pause here while the host stage wants its slot."""
        if self.free:
            return
        if self.sync is not None:
            self.sync()
        if self.gate.state.value == ENDED:  # the host has finished: run free from here on
            self._close("run")
            self.free = True
            self._run_start = now()
            return
        if not self.gate.want.value:
            return
        self._close("run")
        self.pauses += 1
        self.gate.lock.release()
        self._held = False
        self._acquire()
        self._run_start = now()

    @contextmanager
    def off_device(self) -> Iterator[None]:
        """Work that needs no slot: a GPU guest's CPU-side work (drawing its next batch).

        The stage need not wait for it, so the slot is given back for its length
        and taken again (in a bubble) after; on the CPU the core *is* the slot,
        so CPU guests do not use this.
        """
        if self.free or not self._held:
            yield
            return
        if self.sync is not None:
            self.sync()
        self._close("run")
        self.gate.lock.release()
        self._held = False
        try:
            yield
        finally:
            if not self.free:
                self._acquire()
            self._run_start = now()

    def _close(self, kind: str) -> None:
        t = now()
        if t > self._run_start:
            self.intervals.append((kind, self._run_start, t))

    def host_ended(self) -> bool:
        """The host stage has finished (its bubbles are over)."""
        return self.gate.state.value == ENDED

    def _host_gone(self) -> bool:
        g = self.gate
        return g.state.value == ENDED or (g.host_pid.value != 0 and not _alive(g.host_pid.value))

    def _acquire(self) -> None:
        """Wait for a bubble and take the slot; bounded, never forever."""
        g = self.gate
        deadline = now() + self.max_wait
        while True:
            if g.state.value == ENDED:
                # the host has gone for good; take the slot if free, run anyway if not
                self._held = g.lock.acquire(timeout=self.slice_s)
                self.free = True
                return
            if now() > deadline or self._host_gone():
                self.free = True
                return
            if g.want.value and not g.wake.acquire(timeout=self.slice_s):
                continue  # the host still computes: wait for its next idle moment
            if not g.want.value and g.lock.acquire(timeout=self.slice_s):
                if g.want.value and g.state.value != ENDED:
                    g.lock.release()  # the host wants it again already: let it have it
                    continue
                self._held = True
                self.free = g.state.value == ENDED  # woken by the host's end: no more gating
                return

    def attach(self, module: Any) -> list[Any]:
        """Checkpoints at layer boundaries: before every leaf module's forward and backward.

        Hydro registers hooks on every module of the trial for the same reason:
        the pause comes within one layer's compute, not one step's. Returns the
        hook handles (``h.remove()`` detaches).
        """
        handles = []
        for m in module.modules():
            if next(m.children(), None) is None:
                handles.append(m.register_forward_pre_hook(lambda *_: self.checkpoint()))
                handles.append(m.register_full_backward_pre_hook(lambda *_: self.checkpoint()))
        return handles
