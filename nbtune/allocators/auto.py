"""``allocator="auto"``: FIFO until measurements show that packing or scaling pays.

Water-filling and the knapsack win only where their premise holds: a second
trial packed onto a GPU must run faster than after the first (Fluid's
marginal benefit O^2 > O_th), or a trial must speed up on more GPUs. On CPU
workers neither holds (two trials time-slice one core), and a policy that
packs anyway is slower than FIFO. So ``auto`` decides from what the
runtime's profiler measured (``hints["profiles"]``), per decision:

1. Nothing measured packing yet: FIFO, one trial per GPU. Once a model's
   time alone is known and two trials wait, it runs one *probe*: two trials
   packed on one idle GPU (Fluid §4.2.2's "trial and error"), which gives
   the profiler T^2 and so c. On a GPU where packing does not pay this
   costs at most those two trials' slowdown, the same work FIFO would do.
   On CPU stand-ins the probe first waits for the trial's runnable share
   (``awaits_demand``): a trial that fills its core settles c = 1 with no
   probe, and one that leaves room is probed.
2. A measured c > 1 or d > 1 for the trials in play: ``fluid+knapsack``
   (HyperSack's demands, Fluid's widths) with c and d as measured; an
   unmeasured d is 1 (a plain training function gains nothing from a second
   worker unless it is data-parallel, and only a measurement can say so).
   On real GPUs, before any packing is measured, the profiler's *GPU room*
   does too: a model that NVML shows busy at most half the time alone
   (``gpu_room`` ≥ 2) is packed at once, c = that room, capped; so is a model
   of the same family (the same configuration keys) not measured yet, at the
   smallest room measured in its family (``similar_room``); packed times
   measured later settle c as in 1. Many small configurations of different
   shapes (each its own signature, each stopped early) never give the probe
   two trials of one model to run together, and FIFO would leave their GPU
   mostly idle.
3. Otherwise (c = 1 and d = 1 measured): FIFO for the rest of the run.

A second run of the same model reads c and d from the job history and
starts in the right mode, without a probe.
"""

from __future__ import annotations

from typing import Any

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator, SchedulingView
from nbtune.allocators.fifo import FifoAllocator
from nbtune.allocators.fluid_knapsack import FluidKnapsackAllocator
from nbtune.allocators.profiling import Profile, profile_for

__all__ = ["AutoAllocator"]


class AutoAllocator(BaseAllocator):
    """FIFO, one packing probe per model, then ``fluid+knapsack`` where measurements say it pays.

    ``probe=False`` never packs to measure (FIFO unless a job history says
    otherwise); other keyword arguments go to :class:`FluidKnapsackAllocator`.
    """

    name = "auto"

    def __init__(self, *, probe: bool = True, **fluid_options: Any) -> None:
        self.probe = probe
        self.fifo = FifoAllocator()
        self.fluid = FluidKnapsackAllocator(**fluid_options)
        self._max_c, self._max_d = self.fluid.sizing.max_c, self.fluid.sizing.max_d
        #: "fifo" or "fluid": the mode of the last decision (for logs and tests)
        self.mode = "fifo"

    # ---------------------------------------------------------------- choice
    def _profiles(self, view: SchedulingView) -> list[Profile]:
        store = view.hints.get("profiles")
        if store is None:
            return []
        out, seen = [], set()
        # the trials to place now: a running trial's model was looked at when it was pending
        for cfg in [s.config for s in view.pending]:
            prof = profile_for(store, cfg)
            if prof is not None and prof.signature not in seen:
                seen.add(prof.signature)
                out.append(prof)
        return out

    def _choose(self, view: SchedulingView) -> list[Profile]:
        profs = self._profiles(view)
        if not profs:
            return profs  # nothing in play is measured (or nothing in play): keep the mode
        store = view.hints.get("profiles")
        room = getattr(store, "gpu_room", None)
        similar = getattr(store, "similar_room", None)
        rooms = {}
        for p in profs:
            if p.c_measured or room is None:
                continue
            r = room(p.signature)
            if r is None and similar is not None:  # not measured yet: as its family's
                r = similar(p.signature)           # most demanding measured member
            if r is not None:
                rooms[p.signature] = r
        pays = [p for p in profs if (p.c_measured and p.c > 1) or (p.d_measured and p.d > 1)
                or rooms.get(p.signature, 0.0) >= 2.0]
        if pays:
            ds = [p.d for p in profs if p.d_measured]
            # c by room where packing is not measured yet (measured c: the profiles say)
            self.fluid.sizing.limit(
                c=min([self._max_c, *(int(r) for r in rooms.values() if r >= 2.0)]),
                d=min([self._max_d, *ds]) if ds else 1)
            self.mode = "fluid"
        else:
            self.mode = "fifo"
        return profs

    def _probe_due(self, view: SchedulingView, profs: list[Profile]) -> Profile | None:
        """The profile of a model timed alone whose packing nobody measured, if a probe may run."""
        if not self.probe or not view.idle_gpus:
            return None
        store = view.hints.get("profiles")
        awaits = getattr(store, "awaits_demand", None)  # CPU stand-ins: measure room first
        due = [p for p in profs if 1 in p.packing and not p.c_measured
               and not (awaits is not None and awaits(p.signature))]
        if not due:
            return None
        # a probe under way (trials packed on a GPU): wait for its measurement. Read from
        # the view, not remembered, so a resumed run decides as the first one did
        probing = {q.signature for tid, pl in view.running.items() if pl and pl[0][1] < 1.0
                   and (q := profile_for(store, view.trial(tid).config)) is not None}
        return next((p for p in due if p.signature not in probing), None)

    # -------------------------------------------------------------- protocol
    def capacity(self, view: SchedulingView) -> int:
        profs = self._choose(view)
        if self.mode == "fluid":
            return self.fluid.capacity(view)
        room = self.fifo.capacity(view)
        if self._probe_due(view, profs) is not None and view.max_concurrent is None:
            room += 2  # a second trial for the probe's GPU, and one to follow it
        return room

    def allocate(self, view: SchedulingView) -> Allocation:
        profs = self._choose(view)
        if self.mode == "fluid":
            return self.fluid.allocate(view)
        due = self._probe_due(view, profs)
        if due is not None:
            store = view.hints.get("profiles")
            # a held trial goes on where its process waits (FIFO gives it that GPU): it is not
            # probed, and its GPU is not the probe's. Moved, its process would be given up and
            # a trial that keeps no checkpoint would restart with its in-memory state lost
            held = getattr(view, "held", None) or {}
            homes = {pl[0][0] for tid, pl in held.items() if len(pl) == 1}
            fits = [s for s in view.pending if _left(view, s) >= 2.0 and s.trial_id not in held
                    and (q := profile_for(store, s.config)) is not None
                    and q.signature == due.signature]
            pair = sorted(fits, key=lambda s: _left(view, s))[:2]  # the cheapest probe
            free = sorted(view.idle_gpus - homes)
            # never at the tail: with nothing queued behind the pair it would be the critical path
            if len(pair) == 2 and free and len(view.pending) > 2 and (
                    view.max_concurrent is None or view.max_concurrent - len(view.running) >= 2):
                g = free[0]
                launch = {s.trial_id: ((g, 0.5),) for s in pair}
                rest = self.fifo.allocate(_Without(view, set(launch), g))
                launch.update(rest.launch)
                return Allocation(launch=launch)
        return self.fifo.allocate(view)

    def max_share(self, view: SchedulingView, gpu_id: int) -> float:
        return self.fluid.max_share(view, gpu_id) if self.mode == "fluid" else 1.0


def _left(view: SchedulingView, spec: Any) -> float:
    """Budget units the spec still has to train: a probe needs two reports while packed.

    The profiler times intervals between reports during which the packing did
    not change; the first report of a packed trial ends an interval in which its
    partner may not have started yet, so only the second one measures T^2.
    """
    try:
        used = view.trial(spec.trial_id).budget_used
    except KeyError:
        used = 0.0
    return spec.budget - used


class _Without:
    """The view less some pending trials and one GPU (what the probe took)."""

    def __init__(self, view: SchedulingView, taken: set[int], gpu: int) -> None:
        self._view, self._taken, self._gpu = view, taken, gpu

    @property
    def pending(self) -> list[Any]:
        return [s for s in self._view.pending if s.trial_id not in self._taken]

    @property
    def idle_gpus(self) -> set[int]:
        return self._view.idle_gpus - {self._gpu}

    @property
    def max_concurrent(self) -> int | None:
        mc = self._view.max_concurrent
        return None if mc is None else mc - len(self._taken)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)
