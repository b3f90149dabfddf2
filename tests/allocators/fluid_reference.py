"""The water-filling allocators as they were before the scaling work: the reference they must match.

Copied verbatim from nbtune before the incremental placement book
(:mod:`nbtune.allocators.gpu_book`): ``place_widths`` rebuilt every GPU's
load per call and scanned every GPU per trial, ``fill_leftover`` offered every
trial to its heap, ``FluidEstimator.h1`` went through ``unit_time`` and
``remaining``, DynamicFluid re-ran ``place_widths`` for each scale-up step.
Slow and obviously faithful to the papers' rules; ``test_scaling_equivalence``
checks that the fast allocators decide exactly what these do. Only the methods
that changed are overridden; everything else is the package's own.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from nbtune.allocators.base import Allocation, SchedulingView
from nbtune.allocators.demand import DemandLookup
from nbtune.allocators.fluid import DynamicFluidAllocator, FluidEstimator, StaticFluidAllocator
from nbtune.allocators.fluid_knapsack import FluidKnapsackAllocator, colocate
from nbtune.allocators.knapsack import ClusterRoom
from nbtune.allocators.mkp import pack
from nbtune.allocators.oversubscription import DEFAULT_RATIO
from nbtune.allocators.waterfill import _check_limits, gpus_needed  # noqa: F401
from nbtune.core.resources import ClusterSpec, Placement, width

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


def reference_cluster_room(
    view: SchedulingView,
    ratios: Mapping[str, float],
    demand_of: DemandLookup | None = None,
) -> ClusterRoom:
    """Remaining compute, memory and CPUs per GPU/node after the running trials' demands."""
    demand_of = demand_of or DemandLookup()
    cluster: ClusterSpec = view.cluster
    gpus = cluster.gpus
    nodes = list(dict.fromkeys(g.node for g in gpus))
    node_ix = {n: i for i, n in enumerate(nodes)}
    pos = {g.gpu_id: i for i, g in enumerate(gpus)}
    ratio = np.array([ratios.get(g.kind, DEFAULT_RATIO) for g in gpus], dtype=float)
    load = view.gpu_load
    compute = ratio - np.array([load.get(g.gpu_id, 0.0) for g in gpus], dtype=float)
    memory = np.array([g.memory_gb for g in gpus], dtype=float)
    gpu_node = np.array([node_ix[g.node] for g in gpus], dtype=np.int64)
    node_cpus = np.array([float(cluster.node_cpus.get(n, 0.0)) for n in nodes], dtype=float)
    for tid, placement in view.running.items():
        d = demand_of(view, tid, view.trial(tid).config)
        for g, _ in placement:
            i = pos.get(g)
            if i is None:
                continue
            memory[i] -= d.memory_gb
            node_cpus[gpu_node[i]] -= d.cpus
    speed = np.array([g.speed for g in gpus], dtype=float)
    return ClusterRoom([g.gpu_id for g in gpus], ratio, compute, memory, gpu_node, node_cpus,
                       speed, nodes)


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


class ReferenceEstimator(FluidEstimator):
    """FluidEstimator.h1 as it was: unit_time and remaining per trial."""

    def unit_time(self, tid: int) -> float | None:
        """Seconds per budget unit alone on one GPU, or None if nothing is known."""
        seen = self.view.unit_time(tid)
        if seen is not None and seen[0] > 0 and seen[1] > 0:
            return seen[0] / self.overhead(tid).factor(seen[1])
        prof = self._profile(tid)
        if prof is not None and prof.unit_time:
            return prof.unit_time
        if self.workload is not None and hasattr(self.workload, "unit_time"):
            t = self.view.trial(tid)
            return float(self.workload.unit_time(tid, t.config))
        return None

    def remaining(self, tid: int, target: float) -> float:
        """Budget left to ``target``, counting progress since the last report when it is known."""
        t = self.view.trial(tid)
        left = target - t.budget_used
        seen = self.view.unit_time(tid)
        pl = self.view.running.get(tid)
        if seen is not None and pl is not None and t.results and seen[0] > 0:
            last_t = t.results[-1][0]
            if last_t >= t.share_since - _TOL and abs(width(pl) - seen[1]) < 1e-6:
                left -= max(self.view.time - last_t, 0.0) / seen[0]
        return max(left, 1e-6 * max(target, 1.0))

    def h1(self, targets: Mapping[int, float]) -> dict[int, float]:
        """Remaining runtime at width 1 for each ``{trial_id: target budget}``."""
        units = {tid: self.unit_time(tid) for tid in targets}
        known = [u for u in units.values() if u is not None]
        fallback = sum(known) / len(known) if known else 1.0
        out = {}
        for tid, target in targets.items():
            u = units[tid] if units[tid] is not None else fallback
            out[tid] = self._h1[tid] = self.remaining(tid, target) * u
        return out


class _ReferenceMixin:
    """StaticFluid's capacity and placement as they were."""

    def estimator(self, view: SchedulingView) -> FluidEstimator:
        est = super().estimator(view)  # type: ignore[misc]
        ref = ReferenceEstimator.__new__(ReferenceEstimator)
        ref.__dict__.update(est.__dict__)
        return ref

    def _caps(self, view: SchedulingView) -> dict[int, float]:
        return {g.gpu_id: self.max_share(view, g.gpu_id) for g in view.cluster.gpus}

    def capacity(self, view: SchedulingView) -> int:
        """Free packing slots: ``c`` per idle GPU plus room left on GPUs shared by fractions.

        This is how many trials the algorithm is asked for: asynchronous
        algorithms (ASHA) then run up to ``c`` times as many trials as GPUs,
        which is where packing's throughput comes from.
        """
        counts: dict[int, int] = {}
        for pl in view.running.values():
            for g, _ in pl:
                counts[g] = counts.get(g, 0) + 1
        slots = 0
        for g in view.cluster.gpus:
            load = view.gpu_load.get(g.gpu_id, 0.0)
            if load <= _TOL:
                slots += self.c
            elif load + 1.0 / self.c <= self.max_share(view, g.gpu_id) + _TOL:
                slots += max(self.c - counts.get(g.gpu_id, 0), 0)
        limit = self._limit(view)
        if limit is not None:
            slots = min(slots, max(limit - len(view.running), 0))
        return slots

    def _static(self, view: SchedulingView, est: FluidEstimator) -> dict[int, Placement]:
        pending = list(view.pending)
        limit = self._limit(view)
        if limit is not None:
            pending = pending[: max(limit - len(view.running), 0)]
        if not pending:
            return {}
        h1 = est.h1({s.trial_id: s.budget for s in pending})
        n_idle = len(view.idle_gpus)
        widths = reference_fluid_widths(h1, n_idle, self.c, self.d)
        if self.fill:
            widths = reference_fill_leftover(widths, est.runtime, n_idle, self.c, self.d)
        return reference_place_widths(widths, view.cluster, view.running, c=self.c,
                            max_share=self._caps(view), shrink_to_fit=True)




class ReferenceStaticFluid(_ReferenceMixin, StaticFluidAllocator):
    """``"waterfill-static"`` as it was."""


class ReferenceDynamicFluid(_ReferenceMixin, DynamicFluidAllocator):
    """``"waterfill"`` as it was."""

    def plan(self, view: SchedulingView, est: FluidEstimator) -> dict[int, float]:
        """w' for every running trial (Alg. 2 line 4 over the whole cluster, spare GPUs filled)."""
        targets = {tid: view.trial(tid).target_budget for tid in view.running}
        h1 = est.h1(targets)
        n = view.cluster.n_gpus
        widths = reference_fluid_widths(h1, n, self.c, self.d)
        if self.fill:
            widths = reference_fill_leftover(widths, est.runtime, n, self.c, self.d)
        return widths

    def _dynamic(
        self, view: SchedulingView, est: FluidEstimator, launch: Mapping[int, Placement]
    ) -> dict[int, Placement]:
        if not view.running:
            return {}
        target = self.plan(view, est)
        current = {tid: width(pl) for tid, pl in view.running.items()}
        ups = [t for t, w in target.items() if w > current[t] + _TOL]
        held: dict[int, Placement] = {**view.running, **launch}
        caps = self._caps(view)
        resize: dict[int, Placement] = {}
        short = self._grow(view, est, ups, target, current, held, caps, resize)
        shrunk: set[int] = set()
        if short:  # scale-downs only to feed scale-ups that lack GPUs (alone they free idle GPUs)
            downs = [t for t, w in target.items() if w < current[t] - _TOL
                     and self.pays(est, t, current[t], w)]
            before_held, before_resize = dict(held), dict(resize)
            for tid in downs:
                pl = reference_place_widths({tid: target[tid]}, view.cluster, held, c=self.c,
                                  max_share=caps)[tid]
                if pl != held[tid]:
                    held[tid] = resize[tid] = pl
                    shrunk.add(tid)
            widths_before = {t: width(held[t]) for t in short}
            self._grow(view, est, short, target, current, held, caps, resize)
            if all(abs(width(held[t]) - widths_before[t]) < _TOL for t in short):
                held, resize, shrunk = before_held, before_resize, set()
        return self._spread(view, est, held, caps, resize, shrunk)

    def _grow(
        self,
        view: SchedulingView,
        est: FluidEstimator,
        ups: list[int],
        target: Mapping[int, float],
        current: Mapping[int, float],
        held: dict[int, Placement],
        caps: Mapping[int, float],
        resize: dict[int, Placement],
    ) -> list[int]:
        """Scale-ups in non-increasing h order (the longest trial chooses first).

        Each takes the widest step toward w' that both fits now and pays after
        ε; returns the trials still short of w'.
        """
        short = []
        for tid in ups:
            for w_new in _steps_down_ref(target[tid], current[tid]):
                if w_new <= width(held[tid]) + _TOL:
                    break
                if not self.pays(est, tid, current[tid], w_new):
                    break  # smaller steps pay even less
                pl = reference_place_widths({tid: w_new}, view.cluster, held, c=self.c,
                                  max_share=caps)[tid]
                if abs(width(pl) - w_new) < 1e-6 and pl != held[tid]:
                    held[tid] = resize[tid] = pl
                    break
            if width(held[tid]) < target[tid] - _TOL:
                short.append(tid)
        return short

    def _spread(
        self,
        view: SchedulingView,
        est: FluidEstimator,
        held: dict[int, Placement],
        caps: Mapping[int, float],
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
        on_gpu: dict[int, list[int]] = {}
        for tid, pl in held.items():
            for g, _ in pl:
                on_gpu.setdefault(g, []).append(tid)
        for g, tids in on_gpu.items():
            if any(len(held[t]) != 1 or held[t][0][1] >= 1 - _TOL for t in tids):
                continue  # a whole-GPU trial is there (or a trial spans GPUs)
            if any(t not in view.running or t in shrunk for t in tids):
                continue  # just launched or just scaled down: leave it as placed
            share = min(caps.get(g, 1.0), 1.0) / len(tids)
            if all(held[t][0][1] >= share - _TOL for t in tids):
                continue
            if all(self.pays(est, t, held[t][0][1], share) for t in tids):
                for t in tids:
                    held[t] = resize[t] = ((g, share),)
        # a trial scaled down and spread back to where it was has not moved at all
        return {t: pl for t, pl in resize.items() if pl != view.running.get(t)}




class ReferenceFluidKnapsack(FluidKnapsackAllocator):
    """``"fluid+knapsack"`` as it was, with the reference Fluid inside."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        f = self._fluid
        self._fluid = ReferenceDynamicFluid(c=f.c, d=f.d, alpha=f.alpha, beta=f.beta, fill=f.fill,
                                            resize_overhead=f.resize_overhead,
                                            profiles=f.profiles,
                                            signature_keys=f.signature_keys)

    def capacity(self, view: SchedulingView) -> int:
        """An estimate of how many trials fit in what is free, sized by the trials known so far.

        Trials the algorithm has not created yet have no demand; the mean of the
        running and pending trials' demands (or ``default_demand``) stands in.
        Never less than the number of idle GPUs, so the cluster cannot sit idle.
        """
        room = reference_cluster_room(view, self.ratios(view), self.demand_of)
        known = [self.demand_of(view, s.trial_id, s.config) for s in view.pending] + [
            self.demand_of(view, tid, view.trial(tid).config) for tid in view.running
        ]
        if known:
            c = float(np.mean([d.compute for d in known]))
            m = float(np.mean([d.memory_gb for d in known]))
            q = float(np.mean([d.cpus for d in known]))
        else:
            d = self.default_demand
            c, m, q = d.compute, d.memory_gb, d.cpus
        per_gpu = np.floor(np.maximum(room.compute, 0.0) / c + 1e-9)
        if m > 0:
            per_gpu = np.minimum(per_gpu, np.floor(np.maximum(room.memory, 0.0) / m + 1e-9))
        est = int(per_gpu.sum())
        if q > 0:
            est = min(est, int(np.floor(np.maximum(room.node_cpus, 0.0) / q + 1e-9).sum()))
        est = max(est, len(view.idle_gpus))
        cap = self._room_for_concurrency(view)
        return est if cap is None else min(est, cap)

    def allocate(self, view: SchedulingView) -> Allocation:
        est = self._fluid.estimator(view)
        room = reference_cluster_room(view, self.ratios(view), self.demand_of)
        launch = self._launch(view, est, room)
        if len(launch) < len(view.pending):
            return Allocation(launch=launch)  # pending trials first; grow only when none wait
        return Allocation(launch=launch, resize=self._grow(view, est, room))

    def _launch(self, view: SchedulingView, est: FluidEstimator,
                room: ClusterRoom) -> dict[int, Placement]:
        """StaticFluid's widths for the pending trials, placed under the knapsack constraints."""
        pending = list(view.pending)
        cap = self._room_for_concurrency(view)
        if cap is not None:
            pending = pending[:cap]
        if not pending:
            return {}
        fl = self._fluid
        h1 = est.h1({s.trial_id: s.budget for s in pending})
        n_idle = len(view.idle_gpus)
        widths = reference_fluid_widths(h1, n_idle, fl.c, fl.d)
        if fl.fill:
            widths = reference_fill_leftover(widths, est.runtime, n_idle, fl.c, fl.d)
        by_id = {s.trial_id: s for s in pending}
        demands = {tid: self.demand_of(view, tid, by_id[tid].config) for tid in widths}
        self._check_fits(view, room, [by_id[t] for t in widths], list(demands.values()))
        launch: dict[int, Placement] = {}
        frac: list[tuple[int, float]] = []
        for tid, w in widths.items():  # non-increasing h1: the longest trial chooses first
            placed = None
            for k in range(int(math.floor(w + _TOL)), 0, -1):  # shrink to fit, like Fluid
                placed = colocate(k, demands[tid], room)
                if placed is not None:
                    break
            if placed is None:
                frac.append((tid, min(w, 1.0 / fl.c) if w >= 1 - _TOL else w))
                continue
            self._place(room, placed, 1.0, demands[tid])
            launch[tid] = tuple((room.gpu_ids[i], 1.0) for i in placed)
        if frac:
            ids = [t for t, _ in frac]
            share = [min(w, demands[t].compute) for t, w in frac]
            where = pack(share, [demands[t].memory_gb for t in ids],
                         [demands[t].cpus for t in ids], room.compute, room.memory,
                         room.gpu_node, room.node_cpus, policy=self.policy,
                         runtime=[h1[t] for t in ids], speed=room.speed)
            for t, sh, i in zip(ids, share, where.tolist(), strict=True):
                if i >= 0:
                    self._place(room, [i], sh, demands[t])
                    launch[t] = ((room.gpu_ids[i], sh),)
        return launch

    def _grow(self, view: SchedulingView, est: FluidEstimator,
              room: ClusterRoom) -> dict[int, Placement]:
        """DynamicFluid's scale-ups onto whole GPUs that are free under the knapsack constraints.

        Fluid's plan w' over everything running; a trial whose w' is more whole
        GPUs than it holds grows, longest first, if Alg. 2's test says it pays
        after ε, onto its own GPUs and node first (RubberBand co-location).
        Scale-downs are not made: nothing else here would take what they free.
        """
        if not view.running:
            return {}
        dyn = self._fluid
        target = dyn.plan(view, est)
        pos = {g: i for i, g in enumerate(room.gpu_ids)}
        resize: dict[int, Placement] = {}
        for tid, w_new in target.items():  # non-increasing h: the longest trial chooses first
            cur = view.running[tid]
            w = width(cur)
            if math.floor(w_new + _TOL) <= w + _TOL:
                continue  # the plan gives it no more whole GPUs than it holds
            dem = self.demand_of(view, tid, view.trial(tid).config)
            mine = [(pos[g], sh) for g, sh in cur if g in pos]
            own = [i for i, _ in mine]
            for i, sh in mine:  # its own share is free for it while it chooses
                self._place(room, [i], sh, dem, -1.0)
            placed = None
            for k in range(int(math.floor(w_new + _TOL)), 0, -1):
                if k <= w + _TOL or not dyn.pays(est, tid, w, float(k)):
                    break  # smaller steps pay even less
                placed = colocate(k, dem, room, prefer=own)
                if placed is not None:
                    break
            if placed is None:
                for i, sh in mine:
                    self._place(room, [i], sh, dem)
                continue
            self._place(room, placed, 1.0, dem)
            resize[tid] = tuple((room.gpu_ids[i], 1.0) for i in placed)
        return resize


def _steps_down_ref(w_target: float, w_now: float) -> list[float]:
    out = [w_target]
    k = math.floor(w_target + _TOL) - 1
    while k > w_now + _TOL and k >= 1:
        out.append(float(k))
        k -= 1
    return out
