"""The allocator that carries a RubberBand plan out inside the engine.

The engine stays the only one that places trials; this allocator tells it,
stage by stage, what the plan says: each trial of stage ``i`` gets the
plan's GPUs per trial, at most the plan's number of trials run at once
(queued trials wait, as in the DAG model), and only the lowest-numbered GPUs
the stage's cluster size allows are used, so the executor can retire the
others without hitting a running trial. A trial's GPUs are taken from as few
nodes as possible (RubberBand §4.4.1: co-location); when other trials fragment
the hosts, narrower running trials are moved to make room (``tryMakeSpace``,
:mod:`nbtune.planner.placement`).

Stages are recognised by TrialGroup: a synchronous rung algorithm hands out one
group per rung, in order, which is exactly the spec's stage order. The
allocator is pure: it reads only the scheduling view.
"""

from __future__ import annotations

from collections import defaultdict

from nbtune.allocators.allocator_protocol import Allocation as Placements
from nbtune.allocators.allocator_protocol import BaseAllocator, SchedulingView
from nbtune.planner.dag import stage_layout
from nbtune.planner.placement import co_located, hosts_of, min_hosts, try_make_space
from nbtune.planner.plan import Plan

__all__ = ["PlannedAllocator", "co_located"]


class PlannedAllocator(BaseAllocator):
    """Fair division of each stage's planned GPUs among its trials."""

    name = "planned"

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._stage_of_group: dict[int, int] = {}
        #: highest stage any trial has reached (the executor sizes the cluster for it)
        self.stage = 0

    # ------------------------------------------------------------ stages
    def stage_of(self, group_id: int | None) -> int:
        if group_id is None:
            return self.stage
        if group_id not in self._stage_of_group:
            last = self.plan.spec.num_stages() - 1
            self._stage_of_group[group_id] = min(len(self._stage_of_group), last)
        return self._stage_of_group[group_id]

    def _observe(self, view: SchedulingView) -> None:
        for spec in sorted(view.pending, key=lambda s: -1 if s.group_id is None else s.group_id):
            self.stage = max(self.stage, self.stage_of(spec.group_id))

    def gpus_allowed(self, stage: int) -> int:
        """GPUs the stage's cluster holds (whole instances), lowest ids first."""
        return self.plan.allocation.instances[stage] * self.plan.cloud.gpus_per_instance

    def layout(self, stage: int) -> tuple[int, int]:
        """``(trials at once, GPUs per trial)`` of a stage under the plan."""
        return stage_layout(self.plan.spec.stages[stage].trials, self.plan.allocation.gpus[stage])

    # --------------------------------------------------------- protocol
    def _allowed_by_node(self, view: SchedulingView, keep: set[int]) -> dict[str, list[int]]:
        allowed = sorted(g.gpu_id for g in view.cluster.gpus)[: self.gpus_allowed(self.stage)]
        node = {g.gpu_id: g.node for g in view.cluster.gpus}
        out: dict[str, list[int]] = defaultdict(list)
        for g in allowed:
            if g in keep:
                out[node[g]].append(g)
        return out

    def _usable_idle(self, view: SchedulingView) -> dict[str, list[int]]:
        return self._allowed_by_node(view, set(view.idle_gpus))

    def _make_space(self, view: SchedulingView, tid: int, width: int, out: Placements,
                    idle: dict[str, list[int]]) -> list[int] | None:
        """``tryMakeSpace``: move narrower running trials so ``tid`` fits on the fewest hosts.

        Trials already moved or launched in this round, and trials on GPUs
        outside the stage's allowance, stay where they are. Moved trials go in
        ``out.resize`` (the runtime carries a move out through a checkpoint).
        """
        pinned = {g for p in out.launch.values() for g, _ in p}
        pinned |= {g for p in out.resize.values() for g, _ in p}
        everyone = {x.gpu_id for x in view.cluster.gpus}
        domain_all = {g for gs in self._allowed_by_node(view, everyone).values() for g in gs}
        movable = {t: [g for g, _ in p] for t, p in view.running.items()
                   if t not in out.resize and all(g in domain_all and g not in pinned for g, _ in p)
                   and len(p) < width}
        usable = {g for gs in idle.values() for g in gs} | {g for gs in movable.values() for g in gs}
        repack = try_make_space(self._allowed_by_node(view, usable), movable, {tid: width})
        if repack is None:
            return None
        for t, gpus in repack.items():
            if t != tid and sorted(gpus) != sorted(movable[t]):
                out.resize[t] = tuple((g, 1.0) for g in gpus)
        taken = {g for gs in repack.values() for g in gs}
        idle.clear()
        idle.update(self._allowed_by_node(view, usable - taken))
        return repack[tid]

    def _running_per_stage(self, view: SchedulingView) -> dict[int, int]:
        counts: dict[int, int] = defaultdict(int)
        for tid in view.running:
            counts[self.stage_of(view.trial(tid).group_id)] += 1
        return counts

    def capacity(self, view: SchedulingView) -> int:
        self._observe(view)
        slots, width = self.layout(self.stage)
        free = sum(len(g) for g in self._usable_idle(view).values()) // width
        return max(0, min(free, slots - self._running_per_stage(view)[self.stage]))

    def allocate(self, view: SchedulingView) -> Placements:
        """Launch pending trials at their stage's width; widen narrow ones when GPUs come.

        A stage that needs more GPUs per trial than the cluster has yet (the
        executor is scaling it up) starts its first trial on what there is
        rather than stall the engine, and :meth:`allocate` resizes it to the
        planned width once the new workers have joined.
        """
        self._observe(view)
        idle = self._usable_idle(view)
        running = self._running_per_stage(view)
        node_of = {g.gpu_id: g.node for g in view.cluster.gpus}
        host_sizes = [len(gs) for gs in self._allowed_by_node(view, set(node_of)).values()]
        out = Placements()
        for tid, placement in view.running.items():
            width = self.layout(self.stage_of(view.trial(tid).group_id))[1]
            if len(placement) < width:
                extra = co_located(idle, width - len(placement))
                if extra is not None:
                    self._take(idle, extra)
                    out.resize[tid] = placement + tuple((g, 1.0) for g in extra)
        for spec in view.pending:
            stage = self.stage_of(spec.group_id)
            slots, width = self.layout(stage)
            if running[stage] >= slots:
                continue
            gpus = co_located(idle, width)
            if gpus is None or hosts_of(gpus, node_of) > min_hosts(host_sizes, width):
                gpus = self._make_space(view, spec.trial_id, width, out, idle) or gpus
            if gpus is None and not view.running and not out.launch:
                gpus = co_located(idle, min(width, sum(len(g) for g in idle.values())) or 1)
            if gpus is None:
                continue
            self._take(idle, gpus)
            out.launch[spec.trial_id] = tuple((g, 1.0) for g in gpus)
            running[stage] += 1
        return out

    @staticmethod
    def _take(idle: dict[str, list[int]], gpus: list[int]) -> None:
        for node in idle:
            idle[node] = [g for g in idle[node] if g not in gpus]
