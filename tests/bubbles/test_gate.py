"""The gate's handshake and its bounds, on real multiprocessing primitives.

Host and guest sides run as two threads of this process here (the same
primitives the real processes share), so these tests are fast; the
real-process run is tests/bubbles/test_host.py. The SIGSTOP fallback is off
here (``guest_pid`` cleared): it would stop this very process.
"""

from __future__ import annotations

import multiprocessing as mp
import subprocess
import sys
import threading
import time

from nbtune.bubbles.gate import ENDED, RUNNING, Gate, GuestSide, HostSide
from nbtune.bubbles.timeline import overlap


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def started_guest(gate: Gate, **kw) -> GuestSide:
    side = GuestSide(gate, **kw)
    side.start(start_timeout=5)
    gate.guest_pid.value = 0  # no SIGSTOP of our own process
    return side


def in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


#: generous deadline for a wait that normally ends within milliseconds (a loaded CI box)
PATIENCE = 60.0


def until(cond, timeout: float = PATIENCE) -> None:
    """Wait for ``cond()`` to hold; fail (instead of hanging) if it never does."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "the awaited state never came"
        time.sleep(0.001)


class Ran:
    """Counts the guest's returns from ``checkpoint()``: each one means it holds the slot."""

    def __init__(self) -> None:
        self.n = 0

    def mark(self) -> None:
        self.n += 1

    def after(self, n: int) -> None:
        """Wait until the guest has come out of a checkpoint since the count was ``n``."""
        until(lambda: self.n > n)


def test_a_cooperative_guest_never_runs_while_the_host_computes():
    gate = Gate(mp.get_context("spawn"))
    host = HostSide(gate, grace=PATIENCE)
    host.start()
    guest = started_guest(gate)
    done = threading.Event()
    ran = Ran()

    def guest_loop():
        while not done.is_set():
            guest.checkpoint()
            ran.mark()
            spin(0.0003)  # a "layer" of guest compute between checkpoints
        guest.finish()

    t = in_thread(guest_loop)
    for _ in range(30):
        with host.busy("F"):
            spin(0.003)
            n = ran.n  # the guest is paused in its checkpoint: the count is still
        # a bubble: the host waits for its neighbour, and the guest (woken) runs in it
        ran.after(n)
        time.sleep(0.003)
    host.end()
    done.set()
    t.join(PATIENCE)
    assert not t.is_alive()
    runs = [iv for iv in guest.intervals if iv[0] == "run"]
    # it did use the bubbles: paused for every chunk, ran at least each bubble's 3 ms after
    assert guest.pauses >= 30 and sum(e - s for _, s, e in runs) > 30 * 0.0025
    # exact: the host's busy clock starts after it holds the slot, the guest's run ends before
    # it lets go, so any overlap at all is a broken gate (no tolerance needed)
    assert overlap(runs, host.intervals) == 0.0
    # the guest gave the slot up at a checkpoint every time: no chunk fell back to the grace
    assert max(host.handoffs) < host.grace


def test_a_guest_whose_host_never_starts_runs_on_its_own():
    gate = Gate(mp.get_context("spawn"))
    t0 = time.monotonic()
    side = GuestSide(gate, slice_s=0.05)
    side.start(start_timeout=0.3)
    # it waited out its start_timeout, not the 120 s default (the bound only tells them apart)
    assert side.free and 0.3 <= time.monotonic() - t0 < PATIENCE
    side.checkpoint()  # returns at once


def test_a_guest_is_released_when_its_host_ends():
    gate = Gate(mp.get_context("spawn"))
    host = HostSide(gate, grace=PATIENCE)
    host.start()
    guest = started_guest(gate, slice_s=0.05)

    def guest_loop():
        while not guest.free:
            guest.checkpoint()
            spin(0.0005)

    t = in_thread(guest_loop)
    with host.busy("F"):  # holds the slot once the guest has given it up at a checkpoint
        assert max(host.handoffs) < host.grace  # (not by the grace's fallback)
        pauses = guest.pauses
        assert pauses == 1
        time.sleep(0.3)  # a while of host compute: nothing may happen in it
        assert t.is_alive() and guest.pauses == pauses  # held in its one pause
        host.end()  # the host's last chunk: the guest may go on, for good
        t.join(PATIENCE)
    assert not t.is_alive() and guest.free and gate.state.value == ENDED


def test_a_guest_never_waits_forever_on_a_stuck_host():
    gate = Gate(mp.get_context("spawn"))
    HostSide(gate).start()
    guest = started_guest(gate, max_wait=0.5, slice_s=0.05)
    stuck = HostSide(gate, grace=PATIENCE)
    in_thread(stuck._enter)  # a host that takes the slot as the guest lets go, and keeps it
    until(lambda: gate.want.value == 1)
    t0 = time.monotonic()
    guest.checkpoint()
    # it gave up after its max_wait (0.5 s), not never (the upper bound only says "returned")
    assert guest.free and 0.5 <= time.monotonic() - t0 < PATIENCE


def test_a_guest_runs_free_when_its_host_process_died():
    gate = Gate(mp.get_context("spawn"))
    gate.state.value = RUNNING
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gate.host_pid.value = dead.pid  # reaped: no such process any more
    gate.want.value = 1
    guest = GuestSide(gate, max_wait=10 * PATIENCE, slice_s=0.05)
    t0 = time.monotonic()
    guest.start(start_timeout=1)
    guest.checkpoint()
    # freed by the dead host, not by its max_wait (the bound only tells the two apart)
    assert guest.free and time.monotonic() - t0 < PATIENCE


def test_a_held_stage_keeps_its_guest_out_through_its_bubbles():
    # the benchmark's "host alone" iterations: the stage keeps the slot across chunks and gaps
    gate = Gate(mp.get_context("spawn"))
    host = HostSide(gate, grace=PATIENCE)
    host.start()
    # its max_wait outlasts the held stretch however slow the box: only the release frees it
    guest = started_guest(gate, slice_s=0.05, max_wait=10 * PATIENCE)
    done = threading.Event()
    ran = Ran()

    def guest_loop():
        while not done.is_set():
            guest.checkpoint()
            ran.mark()
            spin(0.0003)
        guest.finish()

    t = in_thread(guest_loop)
    ran.after(0)  # the guest runs
    host.hold()
    held_from = time.clock_gettime(time.CLOCK_MONOTONIC)
    n = ran.n  # paused in its checkpoint from here until the release
    for _ in range(5):
        with host.busy("F"):
            spin(0.003)
        time.sleep(0.01)  # a bubble, but held
    held_to = time.clock_gettime(time.CLOCK_MONOTONIC)
    assert ran.n == n  # it never came out of its pause while held
    host.release()
    ran.after(n)  # it runs again once released
    host.end()
    done.set()
    t.join(PATIENCE)
    assert not t.is_alive()
    runs = [iv for iv in guest.intervals if iv[0] == "run"]
    assert overlap(runs, [("held", held_from, held_to)]) == 0.0
    assert any(s >= held_to for _, s, _ in runs)  # it ran again once released
