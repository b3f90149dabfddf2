"""Hydro's heterogeneity-aware placement (§5.2): a trial that cannot fill a fast GPU runs on an older one.

Hydro's TargetTrial (the full model, trained alone and unfused) "may not be able
to fully utilize the GPU resources", so Hydro places it "on a GPU of old version
(e.g., V100) if its SM Activity rate ... is lower than 50%": a trial bounded by
something other than the GPU runs almost as fast on a slower one, and the fast
GPU is left to work that fills it (fused surrogates, other jobs).

:class:`HeterogeneityAware` wraps any allocator with that rule. After the base
allocator has placed its launches, a launch of a target trial on one whole GPU
whose *measured* utilization is below ``threshold`` moves to the slowest idle
GPU that is slower than the one it was given. The utilization is the runtime
profiler's (NVML's SM activity on GPUs, psutil's CPU share on CPU workers), by
model signature: the first target of a model is measured where the base
allocator put it, and the targets that replace it (eager transfer starts a new
target whenever the best surrogate configuration changes) are placed by that
measurement. Nothing measured, a single kind of GPU, or no slower GPU idle: the
base allocator's placement stands. ``targets_only=False`` applies the rule to
every single-GPU launch (Hydro's "similar action ... to surrogate models").
"""

from __future__ import annotations

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator, SchedulingView
from nbtune.allocators.demand import trial_demand
from nbtune.core.roles import is_target
from nbtune.core.tolerance import EPS

__all__ = ["HeterogeneityAware"]


class HeterogeneityAware(BaseAllocator):
    """``base``'s placements, with under-utilizing target trials moved to slower idle GPUs."""

    name = "hetero"

    def __init__(self, base: BaseAllocator | None = None, *, threshold: float = 0.5,
                 targets_only: bool = True) -> None:
        from nbtune.allocators.auto import AutoAllocator

        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold is a utilization in (0, 1], got {threshold!r}")
        self.base = base if base is not None else AutoAllocator()
        self.threshold = float(threshold)
        self.targets_only = bool(targets_only)
        #: trial ids this allocator moved to a slower GPU (for logs and tests)
        self.moved: list[int] = []

    def capacity(self, view: SchedulingView) -> int:
        return self.base.capacity(view)

    def max_share(self, view: SchedulingView, gpu_id: int) -> float:
        return self.base.max_share(view, gpu_id)

    def allocate(self, view: SchedulingView) -> Allocation:
        alloc = self.base.allocate(view)
        speed = {g.gpu_id: g.speed for g in view.cluster.gpus}
        if not alloc.launch or len(set(speed.values())) < 2:
            return alloc
        taken = {g for pl in (*alloc.launch.values(), *alloc.resize.values()) for g, _ in pl}
        free = sorted((g for g in view.idle_gpus if g not in taken), key=lambda g: (speed[g], g))
        launch = dict(alloc.launch)
        for tid, placement in alloc.launch.items():
            if len(placement) != 1 or placement[0][1] < 1.0 - EPS:
                continue  # a wide or packed launch was sized for its GPUs: left as it is
            config = view.trial(tid).config
            if self.targets_only and not is_target(config):
                continue
            if trial_demand(view, tid, config).compute >= self.threshold:
                continue  # it fills the GPU (or nothing is measured: default demand 1.0)
            g = placement[0][0]
            slower = [h for h in free if speed[h] < speed[g] - EPS]
            if slower:
                launch[tid] = ((slower[0], 1.0),)  # the slowest: the "old version"
                free.remove(slower[0])
                self.moved.append(tid)
        return Allocation(launch=launch, resize=dict(alloc.resize))
