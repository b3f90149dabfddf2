"""A co-location probe read off a real host run: the numbers the sim's bubble model takes.

A host run with ``HostSpec.ab_block = 1`` alternates *gated* iterations (the
guest computes in the bubbles) with *held* ones (the stage keeps its slot, the
guest sleeps), so both see the same load of a shared machine. :func:`phase`
reads, for any stretch of those iterations, what each stage measured: the
iteration windows (a stage's start to its next start: the gap between
iterations is idle time too), the compute seconds in each, the idle seconds
of the gated ones and the guest's progress in them: each guest step credited
the share of its running time that fell inside them (a gated guest pauses
mid-step, so a step can run in one gated iteration and end in the held one
after it). From a short first
stretch :meth:`Phase.colocation` gives the
:class:`~nbtune.allocators.bubble_model.CoLocation` (slowdown, fill, compute
stretch) the simulator's model is calibrated with; a later stretch is what
the calibrated model must predict (``benchmarks/bubble_fidelity.py``).
Nothing here is an oracle for the later stretch: a probe sees only its own
iterations.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from nbtune.allocators.bubble_model import CoLocation, resumptions
from nbtune.allocators.bubbles import PipelineHostModel
from nbtune.bubbles.guest import GuestSpec
from nbtune.bubbles.host import HostRun
from nbtune.bubbles.timeline import clip, idle_windows, merge, step_shares, total

__all__ = ["Phase", "phase", "iteration_window", "forecast", "model", "what_if"]


def iteration_window(run: HostRun, k: int, s: int) -> tuple[float, float]:
    """Iteration ``k`` of stage ``s``: from its start to the next one's start (its own end
    for the last iteration)."""
    lo = run.stage_spans[k][s][0]
    nxt = k + 1 < run.spec.iterations
    return lo, run.stage_spans[k + 1][s][0] if nxt else run.stage_spans[k][s][1]


@dataclass
class Phase:
    """Per stage, what a stretch of an A/B host run measured (seconds; lists over iterations)."""

    held_s: list[list[float]] = field(default_factory=list)
    gated_s: list[list[float]] = field(default_factory=list)
    held_busy_s: list[list[float]] = field(default_factory=list)
    gated_busy_s: list[list[float]] = field(default_factory=list)
    held_idle_s: list[float] = field(default_factory=list)  # summed over held iterations
    bubble_s: list[float] = field(default_factory=list)  # idle, summed over gated iterations
    steps: list[float] = field(default_factory=list)  # guest steps' shares run in gated iterations
    progress_s: list[float] = field(default_factory=list)  # steps × the guest's solo step time
    held_resumptions: list[list[int]] = field(default_factory=list)  # per held iteration
    held_k: list[int] = field(default_factory=list)  # the held iterations' indices, in order
    gated_k: list[int] = field(default_factory=list)  # the gated ones'

    @property
    def stages(self) -> list[int]:
        return list(range(len(self.held_s)))

    @property
    def gated(self) -> int:
        return len(self.gated_s[0])

    def held_iteration(self) -> float:
        """Median held iteration time (mean over stages): the host's pace without a guest."""
        return statistics.mean(statistics.median(x) for x in self.held_s)

    def held_idle(self, s: int) -> float:
        """Stage ``s``'s idle share in the held iterations (what a host publishes alone)."""
        return self.held_idle_s[s] / sum(self.held_s[s])

    def pairs(self, s: int) -> list[tuple[float, float]]:
        """Stage ``s``'s gated iterations, each beside the mean of its nearest held
        neighbours (before and after): a pair sees the same load, so a machine whose load
        drifts during the phase shifts both alike."""
        out = []
        for g, k in zip(self.gated_s[s], self.gated_k, strict=True):
            near = [self.held_s[s][j] for j in (bisect.bisect_left(self.held_k, k) - 1,
                                                bisect.bisect_left(self.held_k, k))
                    if 0 <= j < len(self.held_k)]
            if near:
                out.append((g, statistics.mean(near)))
        return out

    def slowdown(self) -> float:
        """Median over paired iterations of gated / held − 1, mean over stages."""
        return statistics.mean(statistics.median(g / h for g, h in self.pairs(s)) - 1.0
                               for s in self.stages)

    def delay(self) -> float:
        """Median over paired iterations of gated − held seconds, mean over stages."""
        return statistics.mean(statistics.median(g - h for g, h in self.pairs(s))
                               for s in self.stages)

    def resumptions(self, s: int) -> float:
        """Stage ``s``'s median resumptions per held iteration (its no-guest timeline)."""
        return statistics.median(self.held_resumptions[s])

    def fill(self, stages: Iterable[int] | None = None) -> float:
        """Guest progress seconds per bubble second over the gated iterations (0 without any)."""
        ss = self.stages if stages is None else list(stages)
        bubble = sum(self.bubble_s[s] for s in ss)
        return sum(self.progress_s[s] for s in ss) / bubble if bubble > 0 else 0.0

    def colocation(self, s: int) -> CoLocation:
        """The probe's numbers for stage ``s`` (σ and the delay shared: the host's iteration
        is one; δ = the paired delay over the stage's resumptions per held iteration)."""
        c = CoLocation.measure(self.held_s[s], self.gated_s[s], held_busy_s=self.held_busy_s[s],
                               gated_busy_s=self.gated_busy_s[s], bubble_s=self.bubble_s[s],
                               progress_s=self.progress_s[s])
        n = self.resumptions(s)
        return CoLocation(self.slowdown(), c.fill, c.compute_stretch,
                          chunk_delay=self.delay() / n if n > 0 else None)


def phase(run: HostRun, its: Iterable[int], guests: Mapping[int, GuestSpec],
          solo_step: Mapping[str, float]) -> Phase:
    """Read iterations ``its`` of ``run`` (an ``ab_block`` run) stage by stage.

    ``guests`` maps stage to guest; ``solo_step`` the guest's name to its
    solo seconds per step (measured alone, as a scheduler's profiler would).
    """
    spec, its = run.spec, list(its)
    out = Phase()
    for s in range(spec.stages):
        stage = [iv for it in run.iterations for iv in it[s]]
        held, gated, hb, gb, res = [], [], [], [], []
        held_idle = bubble = 0.0
        windows: list[tuple[float, float]] = []
        g = guests.get(s)
        for k in its:
            lo, hi = iteration_window(run, k, s)
            idle = total(idle_windows(stage, lo, hi))
            if spec.gated(k):
                gated.append(hi - lo)
                gb.append(hi - lo - idle)
                bubble += idle
                windows.append((lo, hi))
            else:
                held.append(hi - lo)
                hb.append(hi - lo - idle)
                held_idle += idle
                res.append(resumptions(clip(merge(run.iterations[k][s]), lo, hi)))
        out.held_s.append(held)
        out.gated_s.append(gated)
        out.held_busy_s.append(hb)
        out.gated_busy_s.append(gb)
        steps = 0.0
        if g is not None:
            ran = run.guests[g.name]
            steps = sum(step_shares(ran.started, ran.step_ends, run.guest_ran(s, g.name), windows))
        out.held_idle_s.append(held_idle)
        out.bubble_s.append(bubble)
        out.steps.append(steps)
        out.progress_s.append(steps * (solo_step[g.name] if g is not None else 0.0))
        out.held_resumptions.append(res)
    out.held_k = [k for k in its if not spec.gated(k)]
    out.gated_k = [k for k in its if spec.gated(k)]
    return out


def forecast(model: PipelineHostModel, gated: int) -> dict[str, float]:
    """What ``model`` says ``gated`` gated iterations measure: the host's slowdown, the
    stages' bubble seconds (from its windows) and the guests' fill of them."""
    horizon = gated * model.gated_iteration_time
    bubble = [sum(w.gpu_seconds for w in model.windows(s, horizon)) for s in range(model.stages)]
    progress = [model.guest_speed(s) * horizon for s in range(model.stages)]
    return {"slowdown": model.gated_iteration_time / model.iteration_time - 1.0,
            "fill": sum(progress) / sum(bubble) if sum(bubble) > 0 else 0.0,
            "bubble_s": sum(bubble)}


def model(probe: Phase, microbatches: int, *, feed: Phase | None = None) -> PipelineHostModel:
    """The simulator's bubble model calibrated by ``probe`` (σ, φ, κ, δ per stage) and fed
    ``feed``'s held figures (default: the probe's own): the no-guest iteration time, each
    stage's idle share and resumptions per iteration, what a host publishes alone."""
    f = probe if feed is None else feed
    return PipelineHostModel(len(f.stages), microbatches, iteration_time=f.held_iteration(),
                       idle=tuple(min(f.held_idle(s), 0.999) for s in f.stages),
                       colocation=tuple(probe.colocation(s) for s in probe.stages),
                       resumptions=tuple(f.resumptions(s) for s in f.stages))


def what_if(probe: Phase, target: Phase, microbatches: int) -> dict[str, dict[str, float]]:
    """The probe-calibrated model (``new``: the probe's per-resumption delay carried to
    ``target``'s resumptions; ``ratio``: the probe's σ as it is) and the assumed one
    (``old``: no slowdown, fill = its ``efficiency``) against ``target``'s gated iterations
    (``measured``), all fed only ``target``'s held figures (what the host publishes without
    a guest: iteration time, idle shares, resumptions); ``*_error``: the relative errors."""
    new = model(probe, microbatches, feed=target)
    ratio = replace(new, resumptions=())
    old = replace(new, colocation=None, resumptions=())
    got = {"slowdown": target.slowdown(), "fill": target.fill(), "bubble_s": sum(target.bubble_s)}
    out = {"measured": got, "new": forecast(new, target.gated),
           "ratio": forecast(ratio, target.gated), "old": forecast(old, target.gated)}
    for k in ("new", "ratio", "old"):
        out[f"{k}_error"] = {f: (out[k][f] - v) / abs(v) if v else 0.0 for f, v in got.items()}
    return out
