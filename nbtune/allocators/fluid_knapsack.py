"""``"fluid+knapsack"``: water-filling decides how much GPU each trial gets, knapsacks decide where.

Fluid (Alg. 1) sizes trials by their share of the remaining work: fractions
of a GPU for short trials, several GPUs for long ones. It places them by
count (at most ``c`` per GPU), blind to memory and CPU cores. HyperSack
places by compute, memory and node cores, but gives every trial the same
single-GPU slot. This allocator does both. For the pending trials:

1. widths from :func:`~nbtune.allocators.waterfill.fluid_widths` (and the
   spare GPUs its floor leaves, :func:`~nbtune.allocators.waterfill.fill_leftover`),
   over the idle GPUs, with Fluid's estimator for h_i1;
2. a width ≥ 1 becomes ``floor(w)`` GPUs that each have a whole GPU of
   compute free plus the trial's memory, on the fewest nodes (RubberBand
   §4.4: best-fit node that holds it all, else the nodes with the most room
   first), with the node's cores counted per worker; when that many are not
   free it takes fewer, down to a fraction;
3. a width < 1 becomes a share ``min(w, demand)`` (a trial cannot use more
   than its demand; more would idle) placed by the HyperSack policy
   (:func:`~nbtune.allocators.mkp.pack`) under compute × r, memory and cores.

:func:`~nbtune.allocators.waterfill.place_widths` is not used for step 2–3
because it checks neither memory nor cores; what is reused is the sizing.
Shares and ``max_share`` follow :mod:`nbtune.allocators.knapsack` (compute
capacity r per GPU kind). Running trials stay where they are while anything
waits; once nothing is pending, DynamicFluid's plan (Alg. 2) may *grow* a
running trial onto more whole GPUs, when its resize test says it pays after
ε, keeping its own GPUs and node first (RubberBand's "preserve assignments
across epochs"). Scale-downs, and displacing others to make room
(RubberBand's ``tryMakeSpace``), are not done.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress

import numpy as np

from nbtune.allocators.allocator_protocol import Allocation, SchedulingView
from nbtune.allocators.demand import DEFAULT_DEMAND
from nbtune.allocators.fluid import DynamicFluidAllocator, FluidEstimator
from nbtune.allocators.knapsack import ClusterRoom, KnapsackAllocator
from nbtune.allocators.mkp import pack
from nbtune.allocators.waterfill import fill_leftover, fluid_widths
from nbtune.core.resources import Demand, Placement, width
from nbtune.core.tolerance import EPS as _TOL

__all__ = ["FluidKnapsackAllocator", "colocate"]


def colocate(k: int, demand: Demand, room: ClusterRoom,
             prefer: Sequence[int] = ()) -> list[int] | None:
    """Indices of ``k`` GPUs for one k-worker trial on the fewest nodes, or None.

    A GPU qualifies with a whole GPU of compute and the trial's memory free;
    a node takes as many workers as its free cores allow (``demand.cpus`` each).
    ``prefer`` (a running trial's own GPUs) come first on their node, and their
    node wins when it can hold the whole trial: the trial stays where it is.
    """
    ok = (room.compute >= 1.0 - _TOL) & (room.memory >= demand.memory_gb - _TOL)
    if not prefer:
        return _colocate_new(k, demand, room, ok)
    return _colocate_loop(k, demand, room, ok, set(prefer))


def _colocate_loop(k: int, demand: Demand, room: ClusterRoom, ok: np.ndarray,
                   first: set[int]) -> list[int] | None:
    """:func:`colocate` in general: the qualifying GPUs (``ok``) grouped by node, ``first``
    first on theirs, each node's count capped by its free cores, then the node(s) chosen."""
    by_node: dict[int, list[int]] = {}
    for i in sorted(np.flatnonzero(ok).tolist(), key=lambda i: (i not in first, i)):
        by_node.setdefault(int(room.gpu_node[i]), []).append(i)
    usable: dict[int, list[int]] = {}
    for n, gs in by_node.items():
        cap = len(gs) if demand.cpus <= 0 else int(math.floor(room.node_cpus[n] / demand.cpus
                                                                + _TOL))
        if cap > 0:
            usable[n] = gs[:cap]
    if sum(len(gs) for gs in usable.values()) < k:
        return None
    home = {int(room.gpu_node[i]) for i in first}
    whole = [n for n, gs in usable.items() if len(gs) >= k]
    if whole:  # one node holds it all: its own, else the least room to spare (best fit)
        n = min(whole, key=lambda n: (n not in home, len(usable[n]), n))
        return usable[n][:k]
    chosen: list[int] = []
    for n in sorted(usable, key=lambda n: (n not in home, -len(usable[n]), n)):
        chosen.extend(usable[n][: k - len(chosen)])
        if len(chosen) == k:
            break
    return chosen


def _colocate_new(k: int, demand: Demand, room: ClusterRoom, ok: np.ndarray) -> list[int] | None:
    """:func:`colocate` with nothing preferred, on arrays: the qualifying GPUs in index order
    grouped by node, each node's count capped by its free cores (the same float arithmetic),
    then the same choice of node(s)."""
    idx = np.flatnonzero(ok)
    if len(idx) < k:
        return None  # fewer qualify than it needs (what is usable is fewer still)
    nodes = room.gpu_node[idx]
    uniq, counts = np.unique(nodes, return_counts=True)
    if demand.cpus <= 0:
        usable = counts
    else:
        caps = np.floor(room.node_cpus[uniq] / demand.cpus + _TOL).astype(np.int64)
        keep = caps > 0
        uniq, usable = uniq[keep], np.minimum(counts[keep], caps[keep])
    if int(usable.sum()) < k:
        return None
    whole = np.flatnonzero(usable >= k)
    if len(whole):  # one node holds it all: the least room to spare (best fit), then lowest
        j = whole[np.lexsort((uniq[whole], usable[whole]))[0]]
        return idx[nodes == uniq[j]][:k].tolist()
    chosen: list[int] = []
    for j in np.lexsort((uniq, -usable)).tolist():  # the most room first, then lowest node
        take = min(int(usable[j]), k - len(chosen))
        chosen.extend(idx[nodes == uniq[j]][:take].tolist())
        if len(chosen) == k:
            break
    return chosen


class FluidKnapsackAllocator(KnapsackAllocator):
    """Water-filling widths placed under knapsack constraints (see the module docstring).

    ``c``/``d``/``alpha``/``beta``/``fill``/``resize_overhead``/``profiles``/
    ``signature_keys`` are Fluid's (:class:`~nbtune.allocators.fluid.DynamicFluidAllocator`);
    ``policy``, ``oversubscription``, ``default_demand`` the knapsack's.
    """

    name = "fluid+knapsack"
    policy = "wfd"

    def __init__(
        self,
        policy: str | None = None,
        *,
        c: int = 4,
        d: int = 4,
        alpha: float | None = None,
        beta: float | None = None,
        fill: bool = True,
        resize_overhead: float = 0.0,
        oversubscription: Mapping[str, float] | None = None,
        default_demand: Demand = DEFAULT_DEMAND,
        profiles: object | None = None,
        signature_keys: Iterable[str] | None = None,
        measured: bool = True,
    ) -> None:
        super().__init__(policy, oversubscription=oversubscription,
                         default_demand=default_demand)
        self.name = "fluid+knapsack"
        # Fluid's sizing, plan and resize test (and the validation of their options)
        self._fluid = DynamicFluidAllocator(c=c, d=d, alpha=alpha, beta=beta, fill=fill,
                                            resize_overhead=resize_overhead, profiles=profiles,
                                            signature_keys=signature_keys, measured=measured)

    @property
    def sizing(self) -> DynamicFluidAllocator:
        """Fluid's sizing of c and d for the trials placed here; ``auto`` caps it
        (:meth:`DynamicFluidAllocator.limit`) by what the profiles say."""
        return self._fluid

    def allocate(self, view: SchedulingView) -> Allocation:
        self._fluid.adopt_measured(view)
        est = self._fluid.estimator(view)
        room = self.room(view)[0]
        launch = self._launch(view, est, room)
        if len(launch) < len(view.pending):
            return Allocation(launch=launch)  # pending trials first; grow only when none wait
        return Allocation(launch=launch, resize=self._grow(view, est, room))

    def _place(self, room: ClusterRoom, idx: list[int], share: float, dem: Demand,
               sign: float = 1.0) -> None:
        """Take (``sign`` 1) or give back (-1) ``share`` of each GPU in ``idx`` with the demand."""
        for i in idx:
            room.compute[i] -= sign * share
            room.memory[i] -= sign * dem.memory_gb
            room.node_cpus[room.gpu_node[i]] -= sign * dem.cpus

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
        widths = fluid_widths(h1, n_idle, fl.c, fl.d)
        if fl.fill:
            widths = fill_leftover(widths, est.runtime, n_idle, fl.c, fl.d,
                                   runtimes=est.runtimes)
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
        pos: dict[int, int] | None = None  # GPU id -> index in the room, when a trial grows
        resize: dict[int, Placement] = {}
        compute, memory, node_cpus, gpu_node = room.compute, room.memory, room.node_cpus, \
            room.gpu_node
        # GPUs with a whole GPU of compute free: colocate(k) needs k of them, so when fewer
        # are free it would say no, and is not asked (kept current through every _place)
        n_whole = int(np.count_nonzero(compute >= 1.0 - _TOL))

        def place(idx: list[int], share: float, dem: Demand, sign: float = 1.0) -> None:
            nonlocal n_whole
            for i in idx:
                was = compute[i] >= 1.0 - _TOL
                self._place(room, [i], share, dem, sign)
                n_whole += int(compute[i] >= 1.0 - _TOL) - int(was)

        grows: Iterable[tuple[int, float]] = target.items()
        arrays = dyn.planned_arrays(target)
        held = dyn.planned_widths(target) if arrays is None else arrays[1]
        if held is not None:  # the test below, for all at once (whole numbers: exact as floats)
            tw = np.fromiter(target.values(), dtype=float, count=len(target)) \
                if arrays is None else arrays[0]
            grows = compress(target.items(), (np.floor(tw + _TOL) > held + _TOL).tolist())
        for tid, w_new in grows:  # non-increasing h: the longest trial chooses first
            cur = view.running[tid]
            w = cur[0][1] if len(cur) == 1 else width(cur)  # width(), one share fast
            top = math.floor(w_new + _TOL)
            if top <= w + _TOL:
                continue  # the plan gives it no more whole GPUs than it holds
            dem = self.demand_of(view, tid, view.trial(tid).config)
            if pos is None:
                pos = {g: i for i, g in enumerate(room.gpu_ids)}
            mine = [(pos[g], sh) for g, sh in cur if g in pos]
            own = [i for i, _ in mine]
            mem, cpus = dem.memory_gb, dem.cpus
            for i, sh in mine:  # its own share is free for it while it chooses (place(..., -1))
                was = compute[i] >= 1.0 - _TOL
                compute[i] -= -1.0 * sh
                memory[i] -= -1.0 * mem
                node_cpus[gpu_node[i]] -= -1.0 * cpus
                n_whole += int(compute[i] >= 1.0 - _TOL) - int(was)
            placed = None
            # a step lands only on k > w GPUs with a whole GPU free; with fewer free than the
            # least such k, no step is tried (the test of each is pure: nothing to ask)
            if n_whole >= math.floor(w + _TOL) + 1:
                for k in range(int(top), 0, -1):
                    if k <= w + _TOL or not dyn.pays(est, tid, w, float(k)):
                        break  # smaller steps pay even less
                    if k > n_whole:
                        continue  # fewer than k GPUs have a whole GPU free: colocate says None
                    placed = colocate(k, dem, room, prefer=own)
                    if placed is not None:
                        break
            if placed is None:  # it keeps its own share (place(...), inline)
                for i, sh in mine:
                    was = compute[i] >= 1.0 - _TOL
                    compute[i] -= 1.0 * sh
                    memory[i] -= 1.0 * mem
                    node_cpus[gpu_node[i]] -= 1.0 * cpus
                    n_whole += int(compute[i] >= 1.0 - _TOL) - int(was)
                continue
            new = None if placed is None else tuple((room.gpu_ids[i], 1.0) for i in placed)
            if new is None or not dyn.keeps_paying(est, tid, w, float(len(new)), cur, new):
                for i, sh in mine:  # (a move that restarts it would cost more than it gains)
                    place([i], sh, dem)
                continue
            place(placed, 1.0, dem)
            resize[tid] = new
        return resize
