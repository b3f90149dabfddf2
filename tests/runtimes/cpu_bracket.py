"""What a CPU meter may read over an interval, from readings taken around its own.

A share measured on a loaded machine is whatever the machine gave, so a test
cannot ask for "busy" by a threshold. It can ask for the truth instead: the
test reads the same CPU clocks just before and just after each of the
meter's calls, which bounds the meter's reading from both sides whatever the
load (its CPU readings and its clock lie between the test's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

import psutil

T = TypeVar("T")


@dataclass(frozen=True)
class Around:
    """Monotonic time and CPU seconds per key, just before (0) and just after (1) a call."""

    t0: float
    t1: float
    cpu0: dict[Hashable, float]
    cpu1: dict[Hashable, float]


def around(cpu: Callable[[], dict[Hashable, float]], call: Callable[[], T]) -> tuple[T, Around]:
    c0 = cpu()
    t0 = time.monotonic()
    out = call()
    t1 = time.monotonic()
    return out, Around(t0, t1, c0, cpu())


def share_bounds(a: Around, b: Around, key: Hashable) -> tuple[float, float]:
    """The least and the most CPU share (capped at 1, one core) of ``key`` that a meter called
    within ``a`` and then within ``b`` can have read for the interval between its calls."""
    lo = max(b.cpu0[key] - a.cpu1[key], 0.0) / (b.t1 - a.t0)
    hi = (b.cpu1[key] - a.cpu0[key]) / (b.t0 - a.t1)
    return min(lo, 1.0) - 1e-9, min(hi, 1.0) + 1e-9


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its children (what the meter counts for a trial process)."""
    p = psutil.Process(pid)
    total = 0.0
    for q in (p, *p.children(recursive=True)):
        t = q.cpu_times()
        total += t.user + t.system
    return total


def until_cpu(read: Callable[[], float], more: float, timeout: float = 120.0) -> None:
    """Wait until ``read()`` (CPU seconds) has grown by ``more``; fail after ``timeout`` s."""
    start, deadline = read(), time.monotonic() + timeout
    while read() - start < more:
        assert time.monotonic() < deadline, f"never used {more} s of CPU in {timeout} s"
        time.sleep(0.05)


def ready(proc: Any, timeout: float = 120.0) -> None:
    """Wait for the line ``ready`` a child prints once it reaches its loop."""
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout), f"process {proc.pid} never said ready"
    assert proc.stdout.readline().strip() == b"ready"
