"""The runtime's profiler: c, d, α, β, ε and each trial's demand, measured while trials run.

Fluid §4.2.2 measures the packing limit c and the scaling limit d "by trial
and error" from a few iterations at p = 1, 2, … trials per GPU and at 1, 2,
4 GPUs; HyperSack's Sampler (§IV-C1) does the same for a trial's demand and
keeps the result in a *job history* keyed by the model so the next run of
that model starts with measured numbers. This is that sampler, and it is one
object for both runtimes: it watches the engine (``engine.subscribe``) and
times what the runtime reports — a real run's wall clock on Dask, the
simulated clock in the simulator — so the simulator's workload model reaches
the allocators only as a measurement of it would, never as its parameters.

What it records, per model signature (:func:`model_key` of the trainable +
:func:`~nbtune.allocators.profiling.model_signature` of the config):

* seconds per budget unit between two reports, keyed by how many trials
  shared the trial's GPU (p) and by its width w, only for intervals during
  which neither changed; an interval that begins at a (re)start is kept
  apart (pipeline set-up, HyperSack skips it) and used only when nothing
  else was measured at that (p, w);
* ε: how much longer the first interval after a resize took than the old
  and new widths' unit times predict;
* demand: utilization and memory samples (NVML on GPUs, psutil on CPU
  workers, the simulated GPU in the simulator) of GPUs that held exactly one
  trial, and on CPU workers the runnable share that bounds packing.

It is the ProfileStore the allocators read (``engine.hints["profiles"]``): ``get(signature)``
answers from this run's measurements, falling back field by field to the job history,
into which :meth:`Profiler.flush` writes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nbtune.allocators.profile_summary import fit_resize_cost, summarize
from nbtune.allocators.profiling import Profile, ProfileStore, model_signature
from nbtune.core import events as ev
from nbtune.core.commands import Command, Finish, Launch, Pause, Resize, Stop
from nbtune.core.resources import GPU, Demand, Placement
from nbtune.runtimes.model_key import model_key
from nbtune.runtimes.profile_samples import ROOM_SAMPLES, SAMPLES, Mark, Obs, add, mean

if TYPE_CHECKING:
    from nbtune.engine.engine import Engine
    from nbtune.runtimes.runtime_protocol import Runtime

__all__ = ["Profiler", "model_key", "attach_profiler"]

log = logging.getLogger(__name__)

_TOL = 1e-6
_REPORTED = ev.TrialReported  # compared with every event's type


class Profiler:
    """HyperSack's sampler on the engine's event stream; a ProfileStore for the allocators.

    ``history`` is the job history (an in-memory or SQL
    :class:`~nbtune.allocators.profiling.ProfileStore`) read at the start of
    a run and written by :meth:`flush`; ``signature_keys`` name the config
    entries that change a trial's cost (default: every non-float entry).
    ``threshold`` is Fluid's O_th for c (the paper leaves it open; 0.1 sits
    above the noise of wall-clock step times on a shared machine, and a packed
    trial's fixed per-step costs keep a packing that only time-slices one core
    just under O = 0), ``min_gain`` the least
    speed-up a doubling of GPUs must buy for d.
    """

    def __init__(self, history: ProfileStore | None = None, *,
                 signature_keys: Iterable[str] | None = None,
                 threshold: float = 0.1, min_gain: float = 0.1) -> None:
        self.history = history
        self.keys = None if signature_keys is None else list(signature_keys)
        self.threshold, self.min_gain = threshold, min_gain
        #: the runtime's GPUs are time-sliced CPU stand-ins whose samples carry runnable shares
        self.time_sliced = False
        self.model = ""
        self._engine: Any = None
        self._cluster_seen, self._cpus = None, False  # .sliced, per cluster
        self._obs: dict[str, Obs] = {}
        self._families: dict[str, frozenset[str]] = {}  # signature -> its config keys
        self._cache: dict[str, Profile | None] = {}
        self._hist: dict[str, Profile | None] = {}
        self._sig_of: dict[int, str] = {}
        self._where: dict[int, Placement] = {}      # trial -> placement it holds
        self._on_gpu: dict[int, set[int]] = {}      # gpu -> trials
        self._gen: dict[int, int] = {}              # gpu -> changes of occupancy
        self._marks: dict[int, Mark] = {}
        self._started: set[int] = set()             # trials whose process is running
        self._sigs: dict[int, tuple[Mapping[str, Any], str]] = {}
        self._launched: dict[int, tuple[Mapping[str, Any], str]] = {}  # trial -> config, sig

    # ------------------------------------------------------------ wiring
    def attach(self, engine: Engine, trainable: Any) -> None:
        """Watch ``engine`` and become its ``hints["profiles"]``."""
        self.model = model_key(trainable)
        self._engine = engine
        engine.set_hint("profiles", self)
        engine.subscribe(self._observe)

    # ------------------------------------------------- ProfileStore protocol
    def get(self, signature: str) -> Profile | None:
        try:
            return self._cache[signature]
        except KeyError:
            pass
        prof = self._build(signature)
        self._cache[signature] = prof
        return prof

    def put(self, profile: Profile) -> None:
        """Record a profile as job history for this model (e.g. from an offline probe)."""
        if not isinstance(profile, Profile):
            raise TypeError(f"expected a Profile, got {type(profile).__name__}")
        self._hist[profile.signature] = profile
        self._cache.pop(profile.signature, None)
        if self.history is not None:
            self.history.put(replace(profile, signature=self._key(profile.signature)))

    def signature(self, config: Mapping[str, Any]) -> str:
        """The config's model signature (remembered per config object: allocators ask often)."""
        hit = self._sigs.get(id(config))
        if hit is not None and hit[0] is config:
            return hit[1]
        sig = model_signature(config, self.keys)
        self._sigs[id(config)] = (config, sig)
        return sig

    def remembers(self, trainable: Any, config: Mapping[str, Any]) -> bool:
        """Whether the job history holds a profile of ``config``'s model for ``trainable``."""
        if self.history is None:
            return False
        return self.history.get(f"{model_key(trainable)}|{self.signature(config)}") is not None

    def measured(self) -> dict[str, Profile]:
        """Profiles of every signature this run measured."""
        out = {}
        for sig in self._obs:
            prof = self.get(sig)
            if prof is not None:
                out[sig] = prof
        return out

    def flush(self) -> None:
        """Write this run's profiles into the job history (done when the experiment finishes)."""
        if self.history is None:
            return
        for sig, prof in self.measured().items():
            self.history.put(replace(prof, signature=self._key(sig)))

    # ---------------------------------------------------------- building
    def _key(self, sig: str) -> str:
        return f"{self.model}|{sig}"

    def _past(self, sig: str) -> Profile | None:
        if sig not in self._hist:
            prof = None if self.history is None else self.history.get(self._key(sig))
            self._hist[sig] = None if prof is None else replace(prof, signature=sig)
        return self._hist[sig]

    def _build(self, sig: str) -> Profile | None:
        past = self._past(sig)
        obs = self._obs.get(sig)
        if obs is None:
            return past
        pack = {p: mean(v) for p, v in obs.packing.items() if v}
        scale = {w: mean(v) for w, v in obs.scaling.items() if v}
        # set-up intervals only where nothing else is known, scaled by steady/set-up time alone
        first = {pw: mean(v) for pw, v in obs.first.items() if v}
        alone = first.pop((1, 1), None)
        if alone is not None:
            pack.setdefault(1, alone)
        k = pack[1] / alone if alone and 1 in pack else 1.0
        for (p, w), t in first.items():
            if w == 1 and p not in pack:
                pack[p] = t * k
            elif p == 1 and w not in scale:
                scale[w] = t * k
        base = past or Profile(sig)
        util = obs.compute_share() if obs.util else base.demand.compute
        mem = max(obs.memory) if obs.memory else base.demand.memory_gb
        return summarize(base, pack, scale, Demand(util, mem, base.demand.cpus),
                         fit_resize_cost(obs.resize, pack, scale) or base.resize_cost,
                         self.threshold, self.min_gain,
                         runnable=self.runnable(sig))

    def runnable(self, sig: str) -> float | None:
        """The highest runnable share sampled of ``sig`` alone (None: fewer than two samples)."""
        obs = self._obs.get(sig)
        return max(obs.demand) if obs is not None and len(obs.demand) > 1 else None

    def gpu_room(self, sig: str) -> float | None:
        """How many trials of ``sig`` one GPU has compute for: 1 / NVML utilization alone.

        HyperSack §IV packs by measured compute demand (a small CNN can keep a GPU only a
        few percent busy, while ``auto`` would stay FIFO for want of a probe). None on
        time-sliced stand-ins (a CPU share is no GPU idle time) and before
        :data:`~nbtune.runtimes.profile_samples.ROOM_SAMPLES` samples alone."""
        obs = self._obs.get(sig)
        ok = obs is not None and len(obs.util) >= ROOM_SAMPLES and not self.sliced
        return 1.0 / obs.compute_share() if ok else None

    def similar_room(self, sig: str) -> float | None:
        """A conservative GPU room for ``sig`` before its own is measured: the smallest
        :meth:`gpu_room` among this run's signatures of the same model family (the same
        configuration keys: another batch size or width of the model). None where none is
        measured, and on time-sliced stand-ins."""
        keys = self._family(sig)
        rooms = [r for other in self._obs if other != sig and self._family(other) == keys
                 and (r := self.gpu_room(other)) is not None]
        return min(rooms) if rooms else None

    def _family(self, sig: str) -> frozenset[str] | None:
        fam = self._families.get(sig)
        if fam is None:
            try:
                fam = frozenset(json.loads(sig))
            except (ValueError, TypeError):
                fam = frozenset()
            self._families[sig] = fam
        return fam

    def wants_sample(self, trial_id: int, memory_gb: float) -> bool:
        """Whether a sample of ``trial_id`` alone (utilization, ``memory_gb``, no runnable
        share) could still add to its signature's measurements. False once the signature
        holds :data:`~nbtune.runtimes.profile_samples.SAMPLES` utilization samples and, for a
        sample that carries memory, as many memory samples: the lists only grow, so a
        runtime may stop taking such samples for good (the simulator does)."""
        sig = self._sig_of.get(trial_id)
        obs = None if sig is None else self._obs.get(sig)
        if obs is None or len(obs.util) < SAMPLES:
            return True
        return memory_gb > 0 and len(obs.memory) < SAMPLES

    def awaits_demand(self, sig: str) -> bool:
        """A packing probe of ``sig`` should wait: its runnable share, which may settle c, is due."""
        return self.sliced and self.runnable(sig) is None

    @property
    def sliced(self) -> bool:
        """Time-sliced stand-ins: the runtime says so, or every GPU is a CPU (kind ``"cpu"``),
        read from the cluster's recorded events, so a resumed run's replay agrees."""
        try:
            cluster = self._engine.cluster
        except Exception:  # not attached, or no cluster yet
            return self.time_sliced
        if cluster is not self._cluster_seen:
            self._cluster_seen, self._cpus = cluster, cluster.cpu_stand_ins
        return self.time_sliced or self._cpus

    def probe(self, workload: Any, configs: Iterable[Mapping[str, Any]],
              gpu: GPU | None = None) -> list[Profile]:
        """Short probes of a simulated model: HyperSack's sampler before the run, in the simulator.

        Times one budget unit of each signature's first config on simulated GPUs alone,
        packed p = 2, 3, 4 and at 1, 2, 4 GPUs, reads utilization and memory as NVML
        would, and puts the results in the job history. Call after :meth:`attach`.
        """
        from nbtune.workloads.workload_protocol import (
            Neighbor,  # the simulated models' package, on first use
        )

        if not self.model:
            self.model = model_key(workload)
        gpu = gpu or GPU(0)
        gpus = {i: replace(gpu, gpu_id=i) for i in range(4)}
        seen: dict[str, Mapping[str, Any]] = {}
        for cfg in configs:
            seen.setdefault(self.signature(cfg), cfg)
        out = []
        for sig, cfg in seen.items():
            dem = workload.demand(-1, cfg)

            def unit(pl: Placement, nb: int, cfg: Mapping[str, Any] = cfg,
                     dem: Demand = dem) -> float:
                share = pl[0][1]
                others = tuple(Neighbor(-2 - i, share, dem) for i in range(nb))
                return 1.0 / workload.rate(-1, cfg, pl, gpus, others)

            pack = {p: unit(((0, 1.0 / p),), p - 1) for p in (1, 2, 3, 4)}
            scale = {w: unit(tuple((g, 1.0) for g in range(w)), 0) for w in (1, 2, 4)}
            util = Demand(min(dem.compute, 1.0), dem.memory_gb, dem.cpus)
            prof = summarize(Profile(sig), pack, scale, util, None, self.threshold, self.min_gain)
            self.put(prof)
            out.append(prof)
        return out

    # --------------------------------------------------------- observing
    def _observe(self, events: tuple[ev.Event, ...], cmds: list[Command]) -> None:
        try:
            if not cmds and len(events) == 1:
                # the hot path: one report, nothing decided; once the trial's shape holds
                # enough unit times the report only moves its mark on
                e = events[0]
                if type(e) is _REPORTED:
                    tid = e.trial_id
                    m = self._marks.get(tid)
                    if m is not None and m.full and m.resized_at is None:
                        m.time, m.budget = e.time, e.budget
                        if tid not in self._engine.running:
                            self._leave(tid)
                        return
            self._take(events, cmds)
        except Exception:  # a lost measurement must not take the experiment down
            log.exception("nbtune profiler: measurements of this batch were lost")

    def _take(self, events: tuple[ev.Event, ...], cmds: list[Command]) -> None:
        eng = self._engine
        touched: set[str] = set()
        if not cmds and len(events) == 1 and type(events[0]) is ev.TrialReported:
            e = events[0]  # one report, nothing decided
            self._reported(eng, e, touched)
            if e.trial_id not in eng.running:
                self._leave(e.trial_id)
            for sig in touched:
                self._cache.pop(sig, None)
            return
        for e in events:
            kind = type(e)
            if kind is ev.TrialReported:
                self._reported(eng, e, touched)
            elif kind is ev.TrialStarted:
                tid = e.trial_id
                if tid in self._where and tid not in self._started:
                    self._started.add(tid)  # it shares its GPUs from now on, not from its launch
                    self._enter(tid, self._where[tid])
                self._mark(eng, tid, e.time, None, first=True)
            elif kind is ev.TrialFailed or kind is ev.TrialReturned:
                self._leave(e.trial_id)
            elif kind is ev.UtilizationSampled:
                self.sampled(e, touched)
            elif kind is ev.TrialSampled:
                self._take_sample(e.trial_id, e.util, e.memory_gb, touched)
        for c in cmds:
            kind = type(c)
            if kind is Launch:
                tid = c.trial_id
                self._leave(tid)
                self._where[tid] = c.placement
                last = self._launched.get(tid)  # a resumed trial's config is a new, equal dict
                if last is None or (last[0] is not c.config and last[0] != c.config):
                    last = self._launched[tid] = (c.config, self.signature(c.config))
                self._sig_of[tid] = last[1]
            elif kind is Resize:
                tid = c.trial_id
                if tid in self._started:
                    self._vacate(tid)
                    self._enter(tid, c.placement)
                self._where[tid] = c.placement
                m = self._marks.get(tid)
                if m is not None:
                    m.resized_at = eng.time
            elif kind is Pause or kind is Stop:
                self._leave(c.trial_id)
            elif kind is Finish:
                self.flush()
        running = eng.running
        for e in events:  # trials the engine ended on their own report (a rung reached)
            if type(e) is ev.TrialReported and e.trial_id not in running:
                self._leave(e.trial_id)
        for sig in touched:
            self._cache.pop(sig, None)

    def _enter(self, tid: int, placement: Placement) -> None:
        for g, _ in placement:
            self._on_gpu.setdefault(g, set()).add(tid)
            self._gen[g] = self._gen.get(g, 0) + 1

    def _vacate(self, tid: int) -> None:
        for g, _ in self._where.get(tid, ()):
            tids = self._on_gpu.get(g)
            if tids is not None and tid in tids:
                tids.discard(tid)
                self._gen[g] = self._gen.get(g, 0) + 1

    def _leave(self, tid: int) -> None:
        self._marks.pop(tid, None)
        if tid in self._started:
            self._started.discard(tid)
            self._vacate(tid)
        self._where.pop(tid, None)

    def _context(self, tid: int) -> tuple[int, int, int] | None:
        """(p, w, generation) of the trial's placement; None when it is no measurable shape."""
        pl = self._where.get(tid)
        if not pl:
            return None
        if len(pl) == 1:  # the common case, spelled out (this runs twice per report)
            g, width = pl[0]
            gen = self._gen.get(g, 0)
            on = self._on_gpu.get(g)
            occupants = len(on) if on else 0
        else:
            gen = sum(self._gen.get(g, 0) for g, _ in pl)
            occupants = max(len(self._on_gpu.get(g, ())) for g, _ in pl)
            width = sum(s for _, s in pl)
        if width < 1 - _TOL:  # packed: the measurement is for share 1/p among p trials
            p = round(1 / width)
            return (p, 1, gen) if abs(p * width - 1) < 1e-3 and occupants == p else None
        w = round(width)
        return (1, w, gen) if abs(w - width) < 1e-3 and occupants == 1 else None

    def _mark(self, eng: Any, tid: int, now: float, budget: float | None, *, first: bool,
              ctx: tuple[int, int, int] | None | bool = False) -> None:
        if ctx is False:
            ctx = self._context(tid)
        if ctx is None:
            self._marks.pop(tid, None)
            return
        if budget is None:
            t = eng.trials.get(tid)
            budget = t.budget_used if t is not None else 0.0
        m = self._marks.get(tid)
        if m is None:
            self._marks[tid] = Mark(now, budget, ctx[0], ctx[1], ctx[2], first)
            return
        m.time, m.budget, m.p, m.w, m.gen = now, budget, ctx[0], ctx[1], ctx[2]  # moved on
        m.full = False
        if not first:
            m.resized_at = None
        m.first = first

    def _reported(self, eng: Any, e: ev.TrialReported, touched: set[str]) -> None:
        tid = e.trial_id
        m = self._marks.get(tid)
        if m is not None and m.full and m.resized_at is None:  # measured enough: it moves on
            m.time, m.budget = e.time, e.budget
            return
        sig = self._sig_of.get(tid)
        if m is not None and m.resized_at is None and sig is not None:
            full = self._obs.get(sig)
            got = None if full is None else full.first.get((m.p, m.w)) if m.first else (
                full.packing if m.w == 1 else full.scaling).get(m.p if m.w == 1 else m.w)
            if got is not None and len(got) >= SAMPLES:  # the sampler has enough of this shape:
                m.full = not m.first  # a first interval's shape is not the next one's
                m.time, m.budget, m.first = e.time, e.budget, False  # the mark moves on
                return
        ctx = self._context(tid)
        if m is not None and ctx is not None and sig is not None and e.budget > m.budget + _TOL:
            unit = (e.time - m.time) / (e.budget - m.budget)
            obs = self._obs.setdefault(sig, Obs())
            if m.resized_at is not None:  # resolved once both widths' unit times are known
                obs.resize.append(((m.p, m.w), (ctx[0], ctx[1]), m.resized_at - m.time,
                                   e.time - m.resized_at, e.budget - m.budget))
            elif (ctx[0], ctx[1], ctx[2]) == (m.p, m.w, m.gen) and unit > 0:
                if m.first:
                    add(obs.first.setdefault((m.p, m.w), []), unit)
                elif m.w == 1:
                    add(obs.packing.setdefault(m.p, []), unit)
                else:
                    add(obs.scaling.setdefault(m.w, []), unit)
            touched.add(sig)
        self._mark(eng, tid, e.time, e.budget, first=False, ctx=ctx)

    def sampled(self, e: ev.UtilizationSampled, touched: set[str]) -> None:
        """Per-GPU samples (NVML, psutil on CPU workers) of GPUs that hold exactly one trial."""
        for g, u in e.gpu_util.items():
            tids = self._on_gpu.get(g)
            if tids and len(tids) == 1:
                self._take_sample(next(iter(tids)), u, e.gpu_memory_gb.get(g, 0.0), touched,
                                  e.gpu_demand.get(g))

    def _take_sample(self, tid: int, util: float, memory_gb: float, touched: set[str],
                     runnable: float | None = None) -> None:
        sig = self._sig_of.get(tid)
        if sig is None or tid not in self._marks:  # not started yet: nothing to measure
            return
        pl = self._where.get(tid, ())
        if len(pl) != 1 or pl[0][1] < 1 - _TOL or self._on_gpu.get(pl[0][0]) != {tid}:
            return  # only a trial alone on one whole GPU shows its own demand
        obs = self._obs.setdefault(sig, Obs())
        if not self._marks[tid].first:
            add(obs.util, float(util))
            if runnable is not None:
                add(obs.demand, float(runnable))
        elif util > 0 and not self.sliced:
            # before its first report a trial starts up (HyperSack skips that): imports read
            # busy on a CPU stand-in and data loading idle anywhere, but a GPU's utilization
            # counts only its kernels, so a busy GPU is the trial's own first epoch
            add(obs.util, float(util))
        if memory_gb > 0:
            add(obs.memory, float(memory_gb))
        touched.add(sig)


def attach_profiler(runtime: Runtime, engine: Engine, trainable: Any) -> Profiler:
    """The runtime's profiler (made on first use) attached to ``engine``: the one entry both runtimes call."""
    prof = engine.hints.get("profiles")
    if isinstance(prof, Profiler):  # attached already (a resumed engine replayed its events)
        runtime.profiler = prof
        return prof
    prof = getattr(runtime, "profiler", None)
    if prof is None:
        prof = runtime.profiler = Profiler()
    prof.time_sliced = bool(getattr(runtime, "time_sliced_gpus", False))
    prof.attach(engine, trainable)
    return prof
