"""Water-filling's functions as they were before the scaling work (the reference they must match).

Verbatim copies of ``fluid_widths``, ``fill_leftover`` and ``place_widths``
(with its helpers) from :mod:`nbtune.allocators.waterfill`: ``place_widths``
rebuilt every GPU's load per call and scanned every GPU per trial,
``fill_leftover`` offered every trial to its heap. See
:mod:`tests.allocators.fluid_reference`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping
from typing import Any

from nbtune.allocators.waterfill import _check_limits
from nbtune.core.resources import ClusterSpec, Placement

_TOL = 1e-9


def reference_fluid_widths(h1: Mapping[int, float], n_gpus: float, c: int, d: int) -> dict[int, float]:
    """Fluid Alg. 1 line 4: each trial's width from its share of the group's work.

    ``h1`` maps trial id to its (remaining) runtime on one GPU, ``n_gpus`` is
    the number of GPUs to share out, ``c`` the most trials packed on one GPU
    (intra-GPU limit) and ``d`` the most GPUs one trial may use (inter-GPU
    limit). Returns ``{trial_id: w_i}`` *ordered by non-increasing h_i1*
    (ties by trial id), the order in which Fluid places trials. A trial whose
    proportional share is below one GPU gets ``1/c`` (the floor gives 0); a
    group with no work left at all gives everyone ``1/c``.
    """
    _check_limits(n_gpus, c, d)
    for tid, h in h1.items():
        if not (math.isfinite(h) and h >= 0):
            raise ValueError(f"trial {tid}: h_i1 must be a finite runtime >= 0, got {h!r}")
    order = sorted(h1, key=lambda t: (-h1[t], t))
    total = sum(h1.values())
    out: dict[int, float] = {}
    for tid in order:
        share = h1[tid] / total * n_gpus if total > 0 else 0.0
        out[tid] = float(min(max(math.floor(share + _TOL), 1.0 / c), d))
    return out


def reference_fill_leftover(
    widths: Mapping[int, float],
    runtime: Callable[[int, float], float],
    n_gpus: float,
    c: int,
    d: int,
) -> dict[int, float]:
    """Give GPUs the floor left unassigned to the trials that finish last.

    ``runtime(trial_id, w)`` is the trial's remaining time at width ``w``
    (Fluid's h_{i,w}). While whole GPUs remain after :func:`gpus_needed`, the
    trial with the largest runtime that would get faster with one more GPU
    (a fractional trial steps up to 1, a wide one to ``w + 1`` ≤ ``d``) gets
    it. Order and keys of ``widths`` are preserved.
    """
    _check_limits(n_gpus, c, d)
    out = dict(widths)
    total = int(math.floor(n_gpus + _TOL))
    whole = sum(int(math.floor(w + _TOL)) for w in out.values() if w >= 1 - _TOL)
    n_frac = sum(1 for w in out.values() if w < 1 - _TOL)

    def step(w: float) -> float:
        return 1.0 if w < 1 - _TOL else math.floor(w + _TOL) + 1.0

    # a max-heap of the trials one more GPU would speed up, longest remaining time first
    # (ties: earliest in ``widths``); each pop hands out one GPU, so the whole pass is
    # O((trials + GPUs) log trials) instead of a scan of every trial per spare GPU
    order = {tid: i for i, tid in enumerate(out)}
    heap: list[tuple[float, int, int]] = []

    def offer(tid: int, w: float) -> None:
        nxt = step(w)
        if nxt > d + _TOL:
            return
        now = runtime(tid, w)
        if runtime(tid, nxt) < now - _TOL:
            heapq.heappush(heap, (-now, order[tid], tid))

    for tid, w in out.items():
        offer(tid, w)
    while heap and total - (whole + math.ceil(n_frac / c)) > 0:
        _, _, tid = heapq.heappop(heap)
        w = out[tid]
        if w < 1 - _TOL:
            n_frac -= 1
        whole += 1
        out[tid] = step(w)
        offer(tid, out[tid])
    return out


def _cap(max_share: float | Mapping[int, float], gpu: int) -> float:
    return float(max_share.get(gpu, 1.0)) if isinstance(max_share, Mapping) else float(max_share)


def reference_place_widths(
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
    gpus = cluster.by_id()
    load = {g: 0.0 for g in gpus}
    count = {g: 0 for g in gpus}
    for pl in running.values():
        for g, s in pl:
            if g in load:
                load[g] += s
                count[g] += 1
    out: dict[int, Placement] = {}

    def release(pl: Placement) -> None:
        for g, s in pl:
            if g in load:
                load[g] -= s
                count[g] -= 1

    def commit(tid: int, pl: Placement) -> None:
        out[tid] = pl
        for g, s in pl:
            load[g] += s
            count[g] += 1

    def idle() -> list[int]:
        return [g for g in gpus if load[g] <= _TOL]

    for tid, w in widths.items():
        if not (w > 0 and math.isfinite(w)):
            raise ValueError(f"trial {tid}: width must be a finite number > 0, got {w!r}")
        cur = running.get(tid, ())
        release(cur)  # its own GPUs are free for it (and only for it: it is placed now)
        pl = _place_one(w, cur, gpus, load, count, idle(), c, max_share)
        if pl is None and shrink_to_fit and not cur:
            pl = _shrunk(w, gpus, load, count, idle(), c, max_share)
        if pl is None and cur:
            pl = cur  # it keeps what it has
        if pl is not None:
            commit(tid, pl)
    return out


def _place_one(
    w: float,
    cur: Placement,
    gpus: Mapping[int, Any],
    load: dict[int, float],
    count: dict[int, int],
    idle: list[int],
    c: int,
    max_share: float | Mapping[int, float],
) -> Placement | None:
    if w < 1 - _TOL:
        return _place_fraction(w, cur, gpus, load, count, c, max_share)
    k = int(math.floor(w + _TOL))
    cur_ids = [g for g, _ in cur]
    # keep own GPUs first (those still fully free for it), then grow next to them
    own = [g for g in cur_ids if g in gpus and load[g] + 1.0 <= _cap(max_share, g) + _TOL]
    if len(own) >= k:
        return tuple((g, 1.0) for g in own[:k])
    rest = [g for g in idle if g not in own and _cap(max_share, g) + _TOL >= 1.0]
    if len(own) + len(rest) < k:
        return None
    nodes_of_own = {gpus[g].node for g in own}
    by_node: dict[str, list[int]] = {}
    for g in rest:
        by_node.setdefault(gpus[g].node, []).append(g)
    need = k - len(own)
    if not own:
        fits = [n for n, gs in by_node.items() if len(gs) >= need]
        if fits:  # best fit: the node with the fewest idle GPUs that still has enough
            node = min(fits, key=lambda n: (len(by_node[n]), n))
            return tuple((g, 1.0) for g in sorted(by_node[node])[:need])
    order = sorted(by_node, key=lambda n: (n not in nodes_of_own, -len(by_node[n]), n))
    chosen = list(own)
    for n in order:
        for g in sorted(by_node[n]):
            if len(chosen) == k:
                break
            chosen.append(g)
    return tuple((g, 1.0) for g in chosen)


def _place_fraction(
    w: float,
    cur: Placement,
    gpus: Mapping[int, Any],
    load: dict[int, float],
    count: dict[int, int],
    c: int,
    max_share: float | Mapping[int, float],
) -> Placement | None:
    def fits(g: int) -> bool:
        return count[g] < c and load[g] + w <= _cap(max_share, g) + _TOL

    for g, _ in cur:  # stay where it is if it can
        if g in gpus and fits(g):
            return ((g, w),)
    shared = [g for g in gpus if load[g] > _TOL and fits(g)]
    if shared:  # pack: the fullest GPU that still has room
        g = max(shared, key=lambda g: (load[g], -g))
        return ((g, w),)
    fresh = [g for g in gpus if load[g] <= _TOL and fits(g)]
    return ((min(fresh), w),) if fresh else None


def _shrunk(
    w: float,
    gpus: Mapping[int, Any],
    load: dict[int, float],
    count: dict[int, int],
    idle: list[int],
    c: int,
    max_share: float | Mapping[int, float],
) -> Placement | None:
    k = min(int(math.floor(w + _TOL)), len(idle))
    while k >= 1:
        pl = _place_one(float(k), (), gpus, load, count, idle, c, max_share)
        if pl is not None:
            return pl
        k -= 1
    return _place_fraction(1.0 / c, (), gpus, load, count, c, max_share)
