"""Idle windows as capacity: straggler gaps, data-loading stalls, pipeline bubbles.

A GPU that is held but idle is capacity a tuner can use. Three kinds, each
with the model that sizes it and the policy that fills it:

(a) *straggler gaps* at synchronous barriers (SHA/SyncBOHB rungs): GPUs of
    trials that finished early sit idle until the slowest one ends.
    :func:`straggler_gaps` sizes them (``allocator="bubbles"`` predicts them
    from measured step times, :mod:`nbtune.allocators.bubble_windows`);
    :class:`~nbtune.allocators.fluid.DynamicFluidAllocator` fills them by
    widening the stragglers, and ``fill_barriers=True`` by continuing likely
    promotions speculatively (:mod:`nbtune.engine.barrier_fill`).
(b) *data-loading stalls* (HyperSack §I-A, Fig. 2): a lightweight trial keeps
    its GPU busy only a fraction u of each iteration. :func:`stall_oversubscription`
    turns measured busy fractions into how far a GPU can be oversubscribed
    before the busy periods must queue (a model: nothing calls it yet; the
    knapsack allocators' ratio is picked empirically by
    ``nbtune.allocators.oversubscription``).
(c) *pipeline bubbles* of a co-located large 1F1B job (Hydro §5.1): with p
    stages and m micro-batches a stage idles (p−1)/(m+p−1) of each iteration.
    :class:`PipelineHostModel` models the host job (bubble windows per stage, memory
    left per stage) and exposes its GPUs as *ephemeral* GPUs whose ``speed``
    is the fraction of a GPU a squeezed-in trial gets; :class:`BubbleSqueezer`
    wraps any allocator and gives those GPUs only to pausable trials that fit
    the memory the stage leaves. The simulator runs it unchanged: a trial on
    an ephemeral GPU progresses at that GPU's speed. What a guest costs the
    host and gets from a bubble is measured by a co-location probe
    (:class:`~nbtune.allocators.bubble_model.CoLocation`), not assumed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator, SchedulingView
from nbtune.allocators.bubble_model import CoLocation
from nbtune.allocators.fluid import FluidEstimator
from nbtune.allocators.profiling import profile_for
from nbtune.core.resources import GPU, ClusterSpec, Placement
from nbtune.core.tolerance import EPS

__all__ = ["IdleWindow", "straggler_gaps", "stall_oversubscription", "PipelineHostModel", "PipelineHost",
           "BubbleSqueezer"]


@dataclass(frozen=True)
class IdleWindow:
    """GPU ``gpu_id`` is idle (or has ``capacity`` of itself to spare) from ``start`` to ``end``.

    ``room_gb``: memory a guest may use beside what holds the GPU during the
    window (a pipeline host's measured limit less its stage's measured peak).
    """

    gpu_id: int
    start: float
    end: float
    kind: str
    capacity: float = 1.0
    room_gb: float = math.inf

    @property
    def gpu_seconds(self) -> float:
        return max(self.end - self.start, 0.0) * self.capacity


def straggler_gaps(finish: Mapping[int, float], start: float = 0.0) -> list[IdleWindow]:
    """Idle windows at a stage barrier: each GPU from its trial's finish to the last finish.

    ``finish`` maps GPU id to when the trial on it ended (one trial per GPU,
    as in FIFO). The windows' total is the work DynamicFluid can recover by
    widening the stragglers.
    """
    if not finish:
        return []
    barrier = max(finish.values())
    return [IdleWindow(g, max(t, start), barrier, "straggler")
            for g, t in sorted(finish.items()) if t < barrier]


def stall_oversubscription(busy_fractions: Sequence[float], *, max_ratio: float = 4.0) -> float:
    """How many GPUs' worth of trials one GPU can hold when each is busy only part of the time.

    A trial busy a fraction u of each iteration (the rest waits on its data
    loader) leaves 1 − u of the GPU idle; trials whose busy periods interleave
    fill it until Σu reaches 1. In units of *whole trials*, the GPU then holds
    1/mean(u) of them, i.e. the oversubscription ratio is 1/mean(u), capped at
    ``max_ratio`` because past it the CUDA cores and the CPU cores feeding the
    loaders saturate (HyperSack §V-D: the peak is near 3 on an A100).
    """
    us = [float(u) for u in busy_fractions]
    if not us:
        raise ValueError("need at least one busy fraction")
    if any(not 0 < u <= 1 for u in us):
        raise ValueError(f"busy fractions must be in (0, 1], got {us}")
    if max_ratio < 1:
        raise ValueError(f"max_ratio must be >= 1, got {max_ratio}")
    return min(1.0 / (sum(us) / len(us)), max_ratio)


@dataclass(frozen=True)
class PipelineHostModel:
    """A model of a 1F1B pipeline-parallel host job whose bubbles tuning trials may squeeze into.

    ``stages`` p, ``micro_batches`` m, ``iteration_time`` seconds per
    iteration, ``gpus_per_stage`` GPUs per stage, ``gpu_memory_gb`` per GPU,
    ``weights_gb`` per stage and ``activation_gb`` per in-flight micro-batch
    (stage s keeps p − s of them in 1F1B, so early stages have least memory
    left). ``efficiency`` is the share of a bubble a squeezed trial turns into
    progress (pause/resume at layer hooks and kernel start-up eat the rest;
    Hydro measured a ResNet-18 trial at ~15 % of its exclusive throughput in
    a GPT job's bubbles). ``idle``: each stage's *measured* idle share (else
    the formula's). ``colocation``: what a co-location probe measured (the
    host's slowdown under a guest, the guest's fill of a bubble, the stage's
    compute stretch); with it the host's iterations take T(1 + σ), each
    stage idles :func:`~nbtune.allocators.bubble_model.gated_idle` of them and
    a guest progresses at fill × that share (``efficiency`` is then unused).
    Without it: no slowdown, speed = idle share × ``efficiency`` (an assumption).
    ``resumptions``: per stage, how often its compute resumes after idling per
    iteration (read off the host's no-guest timeline); with them a probe that
    measured a per-resumption delay δ sets the slowdown to δ·n/T here
    (:meth:`CoLocation.at <nbtune.allocators.bubble_model.CoLocation.at>`), so a
    probe at 4 microbatches predicts a host at 8.
    """

    stages: int
    micro_batches: int
    iteration_time: float = 1.0
    gpus_per_stage: int = 1
    gpu_memory_gb: float = 80.0
    weights_gb: float = 20.0
    activation_gb: float = 4.0
    efficiency: float = 0.6
    idle: tuple[float, ...] = ()
    colocation: CoLocation | tuple[CoLocation, ...] | None = None
    resumptions: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.stages < 1 or self.micro_batches < 1 or self.gpus_per_stage < 1:
            raise ValueError("stages, micro_batches and gpus_per_stage must be >= 1")
        if not self.iteration_time > 0:
            raise ValueError(f"iteration_time must be > 0, got {self.iteration_time}")
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"efficiency must be in (0, 1], got {self.efficiency}")
        if self.idle and (len(self.idle) != self.stages or not all(0 <= x < 1 for x in self.idle)):
            raise ValueError(f"idle needs one fraction in [0, 1) per stage, got {self.idle}")
        if isinstance(self.colocation, tuple) and len(self.colocation) != self.stages:
            raise ValueError(f"colocation needs one probe per stage, got {len(self.colocation)}")
        if self.resumptions and (len(self.resumptions) != self.stages
                                 or any(n < 0 for n in self.resumptions)):
            raise ValueError(f"resumptions needs one count >= 0 per stage, got {self.resumptions}")
        if self.memory_left(0) < 0:
            raise ValueError("the host job's first stage does not fit its GPU memory")

    @property
    def bubble_ratio(self) -> float:
        """(p − 1)/(m + p − 1): the idle fraction of every stage in 1F1B."""
        p, m = self.stages, self.micro_batches
        return (p - 1) / (m + p - 1)

    def stage_idle(self, stage: int) -> float:
        """The idle fraction of ``stage``: measured if given, else :attr:`bubble_ratio`."""
        return self.idle[stage] if self.idle else self.bubble_ratio

    def probe(self, stage: int) -> CoLocation | None:
        """The co-location probe's numbers for ``stage`` (one for all stages, or per stage),
        carried to this host's resumptions when both are known."""
        c = self.colocation
        c = c[stage] if isinstance(c, tuple) else c
        if c is None or not self.resumptions:
            return c
        return c.at(self.iteration_time, self.resumptions[stage])

    @property
    def gated_iteration_time(self) -> float:
        """Seconds per iteration with guests in the bubbles: T(1 + max σ), the slowest stage
        setting the pipeline's pace (T without a probe)."""
        if self.colocation is None:
            return self.iteration_time
        return max(c.iteration_time(self.iteration_time)
                   for c in (self.probe(s) for s in range(self.stages)) if c is not None)

    def gated_stage_idle(self, stage: int) -> float:
        """``stage``'s idle share of a gated iteration: 1 − κ(1 − i)T / T(1 + σ)
        (:meth:`stage_idle` without a probe)."""
        c, idle = self.probe(stage), self.stage_idle(stage)
        if c is None:
            return idle
        busy = c.compute_stretch * (1.0 - idle) * self.iteration_time
        return max(1.0 - busy / self.gated_iteration_time, 0.0)

    def guest_speed(self, stage: int) -> float:
        """A guest's progress per second beside ``stage``: fill × gated idle share (measured),
        or idle share × ``efficiency`` (assumed) without a probe."""
        c = self.probe(stage)
        if c is None:
            return self.stage_idle(stage) * self.efficiency
        return c.fill * self.gated_stage_idle(stage)

    def memory_left(self, stage: int) -> float:
        """GPU memory a guest may use on ``stage`` (activations for p − s micro-batches held)."""
        if not 0 <= stage < self.stages:
            raise ValueError(f"stage must be in [0, {self.stages}), got {stage}")
        held = self.weights_gb + (self.stages - stage) * self.activation_gb
        return self.gpu_memory_gb - held

    def windows(self, stage: int, horizon: float, gpu_id: int = 0) -> list[IdleWindow]:
        """Bubble windows of one stage GPU up to ``horizon``: s slots before, p−1−s after.

        One forward+backward slot lasts T/(m + p − 1); stage s waits s slots
        for its first forward (warm-up) and p − 1 − s slots for the last
        backward (cool-down) in each iteration. With measured idle shares or a
        probe, the formula's shape with the measured length (gated iterations).
        """
        p, s, T = self.stages, stage, self.gated_iteration_time
        slot = T / (self.micro_batches + p - 1)
        if (self.idle or self.colocation is not None) and self.bubble_ratio > 0:
            slot *= self.gated_stage_idle(s) / self.bubble_ratio
        out: list[IdleWindow] = []
        k = 0
        while k * T < horizon:
            t0 = k * T
            spans = ((t0, t0 + s * slot) if s > 0 else None,
                     (t0 + T - (p - 1 - s) * slot, t0 + T) if p - 1 - s > 0 else None)
            for span in spans:  # a stage measured (almost) never idle has no window
                if span is not None and min(span[1], horizon) - span[0] > EPS:
                    out.append(IdleWindow(gpu_id, span[0], min(span[1], horizon), "bubble"))
            k += 1
        return out

    def ephemeral_gpus(self, first_id: int, node_prefix: str = "host") -> tuple[GPU, ...]:
        """The host's GPUs as guests see them: speed :meth:`guest_speed`, memory left."""
        return tuple(
            GPU(first_id + s * self.gpus_per_stage + j, f"{node_prefix}{s}", "bubble",
                self.guest_speed(s), self.memory_left(s))
            for s in range(self.stages) for j in range(self.gpus_per_stage)
        )

    def extend(self, cluster: ClusterSpec) -> ClusterSpec:
        """``cluster`` plus the host's ephemeral GPUs (ids after the largest existing one)."""
        first = max(g.gpu_id for g in cluster.gpus) + 1
        extra = self.ephemeral_gpus(first)
        cpus = dict(cluster.node_cpus)
        cpus.update({g.node: 8.0 for g in extra})
        return ClusterSpec(cluster.gpus + extra, cpus)


#: the model's former name, still importable; the real host job that trains in processes
#: is :class:`nbtune.bubbles.host.PipelineHost`
PipelineHost = PipelineHostModel


class _Restricted:
    """A view that shows only some GPUs (the exclusive ones) to the wrapped allocator."""

    def __init__(self, view: SchedulingView, keep: set[int], pending: Sequence[Any]) -> None:
        self._view, self._keep, self._pending = view, keep, pending
        self.cluster = ClusterSpec.of([g for g in view.cluster.gpus if g.gpu_id in keep],
                                      view.cluster.node_cpus)

    @property
    def pending(self) -> Sequence[Any]:
        return self._pending

    @property
    def running(self) -> Mapping[int, Placement]:
        return {t: pl for t, pl in self._view.running.items()
                if all(g in self._keep for g, _ in pl)}

    @property
    def gpu_load(self) -> Mapping[int, float]:
        return {g: v for g, v in self._view.gpu_load.items() if g in self._keep}

    @property
    def gpu_count(self) -> Mapping[int, int]:
        return {g: n for g, n in self._view.gpu_count.items() if g in self._keep}

    @property
    def idle_gpus(self) -> set[int]:
        return {g for g in self._view.idle_gpus if g in self._keep}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)


class BubbleSqueezer(BaseAllocator):
    """Hydro's Bubble Squeezer as a policy: exclusive GPUs to ``inner``, bubbles to pausable trials.

    GPUs of kind ``"bubble"`` (see :meth:`PipelineHostModel.extend`) are never shown
    to ``inner``. A pending trial goes onto an idle bubble GPU, alone and
    whole (its progress rate is the GPU's speed), only when ``pausable(config)``
    says it can run pause-and-resume at layer boundaries and its memory
    (``memory_gb(config)``, else the profiler's measured demand) fits what the
    stage leaves; the *shortest*-remaining fitting trials go first (Fluid's
    estimate), and a trial that would finish later in a bubble (at the GPU's
    ``speed``) than by waiting its turn on the exclusive GPUs is not put there:
    a bubble runs at a fraction of a GPU, so short work gains from it while
    long work would become the run's tail (Hydro squeezes multi-fidelity
    trials, most of which are terminated early). ``inner`` gets the trials
    first; bubbles take what it leaves waiting. For placing into *measured*
    idle windows of real workers see :class:`~nbtune.allocators.bubble_windows.BubblesAllocator`
    (``allocator="bubbles"``).
    """

    name = "bubble-squeezer"

    def __init__(
        self,
        inner: BaseAllocator,
        *,
        pausable: Callable[[Mapping[str, Any]], bool] = lambda cfg: True,
        memory_gb: Callable[[Mapping[str, Any]], float] | None = None,
        kind: str = "bubble",
    ) -> None:
        self.inner, self.pausable, self.memory_gb, self.kind = inner, pausable, memory_gb, kind

    def _split(self, view: SchedulingView) -> tuple[set[int], set[int]]:
        bubble = {g.gpu_id for g in view.cluster.gpus if g.kind == self.kind}
        return {g.gpu_id for g in view.cluster.gpus} - bubble, bubble

    def _memory(self, view: SchedulingView, tid: int, cfg: Mapping[str, Any]) -> float:
        if self.memory_gb is not None:
            return float(self.memory_gb(cfg))
        prof = profile_for(view.hints.get("profiles"), cfg)
        # memory nobody measured yet: run it on an exclusive GPU first, where it cannot overflow
        return float(prof.demand.memory_gb) if prof is not None else math.inf

    def capacity(self, view: SchedulingView) -> int:
        own, bubble = self._split(view)
        free_bubbles = len(view.idle_gpus & bubble)
        return self.inner.capacity(_Restricted(view, own, view.pending)) + free_bubbles

    def allocate(self, view: SchedulingView) -> Allocation:
        own, bubble = self._split(view)
        alloc = self.inner.allocate(_Restricted(view, own, view.pending))
        left = [s for s in view.pending if s.trial_id not in alloc.launch]
        free = sorted(view.idle_gpus & bubble)
        if not left or not free:
            return alloc
        gpus = view.cluster.by_id()
        est = FluidEstimator(view)
        h = est.h1({s.trial_id: s.budget for s in left})
        # when the exclusive GPUs would get through the queue (running work included)
        running = {t: view.trial(t).target_budget for t, pl in view.running.items()
                   if all(g in own for g, _ in pl)}
        backlog = sum(h.values()) + sum(est.h1(running).values())
        n_own = max(len(own), 1)
        for spec in sorted(left, key=lambda s: (h[s.trial_id], s.trial_id)):
            if not free:
                break
            if not self.pausable(spec.config):
                continue
            need = self._memory(view, spec.trial_id, spec.config)
            fit = [g for g in free if gpus[g].memory_gb + EPS >= need]
            if not fit:
                continue
            # the tightest memory that fits keeps roomy stages for bigger trials
            g = min(fit, key=lambda g: (gpus[g].memory_gb, g))
            if h[spec.trial_id] / max(gpus[g].speed, 1e-12) > backlog / n_own:
                continue  # slower in a bubble than waiting its turn: it would become the tail
            alloc.launch[spec.trial_id] = ((g, 1.0),)
            free.remove(g)
            backlog -= h[spec.trial_id]
        return alloc

    def max_share(self, view: SchedulingView, gpu_id: int) -> float:
        return self.inner.max_share(view, gpu_id)

    @staticmethod
    def speedup_bound(host: PipelineHostModel, exclusive_gpus: int) -> float:
        """Capacity with bubbles over capacity without: 1 + g·Σ guest speed / exclusive
        (1 + p·g·ratio·efficiency / exclusive for the formula's host without a probe)."""
        extra = host.gpus_per_stage * sum(host.guest_speed(s) for s in range(host.stages))
        return 1.0 + extra / max(exclusive_gpus, 1)
