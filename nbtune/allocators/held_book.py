"""The placement book the Fluid allocators keep from one decision to the next.

A :class:`HeldBook` is a :class:`~nbtune.allocators.gpu_book.GpuBook` of every
running trial's placement that follows them as they move, with a checkpoint
that DynamicFluid opens before trying scale-downs and rolls back when the
scale-ups they were for gain nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from itertools import islice, repeat
from operator import is_
from typing import Any

import numpy as np

from nbtune.allocators.gpu_book import GpuBook
from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.tolerance import EPS as _TOL

__all__ = ["HeldBook"]


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
        # per spreadable GPU, as spread_groups() worked it out: forgotten when its trials change
        self._groups: dict[int, tuple[int, list[int]]] = {}
        # the engine's change log this book last followed (its trial_changes and the mark it
        # gave then), and the trials the book itself placed or moved since
        self._source: Any = None
        self._mark = -1
        self._mine: set[int] = set()
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
        self._mine.add(tid)
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

    def _sum(self, g: int, skip: int | None = None) -> tuple[float, int]:
        """GPU ``g``'s shares added in ``held`` order, as a rebuild from scratch would (the
        trial at position ``skip`` left out): ``(load, count)``."""
        on = self.on[g]
        total, n = 0.0, 0
        for q in sorted(on):
            if q != skip:
                for sh in on[q][1]:
                    total += sh
                    n += 1
        return total, n

    def _resum(self, g: int) -> None:
        """Re-add GPU ``g``'s shares in ``held`` order, as a rebuild from scratch would."""
        self._groups.pop(g, None)
        self._set(g, *self._sum(g))
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

    def spread_groups(self) -> list[tuple[int, list[int]]]:
        """Each :attr:`spreadable` GPU with its trials in ``held`` order (a trial once per share
        it has there), the GPUs in the order they first appear in ``held``.

        Worked out again only for the GPUs whose trials changed since the last call
        (DynamicFluid's spread step asks on every decision).
        """
        cache, on_gpu = self._groups, self.on
        out = []
        for g in self.spreadable:
            hit = cache.get(g)
            if hit is None:
                on = on_gpu[g]
                hit = cache[g] = (min(on), [on[p][0] for p in sorted(on) for _ in on[p][1]])
            out.append((hit[0], g, hit[1]))
        out.sort(key=lambda x: (x[0], x[1]))
        return [(g, tids) for _, g, tids in out]

    def sync(self, held: Mapping[int, Placement], changes: Any = None,
             extra: Mapping[int, Placement] | None = None) -> None:
        """Follow ``held`` (a new mapping), then ``extra`` after it (trials not in ``held``):
        trials gone leave, new or changed ones join at the end.

        A trial is kept only if it holds the very same placement object and comes
        after every trial kept before it, so positions stay in ``held``'s order.
        ``changes``, the engine's ``trial_changes`` where ``held`` is its running
        map, saves the look at every trial: only the trials its log names (and those
        this book placed or moved itself, ``extra`` among them) can differ from the
        last sync to it.
        """
        self.commit()  # a checkpoint left open (a decision that raised) ends here
        extra = extra or {}
        if any(tid in held for tid in extra):  # not a tail: the merged map, looked at in full
            held, extra, changes = {**held, **extra}, {}, None
        log = None
        if changes is not None:
            mark, log = changes(self._mark if self._source == changes else -1, held)
            self._source, self._mark = (changes if mark >= 0 else None), mark
        else:
            self._source, self._mark = None, -1
        if log is None or not self._follow(held, self._mine.union(log), extra):
            self._full_sync({**held, **extra} if extra else held)
        self._mine = set(extra)

    def _follow(self, held: Mapping[int, Placement], named: set[int],
                extra: Mapping[int, Placement]) -> bool:
        """:meth:`sync` to ``held`` and ``extra`` when only the trials in ``named`` can differ
        from the book (their order among the others is the book's): False, with nothing
        done, when that does not hold of what it sees (the caller then looks at every trial).

        The trials of ``held`` past its last trial not named are all named; any other named
        trial of ``held`` has not moved in the order (a trial placed anew goes last), so is
        kept when it holds the same placement object. The full sync keeps the same prefix
        and walks the same tail (``extra`` after it).
        """
        pos, mine = self.pos, self.held
        tail: list[int] = []
        anchor = None
        for tid in reversed(held):  # (a mapping proxy of a dict walks back in C)
            if tid not in named:
                anchor = tid
                break
            tail.append(tid)
        if anchor is not None and (anchor not in pos or mine[anchor] is not held[anchor]):
            return False
        tail.reverse()
        tail_set = set(tail)
        gone = []
        for tid in named:
            if tid in held:
                if tid not in tail_set and (tid not in pos or mine[tid] is not held[tid]):
                    return False
            elif tid in pos and tid not in extra:
                gone.append(tid)
        tail.extend(extra)
        entering = sum(1 for tid in tail if tid not in pos)
        if len(pos) - len(gone) + entering != len(held) + len(extra):
            return False  # a trial the log does not name came or went
        touched: set[int] = set()
        for tid in gone:
            self._leave(tid, touched)
        self._walk(((tid, held[tid] if tid in tail_set else extra[tid]) for tid in tail),
                   -1 if anchor is None else pos[anchor], touched)
        return True

    def _full_sync(self, held: Mapping[int, Placement]) -> None:
        touched: set[int] = set()
        for tid in self.held.keys() - held.keys():  # (the order they leave in changes nothing)
            self._leave(tid, touched)
        last = -1
        pos, mine = self.pos, self.held
        # once a trial joins at the end, every trial after it in ``held`` is behind it and
        # joins again too: the kept trials are the longest prefix of ``held`` whose trials
        # are here with the same placement object at increasing positions, found by C loops
        ps = np.fromiter(map(pos.get, held, repeat(-1)), dtype=np.int64, count=len(held))
        same = np.fromiter(map(is_, map(mine.get, held), held.values()), dtype=bool,
                           count=len(held))
        keep = same & (ps >= 0)
        keep[1:] &= ps[1:] > ps[:-1]
        k = int(np.argmin(keep)) if not keep.all() else len(held)
        if k:
            last = int(ps[k - 1])
        self._walk(islice(held.items(), k, None), last, touched)

    def _walk(self, items: Iterable[tuple[int, Placement]], last: int, touched: set[int]) -> None:
        """The tail of a sync: each trial kept where it is if it holds the same placement
        object after position ``last``, else (re-)entered at the end; then the GPUs touched
        re-summed."""
        pos, mine = self.pos, self.held
        for tid, pl in items:
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

    def pooled_placement(self, tid: int, w: float) -> Placement:
        """Where ``tid`` goes at width ``w`` to free GPUs for others: a fraction joins the
        fullest shared GPU with room rather than staying alone on its own (which frees
        nothing); else :meth:`trial_placement`."""
        if w >= 1 - _TOL:
            return self.trial_placement(tid, w)
        cur = self.held[tid]
        saved = [(g, self.load[g], self.count[g]) for g, _ in cur if g in self.load]
        p = self.pos[tid]
        for g, _ in cur:  # its GPUs as a rebuild without it sums them (no subtraction's drift)
            if g in self.on:
                self._set(g, *self._sum(g, skip=p))
        pl = self.place(w, ())
        fresh = pl is None or self.load[pl[0][0]] <= _TOL
        for g, ld, n in reversed(saved):
            self._set(g, ld, n)
        return self.trial_placement(tid, w) if fresh else pl

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
            self._groups.pop(g, None)
            self._set(g, load, count)
            if spread:
                self.spreadable.add(g)
            else:
                self.spreadable.discard(g)
        self.commit()

    def move(self, tid: int, pl: Placement) -> None:
        """``held[tid] = pl``: the trial keeps its place in the order; its GPUs are re-summed."""
        p = self.pos[tid]
        self._mine.add(tid)
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
