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

import math
from collections.abc import Collection, Mapping

from nbtune.allocators.allocator_protocol import SchedulingView
from nbtune.allocators.fluid import DynamicFluidAllocator, FluidEstimator, StaticFluidAllocator
from nbtune.core.resources import Placement, width
from tests.allocators.waterfill_reference import (
    reference_fill_leftover,
    reference_fluid_widths,
    reference_place_widths,
)

_TOL = 1e-9


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
                pl = _pooled_ref(tid, target[tid], view.cluster, held, self.c, caps)
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




def _pooled_ref(tid: int, w: float, cluster, held: Mapping[int, Placement], c: int,
                caps: Mapping[int, float]) -> Placement:
    """A scale-down to fraction ``w`` joins the fullest shared GPU with room (placed as a new
    trial with ``tid`` gone); if that is an idle GPU, it is re-placed where it is."""
    if w < 1 - _TOL:
        others = {t: pl for t, pl in held.items() if t != tid}
        pl = reference_place_widths({tid: w}, cluster, others, c=c, max_share=caps).get(tid)
        if pl is not None and any(g == pl[0][0] for o in others.values() for g, _ in o):
            return pl
    return reference_place_widths({tid: w}, cluster, held, c=c, max_share=caps)[tid]


def _steps_down_ref(w_target: float, w_now: float) -> list[float]:
    out = [w_target]
    k = math.floor(w_target + _TOL) - 1
    while k > w_now + _TOL and k >= 1:
        out.append(float(k))
        k -= 1
    return out
