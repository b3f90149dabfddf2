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


def test_a_cooperative_guest_never_runs_while_the_host_computes():
    gate = Gate(mp.get_context("spawn"))
    host = HostSide(gate, grace=5.0)
    host.start()
    guest = started_guest(gate)
    done = threading.Event()

    def guest_loop():
        while not done.is_set():
            guest.checkpoint()
            spin(0.0003)  # a "layer" of guest compute between checkpoints
        guest.finish()

    t = in_thread(guest_loop)
    for _ in range(30):
        with host.busy("F"):
            spin(0.003)
        time.sleep(0.003)  # a bubble: the host waits for its neighbour
    host.end()
    done.set()
    t.join(10)
    assert not t.is_alive()
    runs = [iv for iv in guest.intervals if iv[0] == "run"]
    assert guest.pauses >= 10 and sum(e - s for _, s, e in runs) > 0.01  # it did use bubbles
    # exact: the host's busy clock starts after it holds the slot, the guest's run ends before
    # it lets go, so any overlap at all is a broken gate (no tolerance needed)
    assert overlap(runs, host.intervals) == 0.0
    assert max(host.handoffs) < 1.0  # the guest gave the slot up within one of its layers


def test_a_guest_whose_host_never_starts_runs_on_its_own():
    gate = Gate(mp.get_context("spawn"))
    t0 = time.monotonic()
    side = GuestSide(gate, slice_s=0.05)
    side.start(start_timeout=0.3)
    assert side.free and time.monotonic() - t0 < 2.0
    side.checkpoint()  # returns at once


def test_a_guest_is_released_when_its_host_ends():
    gate = Gate(mp.get_context("spawn"))
    host = HostSide(gate, grace=5.0)
    host.start()
    guest = started_guest(gate, slice_s=0.05)

    def guest_loop():
        while not guest.free:
            guest.checkpoint()
            spin(0.0005)

    t = in_thread(guest_loop)
    time.sleep(0.05)
    with host.busy("F"):
        pauses = guest.pauses
        time.sleep(0.3)
        assert t.is_alive() and guest.pauses == pauses  # held in its one pause
        host.end()  # the host's last chunk: the guest may go on, for good
        t.join(2.0)
    assert not t.is_alive() and guest.free and gate.state.value == ENDED


def test_a_guest_never_waits_forever_on_a_stuck_host():
    gate = Gate(mp.get_context("spawn"))
    HostSide(gate).start()
    guest = started_guest(gate, max_wait=0.5, slice_s=0.05)
    stuck = HostSide(gate, grace=10.0)
    in_thread(stuck._enter)  # a host that takes the slot as the guest lets go, and keeps it
    time.sleep(0.1)
    assert gate.want.value == 1
    t0 = time.monotonic()
    guest.checkpoint()
    assert guest.free and 0.4 < time.monotonic() - t0 < 3.0


def test_a_guest_runs_free_when_its_host_process_died():
    gate = Gate(mp.get_context("spawn"))
    gate.state.value = RUNNING
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gate.host_pid.value = dead.pid  # reaped: no such process any more
    gate.want.value = 1
    guest = GuestSide(gate, max_wait=60.0, slice_s=0.05)
    t0 = time.monotonic()
    guest.start(start_timeout=1)
    guest.checkpoint()
    assert guest.free and time.monotonic() - t0 < 3.0


def test_a_held_stage_keeps_its_guest_out_through_its_bubbles():
    # the benchmark's "host alone" iterations: the stage keeps the slot across chunks and gaps
    gate = Gate(mp.get_context("spawn"))
    host = HostSide(gate, grace=5.0)
    host.start()
    guest = started_guest(gate, slice_s=0.05)
    done = threading.Event()

    def guest_loop():
        while not done.is_set():
            guest.checkpoint()
            spin(0.0003)
        guest.finish()

    t = in_thread(guest_loop)
    time.sleep(0.05)
    host.hold()
    held_from = time.clock_gettime(time.CLOCK_MONOTONIC)
    for _ in range(5):
        with host.busy("F"):
            spin(0.003)
        time.sleep(0.01)  # a bubble, but held
    held_to = time.clock_gettime(time.CLOCK_MONOTONIC)
    host.release()
    time.sleep(0.05)
    host.end()
    done.set()
    t.join(10)
    runs = [iv for iv in guest.intervals if iv[0] == "run"]
    assert overlap(runs, [("held", held_from, held_to)]) == 0.0
    assert any(s >= held_to for _, s, _ in runs)  # it ran again once released
