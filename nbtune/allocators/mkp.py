"""The GPU Assignment Problem as a multiple knapsack (HyperSack §III–IV): the array core.

:func:`pack` is a pure function on arrays: items (trials) with a compute,
memory and CPU demand go onto knapsacks (GPUs) with remaining compute
(capacity × oversubscription ratio, minus what is already placed), remaining
memory, and a node whose CPU cores are shared by all its GPUs. It implements
HyperSack's four policies, Algorithms 1–2:

* ``ff``  first fit: the first GPU (in scan order) that satisfies all three constraints;
* ``wf``  worst fit: the feasible GPU with the most remaining compute;
* ``ffd`` / ``wfd``: the same after sorting items by expected runtime, longest first.

Why a tree and not the paper's double loop: the loops cost O(P·G) and the
allocator must decide 100,000 trials on 4,096 GPUs in well under a second.
A max segment tree over the GPUs (per subtree: most remaining compute,
memory, node CPUs, worst-fit key) answers "first feasible GPU" and "feasible
GPU with the most compute" by a pruned descent, typically O(log G), and an
item that fits nowhere is usually rejected at the root. The per-subtree
maxima may come from different GPUs, so the descent backtracks when a
subtree passes the bound but no leaf in it is feasible; the answer is exactly
the one the paper's loops give (worst-fit ties aside, see :func:`pack`).
Four shortcuts keep Python's per-item cost low, none changing a decision:
a greedy descent is tried first and is provably exact unless it dead-ends
(or, for worst fit, ends below the root's key); a GPU that no item still to
come can fit is dropped from the tree, and the loop stops once nothing left
fits anywhere; an item at least as big in every dimension as one that just
failed is rejected at once; a node's cores are written into the tree only
once they fall below the largest CPU demand (above it they reject no item).

Speeds (heterogeneous GPUs): first fit scans the fastest GPUs first, and the
worst-fit key is remaining compute × speed (the throughput a newcomer would
get), so faster GPUs take more of the work.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from nbtune.core.tolerance import EPS as _EPS

__all__ = ["POLICIES", "pack", "decreasing_order"]

POLICIES = ("ff", "ffd", "wf", "wfd")
_NEG = float("-inf")


def decreasing_order(runtime: ArrayLike) -> np.ndarray:
    """Item indices by expected runtime, longest first; ties keep their queue order."""
    rt = np.asarray(runtime, dtype=float)
    return np.argsort(-rt, kind="stable")


def _as_1d(name: str, a: ArrayLike, n: int | None = None) -> np.ndarray:
    arr = np.asarray(a, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-d array, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} entries, expected {n}")
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    return arr


def pack(
    compute: ArrayLike,
    memory: ArrayLike,
    cpus: ArrayLike,
    cap_compute: ArrayLike,
    cap_memory: ArrayLike,
    gpu_node: ArrayLike,
    node_cpus: ArrayLike,
    *,
    policy: str = "wfd",
    runtime: ArrayLike | None = None,
    speed: ArrayLike | None = None,
) -> np.ndarray:
    """Assign items to GPUs; return, per item, the GPU index it went to or -1.

    ``compute``/``memory``/``cpus`` (length P) are the items' demands;
    ``cap_compute``/``cap_memory`` (length G) are what each GPU has *left*
    (compute already scaled by its oversubscription ratio); ``gpu_node`` (ints
    in ``[0, N)``) says which node each GPU is on and ``node_cpus`` (length N)
    the cores each node has left. ``runtime`` orders the ``*d`` policies;
    ``speed`` (default all 1) makes first fit scan faster GPUs first and
    weighs worst fit's key. Items are considered once each, in policy order,
    as in HyperSack's algorithms. Worst-fit ties go to the GPU found first
    (fastest / lowest index in most cases).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown knapsack policy {policy!r}; choose one of {POLICIES}")
    c = _as_1d("compute", compute)
    p = c.shape[0]
    d = _as_1d("memory", memory, p)
    q = _as_1d("cpus", cpus, p)
    rc = _as_1d("cap_compute", cap_compute)
    g = rc.shape[0]
    rm = _as_1d("cap_memory", cap_memory, g)
    nodes = np.asarray(gpu_node)
    if nodes.shape != (g,) or (g and not np.issubdtype(nodes.dtype, np.integer)):
        raise ValueError(f"gpu_node must be {g} integer node indices, got {nodes!r}")
    ncpu = _as_1d("node_cpus", node_cpus)
    if g and (nodes.min() < 0 or nodes.max() >= ncpu.shape[0]):
        raise ValueError(f"gpu_node indices must lie in [0, {ncpu.shape[0]})")
    sp = np.ones(g) if speed is None else _as_1d("speed", speed, g)
    if g and (sp <= 0).any():
        raise ValueError("GPU speeds must be > 0")
    if policy.endswith("d"):
        if runtime is None:
            raise ValueError(f"policy {policy!r} sorts by expected runtime: pass runtime=")
        order = decreasing_order(_as_1d("runtime", runtime, p))
    else:
        order = np.arange(p)
    if p == 0 or g == 0:
        return np.full(p, -1, dtype=np.int64)
    worst = policy.startswith("w")

    # leaves in first-fit scan order: fastest GPUs first, then as given
    scan = np.argsort(-sp, kind="stable")
    size = 1 << max(int(g - 1).bit_length(), 0)
    uniform = bool((sp == sp[0]).all())  # then worst fit's key is the compute itself
    R = [_NEG] * (2 * size)  # remaining compute (feasibility)
    M = [_NEG] * (2 * size)  # remaining memory
    Q = [_NEG] * (2 * size)  # remaining CPUs of the leaf's node
    K = R if uniform else [_NEG] * (2 * size)  # worst-fit key: remaining compute x speed
    scan_l = scan.tolist()
    rc_l, rm_l, sp_l = rc.tolist(), rm.tolist(), sp.tolist()
    node_l = nodes.tolist()
    ncpu_l = ncpu.tolist()
    leaves_of: dict[int, list[int]] = {}
    for pos, gi in enumerate(scan_l):
        leaf = size + pos
        R[leaf], M[leaf], Q[leaf] = rc_l[gi], rm_l[gi], ncpu_l[node_l[gi]]
        if not uniform:
            K[leaf] = rc_l[gi] * sp_l[gi]
        leaves_of.setdefault(node_l[gi], []).append(leaf)
    # a node whose GPUs sit side by side in the tree gets its CPU maxima fixed range-wise
    span = {n: (lv[0], lv[-1]) for n, lv in leaves_of.items() if lv[-1] - lv[0] + 1 == len(lv)}
    for i in range(size - 1, 0, -1):
        a, b = 2 * i, 2 * i + 1
        R[i] = R[a] if R[a] > R[b] else R[b]
        M[i] = M[a] if M[a] > M[b] else M[b]
        Q[i] = Q[a] if Q[a] > Q[b] else Q[b]
        if not uniform:
            K[i] = K[a] if K[a] > K[b] else K[b]

    def refresh(leaf: int) -> None:
        """Recompute compute/memory/key maxima above ``leaf``; stop once nothing changes."""
        i = leaf >> 1
        if uniform:  # K is R
            while i:
                a = 2 * i
                r = R[a] if R[a] > R[a + 1] else R[a + 1]
                m = M[a] if M[a] > M[a + 1] else M[a + 1]
                if r == R[i] and m == M[i]:
                    return
                R[i] = r
                M[i] = m
                i >>= 1
            return
        while i:
            a = 2 * i
            r = R[a] if R[a] > R[a + 1] else R[a + 1]
            m = M[a] if M[a] > M[a + 1] else M[a + 1]
            k = K[a] if K[a] > K[a + 1] else K[a + 1]
            if r == R[i] and m == M[i] and k == K[i]:
                return
            R[i] = r
            M[i] = m
            K[i] = k
            i >>= 1

    def refresh_q(lo: int, hi: int) -> None:
        """Recompute the CPU maxima above leaves ``lo..hi``, level by level."""
        while lo > 1:
            lo >>= 1
            hi >>= 1
            changed = False
            for i in range(lo, hi + 1):
                a = 2 * i
                v = Q[a] if Q[a] > Q[a + 1] else Q[a + 1]
                if v != Q[i]:
                    Q[i] = v
                    changed = True
            if not changed:
                return

    def kill(leaf: int) -> None:
        """No item still to come fits this GPU: drop it from the tree."""
        R[leaf] = M[leaf] = Q[leaf] = K[leaf] = _NEG
        refresh(leaf)
        refresh_q(leaf, leaf)

    c_l, d_l, q_l = c.tolist(), d.tolist(), q.tolist()
    ce_l, de_l, qe_l = (c - _EPS).tolist(), (d - _EPS).tolist(), (q - _EPS).tolist()
    order_l = order.tolist()
    # the least any item still to come needs: a GPU below it is dead and leaves the tree
    # (minus the float tolerance, like every demand below)
    rest_c = np.minimum.accumulate(c[order][::-1] - _EPS)[::-1].tolist() + [float("inf")]
    rest_d = np.minimum.accumulate(d[order][::-1] - _EPS)[::-1].tolist() + [float("inf")]
    rest_q = np.minimum.accumulate(q[order][::-1] - _EPS)[::-1].tolist() + [float("inf")]
    qmax = max(q_l) - _EPS
    out = [-1] * p
    # demands that fitted nowhere: capacities only shrink, so anything at least as
    # large in every dimension fails too (a short list of recent ones is enough)
    failed: list[tuple[float, float, float]] = []
    for t, j in enumerate(order_l):
        cj, dj, qj = ce_l[j], de_l[j], qe_l[j]
        if R[1] < cj or M[1] < dj or Q[1] < qj:
            if R[1] < rest_c[t] or M[1] < rest_d[t] or Q[1] < rest_q[t]:
                break  # not even the smallest item still to come fits anywhere
            continue
        if failed:
            dominated = False
            for fc, fd, fq in failed:
                if fc <= cj and fd <= dj and fq <= qj:
                    dominated = True
                    break
            if dominated:
                continue
        # one greedy descent first (fastest-first child for first fit, larger key for
        # worst fit); it is exact unless it dead-ends, or, for worst fit, ends below the
        # root's key: then the pruned backtracking search settles it
        i = 1
        while i < size:
            a = 2 * i
            b = a + 1
            fa = R[a] >= cj and M[a] >= dj and Q[a] >= qj
            if worst:
                if fa and K[a] >= K[b]:
                    i = a
                elif R[b] >= cj and M[b] >= dj and Q[b] >= qj:
                    i = b
                elif fa:
                    i = a
                else:
                    i = 0
                    break
            elif fa:
                i = a
            elif R[b] >= cj and M[b] >= dj and Q[b] >= qj:
                i = b
            else:
                i = 0
                break
        found = i if i and R[i] >= cj and M[i] >= dj and Q[i] >= qj else -1
        if worst and (found < 0 or K[found] < K[1]):
            best = _NEG if found < 0 else K[found]
            stack = [1]
            while stack:
                i = stack.pop()
                ki = K[i]
                if ki <= best or R[i] < cj or M[i] < dj or Q[i] < qj:
                    continue
                if i >= size:
                    found, best = i, ki
                    continue
                a = 2 * i
                if K[a] >= K[a + 1]:
                    stack.append(a + 1)
                    stack.append(a)
                else:
                    stack.append(a)
                    stack.append(a + 1)
        elif found < 0:
            stack = [1]
            while stack:
                i = stack.pop()
                if R[i] < cj or M[i] < dj or Q[i] < qj:
                    continue
                if i >= size:
                    found = i
                    break
                stack.append(2 * i + 1)
                stack.append(2 * i)
        if found < 0:
            failed.append((cj, dj, qj))
            if len(failed) > 8:
                failed.pop(0)
            continue
        gi = scan_l[found - size]
        out[j] = gi
        R[found] -= c_l[j]
        M[found] -= d_l[j]
        if not uniform:
            K[found] = R[found] * sp_l[gi]
        mc, md, mq = rest_c[t + 1], rest_d[t + 1], rest_q[t + 1]
        if q_l[j]:
            n = node_l[gi]
            ncpu_l[n] -= q_l[j]
            left = ncpu_l[n]
            if left < mq:  # the node's cores are spent for every item to come
                for leaf in leaves_of[n]:
                    kill(leaf)
                continue
            if left < qmax:
                # the cores can bind from now on: make the tree exact for this node (while
                # a node has cores for any item, its stale higher value decides the same)
                for leaf in leaves_of[n]:
                    Q[leaf] = left
                lohi = span.get(n)
                if lohi is not None:
                    refresh_q(*lohi)
                else:
                    for leaf in leaves_of[n]:
                        refresh_q(leaf, leaf)
        if R[found] < mc or M[found] < md:
            kill(found)
        else:
            refresh(found)
    return np.asarray(out, dtype=np.int64)
