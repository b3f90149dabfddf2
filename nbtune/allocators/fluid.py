"""Fluid's allocators (MLSys '21 §4): StaticFluid for new trials, DynamicFluid for freed GPUs.

* :class:`StaticFluidAllocator` (registry ``"waterfill-static"``): new trials
  are water-filled onto the idle GPUs (Alg. 1): width ∝ remaining work,
  fractions packed up to ``c`` per GPU, wide trials on up to ``d`` GPUs.
  Running trials are never touched.
* :class:`DynamicFluidAllocator` (registry ``"waterfill"``): the same for new
  trials, and whenever GPUs free up with nothing left to launch (a trial
  ends, stragglers at a stage barrier, the cluster grows) the plan w' is
  recomputed over everything running and a trial is resized only where it
  pays after the resize cost ε (Alg. 2): up if h(w') + ε < h(w), down if
  w'(h(w') + ε) < w·h(w). Fluid the system is both together, so ``"waterfill"``
  names this one.

Estimates: h_i1 is remaining budget × seconds per unit on one GPU. Seconds
per unit come from the engine's measurement (``view.unit_time``, converted
to width 1 through the overhead model), else a profile in the
``ProfileStore`` the runtime's profiler put in ``view.hints["profiles"]``,
else a workload prior in ``view.hints["workload"]`` (unit tests only), else a
fit of the times measured so far (below), else the mean of the other live
trials, else 1. Nothing here knows which runtime runs it. Deviations from the
paper, each for a stated reason: spare GPUs the floor leaves are handed out
(:func:`~nbtune.allocators.waterfill.fill_leftover`);
all live trials form one pool (asynchronous algorithms submit one-trial
groups whose makespans are not independent); a scale-down is applied only
when a scale-up in the same plan needs what it frees (alone it would pay ε
to free a GPU nobody takes), and a trial scaled down to a fraction for that
joins the fullest shared GPU with room rather than staying alone on its own
(which would free nothing); fractions whose neighbours left widen to share
their GPU (1/k each), under the same ε test, instead of idling the rest of it.

A trial whose model nothing has measured yet is placed on a guess: its time
per unit fitted on the times measured so far against the config's sizes
(:class:`~nbtune.allocators.unit_cost.UnitCostFit`), else the others' mean.
Its first budget unit, run where it was placed, is its profile (Fluid
§5 profiles a few iterations of the current trials on real hardware): when
the last trial launched with it has measured itself, the engine asks
DynamicFluid again (:meth:`DynamicFluidAllocator.on_measured`) and the
split is redone from the measurements, each resize under Alg. 2's ε test.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from itertools import compress, filterfalse, repeat
from operator import attrgetter
from typing import Any

import numpy as np

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator, SchedulingView
from nbtune.allocators.fluid_estimator import FluidEstimator, with_hints
from nbtune.allocators.held_book import HeldBook
from nbtune.allocators.profiling import MeasuredLimits, Profile, ProfileLookup, ProfileStore
from nbtune.allocators.running_h1 import RunningH1
from nbtune.allocators.unit_cost import UnitCostFit
from nbtune.allocators.waterfill import (
    fill_in_order,
    fill_leftover,
    fluid_widths,
    place_widths,
    widths_in_order,
)
from nbtune.core.resources import Placement, width
from nbtune.core.tolerance import EPS as _TOL

__all__ = ["StaticFluidAllocator", "DynamicFluidAllocator", "FluidEstimator"]

_TARGET = attrgetter("target_budget")


class StaticFluidAllocator(BaseAllocator):
    """StaticFluid (Alg. 1): water-fill pending trials onto the idle GPUs; never resize.

    ``c``: most trials packed on one GPU; ``d``: most GPUs per trial (both
    from profiling, :mod:`nbtune.allocators.profiling`). ``alpha``/``beta``
    override the overhead model for every trial (else profile or workload
    prior). ``concurrency`` caps live trials (Fluid §6.2.2 runs ASHA at a fixed
    concurrency regardless of GPUs); by default every free packing slot
    (``c`` per idle GPU) may start a trial. ``fill`` hands out the GPUs
    Alg. 1's floor leaves spare. ``profiles`` is a ProfileStore used when the
    runtime puts none in the hints; ``signature_keys`` name the config entries
    that identify a model for it. ``measured`` (default) lowers c and d to
    what the runtime's profiler measured; False keeps them as given.
    """

    name = "waterfill-static"

    def __init__(
        self,
        *,
        c: int = 4,
        d: int = 4,
        alpha: float | None = None,
        beta: float | None = None,
        concurrency: int | None = None,
        fill: bool = True,
        resize_overhead: float = 0.0,
        profiles: ProfileStore | None = None,
        signature_keys: Iterable[str] | None = None,
        measured: bool = True,
    ) -> None:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise ValueError(f"c (trials per GPU) must be an integer >= 1, got {c!r}")
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"d (GPUs per trial) must be an integer >= 1, got {d!r}")
        if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
            raise ValueError(f"concurrency must be an integer >= 1 or None, got {concurrency!r}")
        if not (resize_overhead >= 0 and math.isfinite(resize_overhead)):
            raise ValueError(f"resize_overhead (epsilon, seconds) must be >= 0, got "
                             f"{resize_overhead!r}")
        for nm, v in (("alpha", alpha), ("beta", beta)):
            if v is not None and not v >= 1:
                raise ValueError(f"{nm} must be >= 1 (1 = no overhead), got {v!r}")
        self.c, self.d = c, d
        self.max_c, self.max_d = c, d  # what was asked for; measurements may only lower it
        self._measured = MeasuredLimits(signature_keys) if measured else None
        self._last: tuple[int | None, int | None] = (None, None)  # c, d last measured
        self.alpha, self.beta = alpha, beta
        self.concurrency = concurrency
        self.fill = fill
        self.resize_overhead = float(resize_overhead)
        self.profiles = profiles
        self.signature_keys = None if signature_keys is None else list(signature_keys)
        self._profile_lookup = ProfileLookup(self.signature_keys)  # the estimators' memory
        self._unit_costs = UnitCostFit(self.signature_keys)  # new trials' guessed times
        # trial -> the trials launched with it on a guessed h_i1, not measured yet (DynamicFluid
        # re-plans when the last of them has measured itself)
        self._unmeasured: dict[int, set[int]] = {}
        self._running_h1: RunningH1 | None = None  # DynamicFluid's plan: h_i1 kept across calls
        self._kept = False  # the last plan was made from it
        # the last plan's widths (the mapping plan returned, as an array, and what each
        # trial held), while it was made on the table's arrays
        self._planned: tuple[dict[int, float], np.ndarray, np.ndarray] | None = None
        self._gpu_ids: tuple[Any, list[int]] | None = None  # a cluster and its GPU ids in order
        self._kept_caps: tuple[Any, dict[int, float]] | None = None  # a cluster, its caps

    @classmethod
    def from_profile(cls, profile: Profile, **kwargs: Any) -> StaticFluidAllocator:
        """An allocator whose c, d, α, β come from a profiling run."""
        kwargs.setdefault("c", profile.c)
        kwargs.setdefault("d", profile.d)
        kwargs.setdefault("alpha", profile.alpha)
        kwargs.setdefault("beta", profile.beta)
        return cls(**kwargs)

    # ------------------------------------------------------------ helpers
    def adopt_measured(self, view: SchedulingView) -> None:
        """c, d lowered to what the runtime's profiler measured (Fluid §4.2.2), never raised.

        On CPU workers packing two trials on one core gains nothing, so the
        measured c is 1 and water-filling stops packing there.
        """
        if self._measured is None:
            return
        mc, md = self._measured(view)
        if mc is None and md is None:
            return  # nothing measured for the trials in play (or none in play): keep what was
        self._last = (mc, md)
        self._settle()

    def limit(self, c: int | None = None, d: int | None = None) -> None:
        """New caps for c and d, under which measurements still lower them (``auto``: c by a
        model's measured GPU room, d = 1 until scaling is measured)."""
        self.max_c = self.max_c if c is None else max(1, int(c))
        self.max_d = self.max_d if d is None else max(1, int(d))
        self._settle()

    def _settle(self) -> None:
        mc, md = self._last
        c = self.max_c if mc is None else max(1, min(self.max_c, mc))
        d = self.max_d if md is None else max(1, min(self.max_d, md))
        if (c, d) != (self.c, self.d):
            self.c, self.d = c, d
            self._held_book = None  # its per-GPU slots were counted for the old c

    def estimator(self, view: SchedulingView) -> FluidEstimator:
        if self.profiles is not None and "profiles" not in view.hints:
            view = with_hints(view, {**view.hints, "profiles": self.profiles})
        return FluidEstimator(view, alpha=self.alpha, beta=self.beta,
                              signature_keys=self.signature_keys, lookup=self._profile_lookup,
                              costs=self._unit_costs)

    def _caps(self, view: SchedulingView) -> dict[int, float]:
        """Each GPU's most share (read, never changed: the same mapping is handed out again
        for the same cluster where the cap is the base class's, which reads no view)."""
        cluster = view.cluster
        if type(self).max_share is BaseAllocator.max_share:
            kept = self._kept_caps
            if kept is not None and kept[0] is cluster:
                return kept[1]
            ids = [g.gpu_id for g in cluster.gpus]
            caps = dict.fromkeys(ids, BaseAllocator.max_share(self, view, ids[0]) if ids else 1.0)
            self._kept_caps = (cluster, caps)
            return caps
        return {g.gpu_id: self.max_share(view, g.gpu_id) for g in cluster.gpus}

    def _book(self, view: SchedulingView, held: Mapping[int, Placement],
              extra: Mapping[int, Placement] | None = None) -> HeldBook:
        """The allocator's :class:`HeldBook`, brought up to ``held`` then ``extra`` after it
        (rebuilt if the cluster changed).

        Kept from one call to the next so a decision costs what changed since
        the last one, not a rebuild of every GPU's load (the book follows any
        ``held`` exactly; keeping it only saves work). It makes the allocator
        stateful: one instance must not decide for two engines at the same time.
        """
        caps = self._caps(view)
        book = getattr(self, "_held_book", None)
        if book is None or book.cluster is not view.cluster or (book.caps is not caps
                                                                 and book.caps != caps):
            book = self._held_book = HeldBook(view.cluster, self.c, caps,
                                              {**held, **extra} if extra else held)
        else:  # the engine's change log, where held is its running map, spares a full look
            book.sync(held, getattr(view, "trial_changes", None) if held is view.running
                      else None, extra)
        return book

    def _limit(self, view: SchedulingView) -> int | None:
        caps = [x for x in (view.max_concurrent, self.concurrency) if x is not None]
        return min(caps) if caps else None

    # ------------------------------------------------------------ protocol
    def capacity(self, view: SchedulingView) -> int:
        """Free packing slots: ``c`` per idle GPU plus room left on GPUs shared by fractions.

        This is how many trials the algorithm is asked for: asynchronous
        algorithms (ASHA) then run up to ``c`` times as many trials as GPUs,
        which is where packing's throughput comes from.
        """
        self.adopt_measured(view)
        count = view.gpu_count  # trials on each GPU of the cluster (the engine's ledger)
        load_of = view.gpu_load.get
        c, frac = self.c, 1.0 / self.c
        fixed = type(self).max_share is BaseAllocator.max_share
        cap = BaseAllocator.max_share(self, view, 0) + _TOL
        slots = 0
        if fixed:  # the loop below as array operations (whole numbers: the same sums)
            cluster = view.cluster
            ids = self._gpu_ids
            if ids is None or ids[0] is not cluster:
                ids = self._gpu_ids = (cluster, [g.gpu_id for g in cluster.gpus])
            gids = ids[1]
            loads = np.fromiter(map(load_of, gids, repeat(0.0)), dtype=float, count=len(gids))
            idle = loads <= _TOL
            shared = np.flatnonzero(~idle & (loads + frac <= cap)).tolist()
            counts = np.fromiter(map(count.__getitem__, map(gids.__getitem__, shared)),
                                 dtype=np.int64, count=len(shared))
            slots = c * int(np.count_nonzero(idle)) + int(np.maximum(c - counts, 0).sum())
        else:
            for g in view.cluster.gpus:
                gid = g.gpu_id
                load = load_of(gid, 0.0)
                if load <= _TOL:
                    slots += c
                elif load + frac <= self.max_share(view, gid) + _TOL:
                    slots += max(c - count[gid], 0)
        limit = self._limit(view)
        if limit is not None:
            slots = min(slots, max(limit - len(view.running), 0))
        return slots

    def allocate(self, view: SchedulingView) -> Allocation:
        self.adopt_measured(view)
        est = self.estimator(view)
        return Allocation(launch=self._static(view, est))

    def _static(self, view: SchedulingView, est: FluidEstimator) -> dict[int, Placement]:
        pending = list(view.pending)
        limit = self._limit(view)
        if limit is not None:
            pending = pending[: max(limit - len(view.running), 0)]
        if not pending:
            return {}
        h1 = est.h1({s.trial_id: s.budget for s in pending})
        n_idle = len(view.idle_gpus)
        widths = fluid_widths(h1, n_idle, self.c, self.d)
        if self.fill:
            widths = fill_leftover(widths, est.runtime, n_idle, self.c, self.d,
                                   runtimes=est.runtimes)
        if any(tid in view.running for tid in widths):  # re-placing a running trial: the general way
            return place_widths(widths, view.cluster, view.running, c=self.c,
                                max_share=self._caps(view), shrink_to_fit=True)
        # place_widths(..., shrink_to_fit=True) on the kept book: the same rules and arithmetic
        book = self._book(view, view.running)
        launch: dict[int, Placement] = {}
        for tid, w in widths.items():
            if not (w > 0 and math.isfinite(w)):
                raise ValueError(f"trial {tid}: width must be a finite number > 0, got {w!r}")
            pl = book.place(w)
            if pl is None:
                pl = book.shrunk(w)
            if pl is not None:
                launch[tid] = pl
                book.append(tid, pl)
        return launch


class DynamicFluidAllocator(StaticFluidAllocator):
    """DynamicFluid (Alg. 2) on top of StaticFluid: resize running trials when GPUs free up.

    ``resize_overhead`` is ε in seconds, what one resize costs the trial
    (checkpoint, restart workers); set it to what the runtime pays.
    """

    name = "waterfill"

    def on_measured(self, trial_id: int) -> bool:
        """True when ``trial_id`` is the last, of the trials launched with it on a guessed
        h_i1, to measure itself: the engine then asks for the split again (module docstring)."""
        batch = self._unmeasured.pop(trial_id, None)
        if batch is None:
            return False
        batch.discard(trial_id)
        return not batch

    def allocate(self, view: SchedulingView) -> Allocation:
        self.adopt_measured(view)
        est = self.estimator(view)
        launch = self._static(view, est)
        self._track_guesses(view, est, launch)
        if len(launch) < len(view.pending):
            return Allocation(launch=launch)  # pending trials first; resize only when none wait
        return Allocation(launch=launch, resize=self._dynamic(view, est, launch))

    def _track_guesses(self, view: SchedulingView, est: FluidEstimator,
                       launch: Mapping[int, Placement]) -> None:
        """Remember the trials ``launch`` places on a guess; forget those that ended unmeasured."""
        unmeasured, running = self._unmeasured, view.running
        if unmeasured:
            for tid in list(filterfalse(running.__contains__, unmeasured)):  # (a C loop)
                unmeasured.pop(tid).discard(tid)
        batch = {t for t in launch if t in est.guessed}
        for tid in batch:
            unmeasured[tid] = batch

    def plan(self, view: SchedulingView, est: FluidEstimator) -> dict[int, float]:
        """w' for every running trial (Alg. 2 line 4 over the whole cluster, spare GPUs filled)."""
        running = view.running
        incremental = hasattr(view, "trial_changes")  # the table reads the records it needs
        records = None if incremental else list(map(view.trial, running))
        table = self._running_h1
        if table is None:
            table = self._running_h1 = RunningH1()
        h1 = table.h1(est, running, records, view.time, view if incremental else None)
        self._kept = h1 is not None  # the table holds every running trial's width now
        self._planned = None
        n = view.cluster.n_gpus
        if h1 is None:
            if records is None:
                records = list(map(view.trial, running))
            h1 = est.h1(dict(zip(running, map(_TARGET, records), strict=True)), records)
            widths = fluid_widths(h1, n, self.c, self.d)
            if self.fill:
                widths = fill_leftover(widths, est.runtime, n, self.c, self.d,
                                       runtimes=est.runtimes)
            return widths
        # fluid_widths and fill_leftover on the table's arrays: the same widths, in the same
        # order, without a mapping per step
        tids, h, at = table.last()
        ids, w, order = widths_in_order(tids, h, n, self.c, self.d)
        if self.fill:
            w = fill_in_order(ids, w, est.runtimes, n, self.c, self.d)
        target = dict(zip(ids, w.tolist(), strict=True))
        self._planned = (target, w, table.widths_at(at[order]))
        return target

    def planned_arrays(self, target: Mapping[int, float]) -> tuple[np.ndarray, np.ndarray] | None:
        """For ``target`` as the last :meth:`plan` returned it: its widths as an array, and
        the width each of its trials holds (:meth:`planned_widths`); else None."""
        planned = self._planned
        return planned[1:] if planned is not None and planned[0] is target else None

    def planned_widths(self, tids: Iterable[int]) -> np.ndarray | None:
        """The width each of ``tids`` (running trials) holds, as the last :meth:`plan` saw it
        (their placements' shares summed), when that plan kept it; else None."""
        planned = self._planned
        if planned is not None and planned[0] is tids:
            return planned[2]
        table = self._running_h1
        return table.widths(tids) if self._kept and table is not None else None

    def _pays_many(self, est: FluidEstimator, tids: list[int], w: np.ndarray,
                   w_new: np.ndarray) -> np.ndarray:
        """:meth:`pays` (no steps trained again) for each trial, its arithmetic elementwise."""
        eps = self.resize_overhead + 0.0
        h_old = est.runtimes(tids, w)
        h_new = est.runtimes(tids, w_new)
        up = (w_new > w + _TOL) & (h_new + eps < h_old - _TOL)
        down = (w_new < w - _TOL) & (w_new * (h_new + eps) < w * h_old - _TOL)
        return up | down

    def pays(self, est: FluidEstimator, tid: int, w: float, w_new: float,
             redo: float = 0.0) -> bool:
        """Alg. 2's test: is resizing from ``w`` to ``w_new`` worth ε (plus ``redo`` seconds of
        steps trained again when the resize restarts a loop without checkpoints, est.redo)?"""
        eps = self.resize_overhead + redo
        h_old, h_new = est.runtime(tid, w), est.runtime(tid, w_new)
        if w_new > w + _TOL:
            return h_new + eps < h_old - _TOL
        if w_new < w - _TOL:
            return w_new * (h_new + eps) < w * h_old - _TOL
        return False

    def _dynamic(
        self, view: SchedulingView, est: FluidEstimator, launch: Mapping[int, Placement]
    ) -> dict[int, Placement]:
        if not view.running:
            return {}
        target = self.plan(view, est)
        current = _Widths(view.running)
        arrays = self.planned_arrays(target)
        now = self.planned_widths(target) if arrays is None else arrays[1]
        if now is not None:  # the same test on the kept widths
            tw = np.fromiter(target.values(), dtype=float, count=len(target)) \
                if arrays is None else arrays[0]
            ups = list(compress(target, (tw > now + _TOL).tolist()))
        else:
            ups = [t for t, w in target.items() if w > current[t] + _TOL]
        # every placement held now, kept current as trials move
        book = self._book(view, view.running, launch)
        held = book.held
        resize: dict[int, Placement] = {}
        short = self._grow(est, ups, target, current, book, resize)
        shrunk: set[int] = set()
        if short:  # scale-downs only to feed scale-ups that lack GPUs (alone they free idle GPUs)
            downs = [t for t, w in target.items() if w < current[t] - _TOL
                     and self.pays(est, t, current[t], w)]
            before_resize = dict(resize)
            book.checkpoint()
            for tid in downs:
                pl = book.pooled_placement(tid, target[tid])
                if pl != held[tid] and self.keeps_paying(est, tid, current[tid], target[tid],
                                                          held[tid], pl):
                    book.move(tid, pl)
                    resize[tid] = pl
                    shrunk.add(tid)
            widths_before = {t: width(held[t]) for t in short}
            self._grow(est, short, target, current, book, resize)
            if all(abs(width(held[t]) - widths_before[t]) < _TOL for t in short):
                book.rollback()  # nothing gained: undo the scale-downs (and the moves since)
                resize, shrunk = before_resize, set()
            else:
                book.commit()
        return self._spread(view, est, book, resize, shrunk)

    def keeps_paying(self, est: FluidEstimator, tid: int, w: float, w_new: float,
                      old: Placement, new: Placement) -> bool:
        """A resize that :meth:`pays` still pays once the steps trained again are counted
        (nothing to count when the runtime resumes it where it was: est.redo is 0)."""
        redo = est.redo(tid, w_new, old, new)
        return redo <= 0.0 or self.pays(est, tid, w, w_new, redo)

    def _grow(
        self,
        est: FluidEstimator,
        ups: list[int],
        target: Mapping[int, float],
        current: Mapping[int, float],
        book: HeldBook,
        resize: dict[int, Placement],
    ) -> list[int]:
        """Scale-ups in non-increasing h order (the longest trial chooses first).

        Each takes the widest step toward w' that both fits now and pays after
        ε; returns the trials still short of w'.
        """
        short = []
        held = book.held
        # the first step tried is w' itself; where it does not pay the loop below stops there
        # without a change (pays is pure): that test made for all at once
        first = None
        if len(ups) > 1 and type(self).pays is DynamicFluidAllocator.pays:
            first = self._pays_many(
                est, ups, np.fromiter(map(current.__getitem__, ups), dtype=float, count=len(ups)),
                np.fromiter(map(target.__getitem__, ups), dtype=float, count=len(ups))).tolist()
        for i, tid in enumerate(ups):  # (width() spelled out for one share: the same sum, 0 + s)
            if first is not None and not first[i]:
                cur = held[tid]
                if (cur[0][1] if len(cur) == 1 else width(cur)) < target[tid] - _TOL:
                    short.append(tid)
                continue
            w_now = current[tid]
            for w_new in _steps_down(target[tid], w_now):
                cur = held[tid]
                if w_new <= (cur[0][1] if len(cur) == 1 else width(cur)) + _TOL:
                    break
                if not self.pays(est, tid, w_now, w_new):
                    break  # smaller steps pay even less
                pl = book.trial_placement(tid, w_new)
                if pl is cur:
                    continue  # it stays where it is (no room at this width)
                if abs((pl[0][1] if len(pl) == 1 else width(pl)) - w_new) < 1e-6 and pl != cur:
                    if not self.keeps_paying(est, tid, w_now, w_new, cur, pl):
                        break  # the move restarts it: the steps it would train again cost more
                    book.move(tid, pl)
                    resize[tid] = pl
                    break
            cur = held[tid]
            if (cur[0][1] if len(cur) == 1 else width(cur)) < target[tid] - _TOL:
                short.append(tid)
        return short

    def _spread(
        self,
        view: SchedulingView,
        est: FluidEstimator,
        book: HeldBook,
        resize: dict[int, Placement],
        shrunk: Collection[int] = (),
    ) -> dict[int, Placement]:
        """Let fractions on a GPU nobody else wants share all of it (1/k each for k of them).

        Trials packed at 1/c stay at 1/c after their neighbours leave; the rest
        of the GPU then idles while they run α^(c−1) times slower than they
        could. Each of the k left gets 1/k, where that pays after ε like any
        scale-up (on the same GPU: nothing moves). Trials scaled down in this
        round (``shrunk``) are left alone: that would undo a step Alg. 2 took.
        """
        held, running = book.held, view.running
        caps = book.cap
        is_running, pays, keeps_paying = running.__contains__, self.pays, self.keeps_paying
        # GPUs in the order they first appear in ``held``, each with its trials in that order;
        # only those with nothing but single-GPU fractions, some below an equal split (this
        # runs over every such GPU at each decision: the tests below are map()s, no frames)
        groups: list[tuple[int, list[int], float]] = []
        for g, tids in book.spread_groups():
            if not all(map(is_running, tids)) or (shrunk and any(map(shrunk.__contains__, tids))):
                continue  # just launched or just scaled down: leave it as placed
            groups.append((g, tids, min(caps[g], 1.0) / len(tids)))
        if not groups:
            return {t: pl for t, pl in resize.items() if pl != running.get(t)}
        # each GPU's trials and moves are its own (single-GPU fractions), so every GPU's test
        # can be made before any move; where :meth:`pays` is DynamicFluid's, it is made for all
        # of them at once (est.runtimes: the same floats as est.runtime)
        if type(self).pays is DynamicFluidAllocator.pays:
            flat = [t for _, tids, _ in groups for t in tids]
            sizes = [len(tids) for _, tids, _ in groups]
            w_old = np.fromiter((held[t][0][1] for t in flat), dtype=float, count=len(flat))
            w_new = np.repeat(np.array([share for *_, share in groups]), sizes)
            ok = self._pays_many(est, flat, w_old, w_new)
            starts = np.cumsum(sizes) - sizes
            all_pay = np.logical_and.reduceat(ok, starts).tolist()
        else:
            all_pay = [all(pays(est, t, held[t][0][1], share) for t in tids)
                       for _, tids, share in groups]
        for (g, tids, share), paid in zip(groups, all_pay, strict=True):
            if paid and all(keeps_paying(est, t, held[t][0][1], share, held[t], ((g, share),))
                            for t in tids):
                for t in tids:
                    book.move(t, ((g, share),))
                    resize[t] = held[t]
        # a trial scaled down and spread back to where it was has not moved at all
        return {t: pl for t, pl in resize.items() if pl != running.get(t)}


class _Widths(dict):
    """Each running trial's width (its shares summed), worked out when first asked for."""

    def __init__(self, running: Mapping[int, Placement]) -> None:
        super().__init__()
        self._running = running

    def __missing__(self, tid: int) -> float:
        pl = self._running[tid]
        w = self[tid] = pl[0][1] if len(pl) == 1 else width(pl)  # width(), one share fast
        return w


def _steps_down(w_target: float, w_now: float) -> list[float]:
    """Widths to try for a scale-up, largest first: w', w'−1, …, down to just above ``w_now``."""
    out = [w_target]
    k = math.floor(w_target + _TOL) - 1
    while k > w_now + _TOL and k >= 1:
        out.append(float(k))
        k -= 1
    return out
