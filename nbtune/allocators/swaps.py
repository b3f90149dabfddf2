"""A swap pass after a knapsack policy: trade a placed item for a bigger one that now fits.

HyperSack's greedy policies leave each GPU a sliver of compute no remaining
job fits into (a few percent on the paper's SP3, Table III). The MIP fills
it by choosing *which* jobs run together; a cheap local search gets most of
the way: on each GPU, replace a placed item ``i`` by an unplaced ``j`` with
``c_i < c_j ≤ c_i + slack`` when memory and the node's cores allow, keeping
the best gain, until nothing improves; then first-fit whatever was swapped
out into slack elsewhere. Occupancy never falls and every constraint holds.

The price is order: a swapped-in item jumps ahead of the policy's priority
(e.g. a longer job under FFD/WFD), which is why this is an opt-in
(``KnapsackAllocator(refine=True)``) and not part of the paper's policies.
"""

from __future__ import annotations

import bisect

import numpy as np
from numpy.typing import ArrayLike

from nbtune.allocators.mkp import pack
from nbtune.core.tolerance import EPS as _EPS

__all__ = ["improve_by_swaps"]


def improve_by_swaps(
    where: ArrayLike,
    compute: ArrayLike,
    memory: ArrayLike,
    cpus: ArrayLike,
    cap_compute: ArrayLike,
    cap_memory: ArrayLike,
    gpu_node: ArrayLike,
    node_cpus: ArrayLike,
    *,
    scan: int = 16,
    max_rounds: int = 8,
    min_gain: float = 1e-3,
) -> np.ndarray:
    """Return a copy of ``where`` (item -> GPU or -1, as :func:`pack` gives) with more compute placed.

    Capacities are the same "left before placing" arrays :func:`pack` took.
    ``scan`` bounds how many candidates below the best-fitting size are
    examined per placed item when memory or CPUs rule the biggest out;
    ``max_rounds`` bounds the swaps per GPU, and a GPU with less than
    ``min_gain`` of compute to gain is left alone.
    """
    w = np.array(where, dtype=np.int64, copy=True)
    c = np.asarray(compute, dtype=float)
    d = np.asarray(memory, dtype=float)
    q = np.asarray(cpus, dtype=float)
    node = np.asarray(gpu_node, dtype=np.int64)
    g = len(cap_compute)
    ok = w >= 0
    sc = (np.asarray(cap_compute, float) - np.bincount(w[ok], c[ok], g)).tolist()
    sm = (np.asarray(cap_memory, float) - np.bincount(w[ok], d[ok], g)).tolist()
    sq = (np.asarray(node_cpus, float)
          - np.bincount(node[w[ok]], q[ok], len(node_cpus))).tolist()
    if not min_gain > 0:
        raise ValueError(f"min_gain must be > 0, got {min_gain}")
    c_l, d_l, q_l, node_l = c.tolist(), d.tolist(), q.tolist(), node.tolist()
    on: list[list[int]] = [[] for _ in range(g)]
    for j, gi in enumerate(w.tolist()):
        if gi >= 0:
            on[gi].append(j)
    unplaced = np.flatnonzero(~ok)
    if not len(unplaced):
        return w
    free = unplaced[np.argsort(c[unplaced], kind="stable")].tolist()  # by size, then index
    free_c = [c_l[j] for j in free]
    taken = set()  # swapped in: skipped lazily instead of deleted from the sorted list
    swapped_out: list[int] = []
    smallest = free_c[0]
    for gi in range(g):
        n = node_l[gi]
        for _ in range(max_rounds):
            slack = sc[gi]
            if slack < min_gain:
                break
            best_gain, best = min_gain, None
            for i in on[gi]:
                ci = c_l[i]
                if ci + slack < smallest:
                    continue
                k = bisect.bisect_right(free_c, ci + slack + _EPS) - 1
                seen = 0
                while k >= 0 and seen < scan:
                    j = free[k]
                    k -= 1
                    if j in taken:
                        continue
                    seen += 1
                    gain = c_l[j] - ci
                    if gain <= best_gain:
                        break  # sorted by size: every later candidate gains less
                    if d_l[j] <= sm[gi] + d_l[i] + _EPS and q_l[j] <= sq[n] + q_l[i] + _EPS:
                        best_gain, best = gain, (i, j)
                        break
            if best is None:
                break
            i, j = best
            taken.add(j)
            swapped_out.append(i)
            on[gi].remove(i)
            on[gi].append(j)
            w[i], w[j] = -1, gi
            sc[gi] -= c_l[j] - c_l[i]
            sm[gi] -= d_l[j] - d_l[i]
            sq[n] -= q_l[j] - q_l[i]
    # what was swapped out (or never placed) may fit in slack elsewhere: first fit, smallest first
    rest = np.asarray(swapped_out + [j for j in free if j not in taken], dtype=np.int64)
    rest = rest[np.argsort(c[rest], kind="stable")]
    rest = rest[c[rest] <= max(sc) + _EPS]  # the rest fit nowhere: skip the packing call
    if not len(rest):
        return w
    extra = pack(c[rest], d[rest], q[rest], sc, sm, node, sq, policy="ff")
    placed = extra >= 0
    w[rest[placed]] = extra[placed]
    return w
