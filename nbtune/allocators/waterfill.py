"""Water-filling math (Fluid §4.2, Alg. 1) and turning widths into placements on GPUs.

Two functions here are a stable interface other allocators build on (the
knapsack engineer's ``"fluid+knapsack"`` imports them), so their signatures
do not change:

* :func:`fluid_widths` — Fluid's Alg. 1 line 4, literally:
  ``w_i = min(max(floor(h_i1 / Σ_j h_j1 · n), 1/c), d)``, with trials in
  non-increasing ``h_i1`` order;
* :func:`place_widths` — widths to concrete ``(gpu_id, share)`` placements:
  fractions packed onto shared GPUs (at most ``c`` per GPU, shares summing to
  ≤ the GPU's capacity), widths ≥ 1 as whole idle GPUs on the fewest nodes,
  running trials kept where they are when possible.

:func:`fill_leftover` (also imported by ``"fluid+knapsack"``, same promise) is
nbtune's addition: the floor in Alg. 1 leaves up to
one GPU per wide trial unassigned (Σ w_i < n); it hands those spare whole GPUs
one at a time to the trial that would otherwise finish last, which is what
"water-filling" means and what lets the Fig. 5 toy example reach its optimum.
Everything here is pure arithmetic on plain mappings.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from nbtune.allocators.gpu_book import GpuBook
from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.tolerance import EPS as _TOL

__all__ = ["fluid_widths", "fill_leftover", "fill_in_order", "gpus_needed", "place_widths",
           "widths_in_order"]


def _check_limits(n_gpus: float, c: int, d: float) -> None:
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise ValueError(f"c (max trials packed on one GPU) must be an integer >= 1, got {c!r}")
    if not d >= 1:
        raise ValueError(f"d (max GPUs per trial) must be >= 1, got {d!r}")
    if not (isinstance(n_gpus, int | float) and math.isfinite(n_gpus) and n_gpus >= 0):
        raise ValueError(f"n_gpus must be a finite number >= 0, got {n_gpus!r}")


def fluid_widths(h1: Mapping[int, float], n_gpus: float, c: int, d: int) -> dict[int, float]:
    """Fluid Alg. 1 line 4: each trial's width from its share of the group's work.

    ``h1`` maps trial id to its (remaining) runtime on one GPU, ``n_gpus`` is
    the number of GPUs to share out, ``c`` the most trials packed on one GPU
    (intra-GPU limit) and ``d`` the most GPUs one trial may use (inter-GPU
    limit). Returns ``{trial_id: w_i}`` *ordered by non-increasing h_i1*
    (ties by trial id), the order in which Fluid places trials. A trial whose
    proportional share is below one GPU gets ``1/c`` (the floor gives 0); a
    group with no work left at all gives everyone ``1/c``.
    """
    ids, w, _ = widths_in_order(list(h1), list(h1.values()), n_gpus, c, d)
    return dict(zip(ids, w.tolist(), strict=True))


def widths_in_order(tids: list[int], h: list[float], n_gpus: float, c: int,
                    d: int) -> tuple[list[int], np.ndarray, np.ndarray]:
    """:func:`fluid_widths` of ``dict(zip(tids, h))`` for a caller that keeps arrays: the
    trial ids in its order, an array of their widths (the same floats) and each one's
    position in ``tids``."""
    _check_limits(n_gpus, c, d)
    total = sum(h)
    # a finite sum means no NaN or inf among them; then the least one says if any is negative
    if not (math.isfinite(total) and (not h or min(h) >= 0)):
        for tid, v in zip(tids, h, strict=True):
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"trial {tid}: h_i1 must be a finite runtime >= 0, got {v!r}")
    if not tids:
        return [], np.empty(0), np.empty(0, dtype=np.intp)
    # elementwise numpy arithmetic is the same IEEE double arithmetic as the scalar loop it
    # replaced (h / total * n + tol, floored, clamped), so every width is bit-identical; the
    # total stays Python's sequential sum (numpy's pairwise sum may differ in the last bit)
    hs = np.array(h, dtype=float)
    # non-increasing h, ties by id: lexsort's last key is the primary one, and it is stable
    try:
        ids = np.array(tids, dtype=np.int64) \
            if set(map(type, tids)) == {int} else None  # every id a plain int (C loops)
    except OverflowError:
        ids = None
    if ids is not None:
        order = np.lexsort((ids, -hs))
    else:  # ids that are not plain ints: the sort it replaces, spelled out
        of = dict(zip(tids, h, strict=True))
        order_ids = sorted(sorted(of), key=of.__getitem__, reverse=True)
        pos = {t: i for i, t in enumerate(tids)}
        order = np.fromiter((pos[t] for t in order_ids), dtype=np.intp, count=len(tids))
    lo = 1.0 / c
    if total > 0:
        f = np.floor(hs[order] / total * n_gpus + _TOL)
    else:
        f = np.full(len(tids), math.floor(0.0 + _TOL), dtype=float)
    v = np.where(lo > f, lo, f)  # w = min(max(floor(share), 1/c), d)
    w = np.where(d < v, float(d), v)
    return list(map(tids.__getitem__, order.tolist())), w, order


def gpus_needed(widths: Mapping[int, float], c: int) -> int:
    """Whole GPUs a set of widths occupies: wide trials' GPUs plus the packed fractions'."""
    whole = sum(int(math.floor(w + _TOL)) for w in widths.values() if w >= 1 - _TOL)
    n_frac = sum(1 for w in widths.values() if w < 1 - _TOL)
    return whole + math.ceil(n_frac / c)


def fill_leftover(
    widths: Mapping[int, float],
    runtime: Callable[[int, float], float],
    n_gpus: float,
    c: int,
    d: int,
    runtimes: Callable[[Sequence[int], np.ndarray], np.ndarray] | None = None,
) -> dict[int, float]:
    """Give GPUs the floor left unassigned to the trials that finish last.

    ``runtime(trial_id, w)`` is the trial's remaining time at width ``w``
    (Fluid's h_{i,w}). While whole GPUs remain after :func:`gpus_needed`, the
    trial with the largest runtime that would get faster with one more GPU
    (a fractional trial steps up to 1, a wide one to ``w + 1`` ≤ ``d``) gets
    it. Order and keys of ``widths`` are preserved. ``runtimes(trial_ids,
    widths)``, if given, is ``runtime`` for many trials at once (an array of
    the same floats, ``widths`` an array whose last axis follows
    ``trial_ids``): the pass is then a few array operations instead of two
    calls per trial and per GPU handed out (the plan makes it over every
    running trial on every scheduling call); see :func:`_fill_batched`.
    """
    _check_limits(n_gpus, c, d)
    out = dict(widths)
    total = int(math.floor(n_gpus + _TOL))
    if runtimes is not None:
        ws = np.fromiter(out.values(), dtype=float, count=len(out))
        if np.isfinite(ws).all():  # (else the loop below raises)
            tids = list(out)
            filled = fill_in_order(tids, ws, runtimes, n_gpus, c, d)
            if filled is not ws:
                for j in np.flatnonzero(filled != ws).tolist():
                    out[tids[j]] = float(filled[j])
            return out
    whole = sum(int(math.floor(w + _TOL)) for w in out.values() if w >= 1 - _TOL)
    n_frac = sum(1 for w in out.values() if w < 1 - _TOL)

    def step(w: float) -> float:
        return 1.0 if w < 1 - _TOL else math.floor(w + _TOL) + 1.0

    # a max-heap of the trials one more GPU would speed up, longest remaining time first
    # (ties: earliest in ``widths``); each pop hands out one GPU, so the whole pass is
    # O((trials + GPUs) log trials) instead of a scan of every trial per spare GPU
    if total - (whole + math.ceil(n_frac / c)) <= 0:
        return out  # no spare GPU: nothing to hand out (and no runtime to evaluate)
    order = {tid: i for i, tid in enumerate(out)}
    heap: list[tuple[float, int, int]] = []

    def offer(tid: int, w: float) -> None:
        nxt = step(w)
        if nxt > d + _TOL:
            return
        now = runtime(tid, w)
        if runtime(tid, nxt) < now - _TOL:
            heapq.heappush(heap, (-now, order[tid], tid))

    # the first offers inlined; keys are unique (the order breaks ties), so heapify pops
    # exactly what one push per trial would
    lim, one, floor = d + _TOL, 1 - _TOL, math.floor
    for i, (tid, w) in enumerate(out.items()):
        nxt = 1.0 if w < one else floor(w + _TOL) + 1.0
        if nxt > lim:
            continue
        now = runtime(tid, w)
        if runtime(tid, nxt) < now - _TOL:
            heap.append((-now, i, tid))
    heapq.heapify(heap)
    while heap and total - (whole + math.ceil(n_frac / c)) > 0:
        _, _, tid = heapq.heappop(heap)
        w = out[tid]
        if w < 1 - _TOL:
            n_frac -= 1
        whole += 1
        out[tid] = step(w)
        offer(tid, out[tid])
    return out


def fill_in_order(tids: list[int], ws: np.ndarray,
                  runtimes: Callable[[Sequence[int], np.ndarray], np.ndarray],
                  n_gpus: float, c: int, d: int) -> np.ndarray:
    """:func:`fill_leftover` of ``dict(zip(tids, ws))`` with ``runtimes`` given, on arrays:
    the widths after it (``ws`` itself when no GPU is spare; else a new array). The widths
    must be finite (as :func:`widths_in_order` makes them)."""
    _check_limits(n_gpus, c, d)
    total = int(math.floor(n_gpus + _TOL))
    # the same counts as fill_leftover's loop (a sum of whole numbers of GPUs is exact in floats)
    wide = ws >= 1 - _TOL
    whole = int(np.floor(ws[wide] + _TOL).sum())
    n_frac = len(ws) - int(np.count_nonzero(wide))
    if total - (whole + math.ceil(n_frac / c)) <= 0:
        return ws
    return _fill_batched(tids, ws, runtimes, total, whole, n_frac, c, d)


def _fill_batched(
    tids: list[int],
    w: np.ndarray,
    runtimes: Callable[[Sequence[int], np.ndarray], np.ndarray],
    total: int,
    whole: int,
    n_frac: int,
    c: int,
    d: int,
) -> np.ndarray:
    """:func:`fill_leftover`'s heap pass, done as one sort (the same GPUs to the same trials).

    A trial only ever climbs its own ladder of widths w, step(w), step(step(w)), …
    up to ``d``, so the runtimes at every rung (at most ``d + 2`` per trial) are
    one array product. Its offers are the rungs from which one more step fits
    and is faster, up to the first that is not; along that chain the runtimes
    strictly fall, so every key a pop pushes is larger than the key it popped
    and the heap pops all offers in sorted order of (−runtime, position). The
    pass is then: sort every offer that way and take them while spare GPUs
    remain (the test before each pop, with the counts the pops before it left).
    """
    lim, one = d + _TOL, 1 - _TOL
    rungs = [w]
    while (w <= lim).any():  # rung k: the widths after k steps, until no step can land
        w = np.where(w < one, 1.0, np.floor(w + _TOL) + 1.0)
        rungs.append(w)
    table = np.stack(rungs)
    # runtimes only where a step can land (the only ones read, and the only ones a
    # per-step loop would evaluate); 1.0 stands in elsewhere
    times = np.asarray(runtimes(tids, np.where(table <= lim, table, 1.0)), dtype=float)
    # offer at rung k: the step to rung k + 1 fits under d and is faster; a trial's
    # offers end at its first rung that has none (it is not offered again after that)
    offers = np.logical_and.accumulate(
        (table[1:] <= lim) & (times[1:] < times[:-1] - _TOL), axis=0)
    k, i = np.nonzero(offers)
    order = np.lexsort((i, -times[k, i]))  # heap order: longest runtime first, then position
    k, i = k[order], i[order]
    frac = (table[k, i] < one).astype(np.int64)  # a pop that makes a fraction whole
    frac_before = np.cumsum(frac) - frac
    pops = np.arange(len(k))
    # before pop j: whole + j GPUs, n_frac − (fractions popped so far) fractions left
    ceil_frac = -((frac_before - n_frac) // c)
    stop = np.flatnonzero(total - (whole + pops + ceil_frac) <= 0)
    taken = np.bincount(i[: stop[0] if len(stop) else len(k)], minlength=len(tids))
    return table[taken, np.arange(len(tids))]


def place_widths(
    widths: Mapping[int, float],
    cluster: ClusterSpec,
    running: Mapping[int, Placement],
    *,
    c: int = 4,
    max_share: float | Mapping[int, float] = 1.0,
    shrink_to_fit: bool = False,
) -> dict[int, Placement]:
    """Turn widths into placements on concrete GPUs, in the iteration order of ``widths``.

    ``running`` is every placement held now (``view.running``). Trials listed
    in ``widths`` that are also in ``running`` are *re-placed* when their turn
    comes: their current GPUs are freed for them and reused when possible (a
    trial keeps its GPUs when its width does not change, grows onto extra GPUs
    next to its own, shrinks onto a subset of them). Until its turn a running
    trial's GPUs count as taken, so list scale-downs before the scale-ups that
    need what they free. All other running trials stay put. Rules:

    * width ≥ 1: ``floor(width)`` GPUs with nothing on them, on the fewest
      nodes (the node with the fewest idle GPUs that still has enough, else
      the nodes with the most idle GPUs first);
    * width < 1: one GPU at that share, packed where other fractional trials
      already are (fullest first, at most ``c`` trials on a GPU, shares summing
      to ≤ ``max_share`` — a number or ``{gpu_id: cap}``), else a fresh GPU.

    A trial that does not fit is left out of the result, or, for a running
    trial, given back its current placement. With ``shrink_to_fit`` a new trial
    that does not fit at its width takes the most it can get instead (fewer
    whole GPUs, or a ``1/c`` slot). Nothing passed in is modified.
    """
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise ValueError(f"c must be an integer >= 1, got {c!r}")
    book = GpuBook(cluster, c, max_share)
    book.count_running(running)
    out: dict[int, Placement] = {}
    for tid, w in widths.items():
        if not (w > 0 and math.isfinite(w)):
            raise ValueError(f"trial {tid}: width must be a finite number > 0, got {w!r}")
        cur = running.get(tid, ())
        book.remove(cur)  # its own GPUs are free for it (and only for it: it is placed now)
        pl = book.place(w, cur)
        if pl is None and shrink_to_fit and not cur:
            pl = book.shrunk(w)
        if pl is None and cur:
            pl = cur  # it keeps what it has
        if pl is not None:
            out[tid] = pl
            book.add(pl)
    return out
