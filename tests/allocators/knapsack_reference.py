"""``"fluid+knapsack"`` and the knapsacks' cluster room as they were before the scaling work.

Verbatim copies (see :mod:`tests.allocators.fluid_reference` for why): the
room every knapsack allocator starts from, and fluid+knapsack's capacity,
launch and growth with the reference Fluid inside.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from nbtune.allocators.allocator_protocol import Allocation, SchedulingView
from nbtune.allocators.demand import DemandLookup
from nbtune.allocators.fluid import FluidEstimator
from nbtune.allocators.fluid_knapsack import FluidKnapsackAllocator, colocate
from nbtune.allocators.knapsack import ClusterRoom
from nbtune.allocators.mkp import pack
from nbtune.allocators.oversubscription import DEFAULT_RATIO
from nbtune.core.resources import ClusterSpec, Placement, width
from tests.allocators.fluid_reference import (
    ReferenceDynamicFluid,
    reference_fill_leftover,
    reference_fluid_widths,
)

_TOL = 1e-9


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
