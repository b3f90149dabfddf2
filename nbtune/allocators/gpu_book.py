"""Per-GPU load and trial counts, indexed for placing widths, updated as trials move.

:func:`~nbtune.allocators.waterfill.place_widths` used to rebuild every GPU's
load from all running placements and then scan every GPU for each trial it
placed; DynamicFluid calls it once per scale-up step, on every engine
schedule call, so a decision cost O(trials × GPUs). A :class:`GpuBook` is
built once per ``place_widths`` call (a :class:`HeldBook` is kept by the
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
of the scan they replace (a load's value depends on the order shares were added,
so :class:`HeldBook` re-adds a GPU's shares in the caller's trial order
whenever one of them changes, as the rebuild did).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping

from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.tolerance import EPS as _TOL

__all__ = ["GpuBook", "HeldBook"]


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


class HeldBook(GpuBook):
    """A book of every placement in ``held`` (trial id → placement) that follows it as trials move.

    Loads are always what summing ``held``'s shares in its iteration order from
    0 gives (the rebuild :func:`~nbtune.allocators.waterfill.place_widths` does on
    each call), so :meth:`trial_placement` answers exactly what
    ``place_widths({tid: w}, cluster, held, ...)[tid]`` would. :meth:`sync`
    brings it to a new ``held`` touching only the trials that changed, which
    is what lets an allocator keep one book from one scheduling call to the next.
    ``spreadable`` are the GPUs DynamicFluid's spread step may widen: only
    single-GPU fractions on them, some below an equal split of the GPU.
    """

    def __init__(self, cluster: ClusterSpec, c: int, max_share: float | Mapping[int, float],
                 held: Mapping[int, Placement]) -> None:
        super().__init__(cluster, c, max_share)
        self.cluster, self.caps = cluster, max_share
        self.held: dict[int, Placement] = {}
        self.pos: dict[int, int] = {}  # increasing along ``held``'s order
        self._next = 0
        # per GPU: {position in held: (trial id, its shares there in placement order)}
        self.on: dict[int, dict[int, tuple[int, list[float]]]] = {g: {} for g in self.gpus}
        for tid, pl in held.items():
            self._enter(tid, pl, None)
        load, count = self.load, self.count
        for g, on in self.on.items():  # entries went in in order: sum them as they are
            for _, shares in on.values():
                for sh in shares:
                    load[g] += sh
                    count[g] += 1
        self._build()
        self.spreadable = {g for g in self.gpus if self._spreadable(g)}
        # while a checkpoint is open: each moved trial's placement and each touched GPU's
        # state as they were at the checkpoint (first touch only)
        self._saved_held: dict[int, Placement] | None = None
        self._saved_gpu: dict[int, tuple[dict[int, tuple[int, list[float]]], float, int, bool]] = {}

    # ------------------------------------------------------------ trials in and out
    def _enter(self, tid: int, pl: Placement, touched: set[int] | None) -> None:
        p = self.pos[tid] = self._next
        self._next += 1
        self.held[tid] = pl
        for g, sh in pl:
            on = self.on.get(g)
            if on is not None:
                on.setdefault(p, (tid, []))[1].append(sh)
                if touched is not None:
                    touched.add(g)

    def _leave(self, tid: int, touched: set[int]) -> None:
        p = self.pos.pop(tid)
        for g, _ in self.held.pop(tid):
            on = self.on.get(g)
            if on is not None:
                on.pop(p, None)
                touched.add(g)

    def _resum(self, g: int) -> None:
        """Re-add GPU ``g``'s shares in ``held`` order, as the rebuild did."""
        on = self.on[g]
        total, n = 0.0, 0
        for q in sorted(on):
            for sh in on[q][1]:
                total += sh
                n += 1
        self._set(g, total, n)
        if self._spreadable(g):
            self.spreadable.add(g)
        else:
            self.spreadable.discard(g)

    def _spreadable(self, g: int) -> bool:
        on = self.on[g]
        if not on:
            return False
        k = sum(len(shares) for _, shares in on.values())
        share = min(self.cap[g], 1.0) / k
        below = False
        for tid, _ in on.values():
            pl = self.held[tid]
            if len(pl) != 1 or pl[0][1] >= 1 - _TOL:
                return False
            if pl[0][1] < share - _TOL:
                below = True
        return below

    def sync(self, held: Mapping[int, Placement]) -> None:
        """Follow ``held`` (a new mapping): trials gone leave, new or changed ones join at the end.

        A trial is kept only if it holds the very same placement object and comes
        after every trial kept before it, so positions stay in ``held``'s order.
        """
        self.commit()  # a checkpoint left open (a decision that raised) ends here
        touched: set[int] = set()
        for tid in [t for t in self.held if t not in held]:
            self._leave(tid, touched)
        last = -1
        pos, mine = self.pos, self.held
        for tid, pl in held.items():
            p = pos.get(tid)
            if p is not None:
                if p > last and mine[tid] is pl:
                    last = p
                    continue
                self._leave(tid, touched)
            self._enter(tid, pl, touched)
            last = pos[tid]
        for g in touched:
            self._resum(g)

    def append(self, tid: int, pl: Placement) -> None:
        """A new trial placed at ``pl``, last in the order (the running trial set grows)."""
        self.commit()
        touched: set[int] = set()
        if tid in self.pos:
            self._leave(tid, touched)
        self._enter(tid, pl, touched)
        for g in touched:
            self._resum(g)

    def trial_placement(self, tid: int, w: float) -> Placement:
        """Where ``tid`` would go at width ``w`` with its own GPUs free for it (else where it is).

        Usually answered without touching the indexes: when each of the trial's
        GPUs is busy (so not indexed as idle) and can hold a whole share, its
        GPUs' entries cannot change the answer. A GPU it could stay on is found
        by the first check, from its loads less its shares; an index entry of
        one it could not stay on fails every test the search makes, before and
        after release alike (loads and counts only drop on release); and the
        GPUs freed for a whole width are exactly the ones ``own`` lists.
        """
        cur = self.held[tid]
        load, count, cap = self.load, self.count, self.cap
        if self._indexed and len({g for g, _ in cur}) == len(cur) and all(
                g in load and load[g] > _TOL and cap[g] >= 1.0 for g, _ in cur):
            if w < 1 - _TOL:
                for g, sh in cur:  # stay where it is if it can
                    if count[g] - 1 < self.c and load[g] - sh + w <= cap[g] + _TOL:
                        return ((g, w),)
                pl = self._fraction(w, ())
            else:
                k = int(math.floor(w + _TOL))
                if k > len(cur) + self._n_free:
                    return cur  # its own GPUs and every idle one are too few: _whole says None
                own = [g for g, sh in cur if load[g] - sh + 1.0 <= cap[g] + _TOL]
                pl = self._whole(k, cur, own)
            return cur if pl is None else pl
        saved = [(g, self.load[g], self.count[g]) for g, _ in cur if g in self.load]
        self.remove(cur)
        pl = self.place(w, cur)
        for g, ld, n in reversed(saved):
            self._set(g, ld, n)
        return cur if pl is None else pl

    def checkpoint(self) -> None:
        """Start remembering what :meth:`move` changes, for one :meth:`rollback` (or :meth:`commit`).

        DynamicFluid tries scale-downs and undoes them when the scale-ups they were
        for gain nothing (most of the time, on a full cluster); putting each
        touched GPU back as it was costs far less than moving every trial back.
        Only :meth:`move` may change the book while a checkpoint is open.
        """
        self._saved_held, self._saved_gpu = {}, {}

    def commit(self) -> None:
        """Keep every move since :meth:`checkpoint`."""
        self._saved_held, self._saved_gpu = None, {}

    def rollback(self) -> None:
        """Put the book back as it was at :meth:`checkpoint` (what moving each trial back gives).

        Loads come back as the very floats they were (each is the sum of its GPU's
        shares in ``held`` order, so moving back would re-add the same terms in the
        same order); the indexes follow through :meth:`_set`.
        """
        saved = self._saved_held
        if saved is None:
            raise RuntimeError("rollback without a checkpoint")
        self.held.update(saved)
        for g, (on, load, count, spread) in self._saved_gpu.items():
            self.on[g] = on
            self._set(g, load, count)
            if spread:
                self.spreadable.add(g)
            else:
                self.spreadable.discard(g)
        self.commit()

    def move(self, tid: int, pl: Placement) -> None:
        """``held[tid] = pl``: the trial keeps its place in the order; its GPUs are re-summed."""
        p = self.pos[tid]
        if self._saved_held is not None:
            self._remember(tid, pl)
        touched = set()
        for g, _ in self.held[tid]:
            on = self.on.get(g)
            if on is not None:
                on.pop(p, None)
                touched.add(g)
        self.held[tid] = pl
        for g, sh in pl:
            on = self.on.get(g)
            if on is not None:
                on.setdefault(p, (tid, []))[1].append(sh)
                touched.add(g)
        for g in touched:
            self._resum(g)

    def _remember(self, tid: int, pl: Placement) -> None:
        """Save what moving ``tid`` to ``pl`` changes, unless saved since the checkpoint."""
        saved, gpus = self._saved_held, self._saved_gpu
        assert saved is not None
        if tid not in saved:
            saved[tid] = self.held[tid]
        for g, _ in (*self.held[tid], *pl):
            if g not in gpus and g in self.on:
                # a shallow copy is enough: an entry's share list is only filled when made
                gpus[g] = (dict(self.on[g]), self.load[g], self.count[g], g in self.spreadable)
