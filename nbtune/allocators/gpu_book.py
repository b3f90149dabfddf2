"""Per-GPU load and trial counts, indexed for placing widths, updated as trials move.

Rebuilding every GPU's load from all running placements and then scanning
every GPU for each trial placed would cost :func:`~nbtune.allocators.waterfill.place_widths`
O(trials × GPUs) a decision, and DynamicFluid calls it once per scale-up step,
on every engine schedule call. A :class:`GpuBook` is
built once per ``place_widths`` call (a :class:`~nbtune.allocators.held_book.HeldBook` is kept by the
Fluid allocators from one decision to the next) and kept current as trials
are placed, with three indexes that answer Fluid's placement questions
without a scan:

* idle GPUs (load ≤ tolerance), sorted by id: the lowest fresh GPU for a fraction;
* per node, the idle GPUs a whole worker may take (capacity ≥ 1), and the
  nodes bucketed by how many they have: best fit ("the node with the fewest
  idle GPUs that still has enough") and "most idle GPUs first" read the buckets;
* per distinct capacity, shared GPUs (load > tolerance, fewer than ``c``
  trials) sorted by (load, −id): "the fullest GPU that still has room" is
  a binary search, since ``load + w ≤ cap`` holds for a prefix of that order
  (float addition is monotone).

The rules, the tie-breaks and the float arithmetic on loads are exactly those
of a plain scan over every GPU (a load's value depends on the order shares were
added, so ``HeldBook`` re-adds a GPU's shares in the caller's trial order
whenever one of them changes, as a rebuild from scratch would).

A book is derived from the engine's ledger, not a second one: it starts from
the placements the :class:`~nbtune.allocators.allocator_protocol.LedgerView` lists as
``running`` and then holds the what-if placements of one decision, which the
engine applies to its ledger only if the allocator returns them. It re-adds
shares instead of copying the view's ``gpu_load``: the ledger adds a share on
place and subtracts it on release, which on shares such as 1/3 differs from the
re-added sum in the last bit, and the "fullest GPU" order compares loads exactly.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping

from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.tolerance import EPS as _TOL

__all__ = ["GpuBook"]


def _cap(max_share: float | Mapping[int, float], gpu: int) -> float:
    return float(max_share.get(gpu, 1.0)) if isinstance(max_share, Mapping) else float(max_share)


class GpuBook:
    """Load and trial count of each GPU of ``cluster`` under packing limit ``c`` and ``max_share``."""

    def __init__(self, cluster: ClusterSpec, c: int,
                 max_share: float | Mapping[int, float] = 1.0) -> None:
        self.c = c
        self.gpus = cluster.by_id()
        self.node = {g: gpu.node for g, gpu in self.gpus.items()}
        self.cap = {g: _cap(max_share, g) for g in self.gpus}
        self.load: dict[int, float] = dict.fromkeys(self.gpus, 0.0)
        self.count: dict[int, int] = dict.fromkeys(self.gpus, 0)
        self._indexed = False

    # ------------------------------------------------------------ indexes
    def _build(self) -> None:
        """Index every GPU once the starting loads are in (cheaper than one insert per share)."""
        load, count, cap = self.load, self.count, self.cap
        self._idle = sorted(g for g in self.gpus if load[g] <= _TOL)
        self._node_free: dict[str, list[int]] = {}
        for g in self._idle:
            if cap[g] + _TOL >= 1.0:
                self._node_free.setdefault(self.node[g], []).append(g)
        self._n_free = sum(len(v) for v in self._node_free.values())
        self._bucket: dict[int, list[str]] = {}
        for n, gs in self._node_free.items():
            self._bucket.setdefault(len(gs), []).append(n)
        for names in self._bucket.values():
            names.sort()
        self._shared: dict[float, list[tuple[float, int]]] = {}
        for g in self.gpus:
            if load[g] > _TOL and count[g] < self.c:
                self._shared.setdefault(cap[g], []).append((load[g], -g))
        for keys in self._shared.values():
            keys.sort()
        self._indexed = True

    def _move_node(self, n: str, old: int, new: int) -> None:
        if old:
            names = self._bucket[old]
            del names[bisect.bisect_left(names, n)]
        if new:
            bisect.insort(self._bucket.setdefault(new, []), n)

    def _unindex(self, g: int) -> None:
        load = self.load[g]
        if load <= _TOL:
            del self._idle[bisect.bisect_left(self._idle, g)]
            if self.cap[g] + _TOL >= 1.0:
                n = self.node[g]
                gs = self._node_free[n]
                del gs[bisect.bisect_left(gs, g)]
                self._n_free -= 1
                self._move_node(n, len(gs) + 1, len(gs))
        elif self.count[g] < self.c:
            keys = self._shared[self.cap[g]]
            del keys[bisect.bisect_left(keys, (load, -g))]

    def _index(self, g: int) -> None:
        load = self.load[g]
        if load <= _TOL:
            bisect.insort(self._idle, g)
            if self.cap[g] + _TOL >= 1.0:
                n = self.node[g]
                gs = self._node_free.setdefault(n, [])
                bisect.insort(gs, g)
                self._n_free += 1
                self._move_node(n, len(gs) - 1, len(gs))
        elif self.count[g] < self.c:
            bisect.insort(self._shared.setdefault(self.cap[g], []), (load, -g))

    def _set(self, g: int, load: float, count: int) -> None:
        if not self._indexed:
            self.load[g], self.count[g] = load, count
            return
        if load == self.load[g] and count == self.count[g]:
            return
        self._unindex(g)
        self.load[g], self.count[g] = load, count
        self._index(g)

    # ------------------------------------------------------------ updates
    def count_running(self, running: Mapping[int, Placement]) -> None:
        """Start from every placement held now (GPUs no longer in the cluster are skipped)."""
        load, count = self.load, self.count
        for pl in running.values():
            for g, s in pl:
                if g in load:
                    load[g] += s
                    count[g] += 1
        self._build()

    def add(self, pl: Placement) -> None:
        """Count ``pl``'s shares (every GPU in it must be in the cluster)."""
        for g, s in pl:
            self._set(g, self.load[g] + s, self.count[g] + 1)

    def remove(self, pl: Placement) -> None:
        """Take ``pl``'s shares off again (GPUs no longer in the cluster are skipped)."""
        for g, s in pl:
            if g in self.load:
                self._set(g, self.load[g] - s, self.count[g] - 1)

    # ------------------------------------------------------------ queries
    @property
    def n_idle(self) -> int:
        if not self._indexed:
            self._build()
        return len(self._idle)

    def place(self, w: float, cur: Placement = ()) -> Placement | None:
        """Where a trial of width ``w`` goes (``cur``: the GPUs it holds, already released)."""
        if not self._indexed:
            self._build()
        if w < 1 - _TOL:
            return self._fraction(w, cur)
        return self._whole(int(math.floor(w + _TOL)), cur)

    def shrunk(self, w: float) -> Placement | None:
        """The most a new trial that does not fit at ``w`` can get: fewer GPUs, else ``1/c``."""
        k = min(int(math.floor(w + _TOL)), self.n_idle)
        while k >= 1:
            pl = self._whole(k, ())
            if pl is not None:
                return pl
            k -= 1
        return self._fraction(1.0 / self.c, ())

    def _whole(self, k: int, cur: Placement, own: list[int] | None = None) -> Placement | None:
        """``k`` idle GPUs on the fewest nodes: own first, best-fit node, else most idle first.

        ``own``: the trial's GPUs that are whole for it, when the caller worked them out.
        """
        load, cap = self.load, self.cap
        if own is None:
            own = [g for g, _ in cur if g in self.gpus and load[g] + 1.0 <= cap[g] + _TOL]
        if len(own) >= k:
            return tuple((g, 1.0) for g in own[:k])
        own_set = set(own)
        # idle whole-capable GPUs of each node that are not the trial's own
        taken: dict[str, int] = {}
        for g in own_set:
            if load[g] <= _TOL and cap[g] + _TOL >= 1.0:
                taken[self.node[g]] = taken.get(self.node[g], 0) + 1
        if len(own) + self._n_free - sum(taken.values()) < k:
            return None
        need = k - len(own)
        node_free = self._node_free
        if not own:
            for cnt in range(need, max(self._bucket, default=0) + 1):
                names = self._bucket.get(cnt)
                if names:  # best fit: the fewest idle GPUs that is still enough, then the name
                    return tuple((g, 1.0) for g in node_free[names[0]][:need])
        home = {self.node[g] for g in own}
        first = sorted((n for n in home if len(node_free.get(n, ())) > taken.get(n, 0)),
                       key=lambda n: (-(len(node_free[n]) - taken.get(n, 0)), n))
        chosen = list(own)
        for n in first:
            for g in node_free[n]:
                if len(chosen) == k:
                    break
                if g not in own_set:
                    chosen.append(g)
        for cnt in range(max(self._bucket, default=0), 0, -1):
            if len(chosen) == k:
                break
            for n in self._bucket.get(cnt, ()):
                if n in home:
                    continue
                for g in node_free[n]:
                    if len(chosen) == k:
                        break
                    chosen.append(g)
                if len(chosen) == k:
                    break
        return tuple((g, 1.0) for g in chosen)

    def _fraction(self, w: float, cur: Placement) -> Placement | None:
        """One GPU at share ``w``: where it is, else the fullest shared GPU with room, else fresh."""
        load, count, cap, c = self.load, self.count, self.cap, self.c
        for g, _ in cur:  # stay where it is if it can
            if g in self.gpus and count[g] < c and load[g] + w <= cap[g] + _TOL:
                return ((g, w),)
        best: tuple[float, int] | None = None
        for capv, keys in self._shared.items():
            lo, hi, lim = 0, len(keys), capv + _TOL
            while lo < hi:  # the last key whose load still takes w (a prefix of the order)
                mid = (lo + hi) // 2
                if keys[mid][0] + w <= lim:
                    lo = mid + 1
                else:
                    hi = mid
            if lo and (best is None or keys[lo - 1] > best):
                best = keys[lo - 1]
        if best is not None:
            return ((-best[1], w),)
        for g in self._idle:
            if count[g] < c and load[g] + w <= cap[g] + _TOL:
                return ((g, w),)
        return None
