"""Busy/idle timelines of real processes, and the bubble figures read off them.

Every process of a squeeze (each host stage, each guest) records what it did
as ``(kind, start, end)`` intervals on one clock, ``CLOCK_MONOTONIC`` (shared by
all processes of the machine, so a stage's and a guest's intervals can be
compared directly). Nothing here assumes the 1F1B shape: the bubble ratio is
measured from where a stage really computed, and :func:`one_f_one_b_bubble`
is only the formula it is compared with.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Sequence

__all__ = ["Interval", "now", "merge", "total", "clip", "overlap", "subtract", "idle_windows",
           "step_shares", "bubble_ratio", "one_f_one_b_bubble"]

#: ``(kind, start, end)`` in seconds of :func:`now`; kind is e.g. "F", "B", "L", "O", "run"
Interval = tuple[str, float, float]


def now() -> float:
    """Seconds on the machine-wide monotonic clock (the same in every process)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def merge(intervals: Iterable[Interval]) -> list[tuple[float, float]]:
    """The union of ``intervals`` as sorted, disjoint ``(start, end)`` pairs."""
    spans = sorted((s, e) for _, s, e in intervals if e > s)
    out: list[tuple[float, float]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def total(spans: Iterable[tuple[float, float]]) -> float:
    """Summed length of disjoint spans."""
    return sum(e - s for s, e in spans)


def clip(spans: Iterable[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The parts of ``spans`` that lie inside ``[lo, hi]``."""
    return [(max(s, lo), min(e, hi)) for s, e in spans if min(e, hi) > max(s, lo)]


def overlap(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """Seconds during which some interval of ``a`` and some interval of ``b`` both ran.

    The gate test's figure: a guest's running intervals against its host
    stage's compute intervals must give 0.
    """
    ma, mb = merge(a), merge(b)
    i = j = 0
    out = 0.0
    while i < len(ma) and j < len(mb):
        s, e = max(ma[i][0], mb[j][0]), min(ma[i][1], mb[j][1])
        out += max(e - s, 0.0)
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Interval], b: Iterable[Interval], kind: str = "run") -> list[Interval]:
    """The parts of ``a`` outside every interval of ``b`` (a guest's running time less the
    stretches its host had it SIGSTOPped)."""
    out: list[Interval] = []
    mb = merge(b)
    for s, e in merge(a):
        cursor = s
        for bs, be in mb:
            if be <= cursor or bs >= e:
                continue
            if bs > cursor:
                out.append((kind, cursor, bs))
            cursor = max(cursor, be)
        if e > cursor:
            out.append((kind, cursor, e))
    return out


def idle_windows(busy: Iterable[Interval], lo: float, hi: float) -> list[tuple[float, float]]:
    """The gaps of ``busy`` inside ``[lo, hi]``: a stage's bubbles over that window."""
    out: list[tuple[float, float]] = []
    cursor = lo
    for s, e in clip(merge(busy), lo, hi):
        if s > cursor:
            out.append((cursor, s))
        cursor = max(cursor, e)
    if hi > cursor:
        out.append((cursor, hi))
    return out


def _within(spans: list[tuple[float, float]], ends: list[float], lo: float,
            hi: float) -> list[tuple[float, float]]:
    """:func:`clip` for sorted disjoint ``spans`` (``ends``: their ends), by bisection."""
    out = []
    i = bisect.bisect_right(ends, lo)
    while i < len(spans) and spans[i][0] < hi:
        s, e = spans[i]
        if min(e, hi) > max(s, lo):
            out.append((max(s, lo), min(e, hi)))
        i += 1
    return out


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Seconds in both of two sorted disjoint span lists."""
    i = j = 0
    out = 0.0
    while i < len(a) and j < len(b):
        out += max(min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]), 0.0)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def step_shares(started: float, step_ends: Sequence[float], running: Iterable[Interval],
                windows: Iterable[tuple[float, float]]) -> list[float]:
    """Per finished step of a guest, the fraction of its compute that ran inside ``windows``.

    Step i spans from the previous step's end (``started`` for the first) to its own
    end; its compute is the guest's ``running`` time in that span. A gated guest pauses
    mid-step, so one step can run across several bubbles, some of them outside the
    windows being measured; crediting a step whole because it *ended* inside a window
    would count compute done elsewhere. ``solo step time × share`` is the step's progress
    made inside the windows. A step with no running time in its span gets 0.
    """
    runs = merge(running)
    run_ends = [e for _, e in runs]
    wins = merge(("w", lo, hi) for lo, hi in windows)
    win_ends = [e for _, e in wins]
    out = []
    prev = started
    for end in step_ends:
        mine = _within(runs, run_ends, prev, end)
        compute = total(mine)
        inside = _intersection(mine, _within(wins, win_ends, prev, end)) if compute > 0 else 0.0
        out.append(min(inside / compute, 1.0) if compute > 0 else 0.0)
        prev = max(prev, end)
    return out


def bubble_ratio(stages: Sequence[Iterable[Interval]], kinds: str = "FBL") -> list[float]:
    """Each stage's idle fraction of one pipeline iteration, measured.

    ``stages[i]`` holds stage i's intervals of one iteration; only compute of
    ``kinds`` counts (forward, backward, loss: what the 1F1B formula is about;
    the optimizer step "O" is left out). The iteration spans from the first
    compute of any stage to the last, so a stage that waits for the pipeline to
    fill or drain counts that wait as its bubble, as in Hydro's Fig. 9a.
    """
    per = [merge(iv for iv in st if iv[0] in kinds) for st in stages]
    starts = [m[0][0] for m in per if m]
    ends = [m[-1][1] for m in per if m]
    if not starts:
        return [0.0 for _ in per]
    lo, hi = min(starts), max(ends)
    return [1.0 - total(m) / (hi - lo) for m in per]


def one_f_one_b_bubble(stages: int, microbatches: int) -> float:
    """The 1F1B bubble fraction (p−1)/(m+p−1) with equal stages and free communication."""
    return (stages - 1) / (microbatches + stages - 1)
