"""``runtime=BubbleRuntime(host)``: the scheduler places trials into a real pipeline host's bubbles.

Hydro §5.1 end to end, on real processes:

1. the runtime starts the host (:class:`~nbtune.bubbles.live.LiveHost`: a
   ``Schedule1F1B`` job, one process per stage) and waits for its first
   measured iterations;
2. each stage becomes one worker of the engine's cluster (a GPU of kind
   ``"bubble"``), and the host's measurements become the allocator's
   ``hints["bubbles"]``: per stage one :class:`~nbtune.allocators.bubbles.IdleWindow`
   from now to the host's predicted end (measured iteration time × iterations
   left), its ``capacity`` the stage's measured idle fraction, its ``room_gb``
   the memory limit less the stage's measured peak RSS. Republished after
   every iteration the host publishes, so the allocator always reads the
   latest measurement, never the 1F1B formula;
3. ``allocator="bubbles"`` (:class:`~nbtune.allocators.bubble_windows.BubblesAllocator`)
   places pending trials by its best-fit rule (shortest remaining work into
   the window with the fewest idle seconds left that holds it) and its memory check;
4. each Launch runs the user's ``train(config, trial)`` as a gated guest
   (:mod:`.guest_trial`) on its stage's core: it computes only while the
   stage does not. Its reports become engine events; its peak RSS, measured
   in the trial process, reaches the profiler (``TrialSampled``), which is
   where the memory check reads it.

With ``probe=GuestSpec(...)`` the runtime first runs a co-location probe in
the host's first iterations (:mod:`.calibrate`) and keeps what it measured:
:attr:`BubbleRuntime.colocation` (per stage σ, φ, κ, δ) and
:meth:`BubbleRuntime.what_if`, the simulator's bubble model calibrated by it.

One guest per stage at a time (the gate has one compute slot): give the
allocator whole workers (``bubbles``/``bubbles+fifo``). When the host ends,
its bubbles are over and a guest still running runs free (the gate releases
it), so size the host's ``iterations`` to the tuning. The engine stays pure:
only this runtime reads clocks. Pause/stop: the trial ends at its next report
(no checkpoints: a relaunch trains again from step 1, its early steps counted
as recomputed, as on Dask).
"""

from __future__ import annotations

import contextlib
import queue
import tempfile
import threading
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd

from nbtune.allocators.bubble_model import CoLocation
from nbtune.allocators.bubbles import IdleWindow, PipelineHostModel
from nbtune.bubbles.calibrate import LiveProbe, probe_spec
from nbtune.bubbles.guest import GuestSpec
from nbtune.bubbles.guest_trial import trial_worker
from nbtune.bubbles.host import HostRun, HostSpec
from nbtune.bubbles.live import LiveHost
from nbtune.bubbles.timeline import Interval, now
from nbtune.core import events as ev
from nbtune.core.commands import Command, Finish, Launch, Pause, Resize, Stop
from nbtune.core.resources import GPU, ClusterSpec
from nbtune.runtimes.dask import protocol as msg
from nbtune.runtimes.profiler import attach_profiler

if TYPE_CHECKING:
    from nbtune.engine.engine import Engine

__all__ = ["BubbleRuntime", "GuestRecord"]

GB = 1e9


class _Clock:
    def __init__(self) -> None:
        self.origin = now()

    def now(self) -> float:
        return now() - self.origin


class GuestRecord:
    """One launch of a trial as a guest: where, its process, what it measured."""

    def __init__(self, launch: Launch, stage: int, proc: Any, control: Any) -> None:
        self.launch, self.stage, self.proc, self.control = launch, stage, proc, control
        self.cancelled: str | None = None
        self.reports: list[tuple[float, dict[str, Any]]] = []
        self.intervals: list[Interval] = []  # ("run"/"free", start, end) on now()'s clock
        self.exit: msg.Exit | None = None
        self.sampled = False


class BubbleRuntime:
    """Run an experiment's trials inside the bubbles of a running pipeline host.

    ``host`` is the :class:`~nbtune.bubbles.host.HostSpec` of the host job;
    ``memory_limit`` (bytes) is what a stage and its guest may use together
    (default: no limit). ``nice``/``idle_class``/``max_wait`` are the guests'
    (see :class:`~nbtune.bubbles.guest.GuestSpec`). ``probe``: a guest to probe the
    host's first ``probe_iterations`` with (none: no probe, no :meth:`what_if`).
    """

    name = "bubbles"
    virtual_clock: ClassVar[bool] = False
    keeps_checkpoints: ClassVar[bool] = False
    live_workers: ClassVar[bool] = False

    def __init__(self, host: HostSpec, *, memory_limit: float | None = None, nice: int = 19,
                 idle_class: bool = True, max_wait: float = 30.0, pin_cores: bool = True,
                 probe: GuestSpec | None = None, probe_iterations: int = 12) -> None:
        import torch.multiprocessing as mp

        if probe is not None:
            host = probe_spec(host, probe_iterations)
        self.spec = host
        self.memory_limit = memory_limit
        self.nice, self.idle_class, self.max_wait = nice, idle_class, max_wait
        self.ctx = mp.get_context("spawn")
        self.out = self.ctx.Queue()
        self.host = LiveHost(host, self.ctx, self.out, pin_cores=pin_cores)
        self.probe = None if probe is None else LiveProbe(self.host, probe, max_wait=max_wait)
        self.colocation: tuple[CoLocation, ...] | None = None  # what the probe measured
        self.guests: dict[int, list[GuestRecord]] = {}  # trial -> its launches, in order
        self.on_stage: dict[int, GuestRecord] = {}
        self.workers: dict[int, tuple[Any, Any]] = {}  # stage -> (guest process, its inbox)
        self._deferred: dict[int, Launch] = {}  # stage -> launch waiting for its guest to leave
        self.published: list[tuple[float, dict[int, list[IdleWindow]]]] = []
        self.profiler: Any = None
        self.error: BaseException | None = None
        self._clock = _Clock()
        self._engine: Any = None
        self._fn: bytes = b""
        self._tmp = tempfile.TemporaryDirectory()
        self._done = threading.Event()
        self._over = threading.Event()  # the loop has ended (engine and host both done)
        self._events: queue.Queue[ev.Event] = queue.Queue()

    # ------------------------------------------------------------ Runtime API
    @property
    def clock(self) -> _Clock:
        return self._clock

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def submit(self, *events: ev.Event) -> None:
        for e in events:
            self._events.put(e)

    def drives(self, engine: Engine) -> bool:
        return self._engine is engine and not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def utilization(self, engine: Engine) -> pd.DataFrame:
        return pd.DataFrame(columns=["time", "gpu_id", "util", "memory_gb"])

    def start(self, engine: Engine, trainable: Any) -> None:
        """Start the host, measure it, publish its windows and begin placing trials."""
        import cloudpickle

        self._engine = engine
        self._fn = cloudpickle.dumps(trainable)
        for s in range(self.spec.stages):  # warm guest processes, importing beside the host
            self._spawn_worker(s)
        if self.probe is not None:
            self.probe.start()
        self.host.start()
        if self.probe is not None:  # the trials come once the probe has measured the host
            self.colocation = self.probe.finish()
        self.host.wait_measured(min(self.spec.warmup + 1, self.spec.iterations))
        limit = (self.memory_limit or 0.0) / GB or 1e6
        cluster = ClusterSpec.of([GPU(s, "host", "bubble", 1.0, limit)
                                  for s in range(self.spec.stages)])
        attach_profiler(self, engine, trainable)
        self._clock.origin = self.host.started_at  # the engine's time 0: the host's start
        self._publish()
        self._execute(engine.handle(ev.ExperimentStarted(self._clock.now(), cluster)))
        threading.Thread(target=self._loop, name="nbtune-bubbles", daemon=True).start()

    def _spawn_worker(self, stage: int) -> None:
        inbox = self.ctx.Queue()
        proc = self.ctx.Process(target=trial_worker, daemon=True, args=(
            stage, self.host.gates[stage], inbox, self.out, self.nice, self.idle_class,
            self.max_wait, self.spec.device, self.spec.mps_percentage))
        proc.start()
        self.workers[stage] = (proc, inbox)

    def host_run(self, timeout: float | None = None) -> HostRun:
        """The host's whole measured run, once it has ended (bounded)."""
        if not self._over.wait(timeout if timeout is not None else self.spec.timeout):
            raise TimeoutError("the pipeline host has not ended in time")
        if self.error is not None:
            raise self.error
        return self.host.run

    # ------------------------------------------------------------ measurements
    def what_if(self) -> PipelineHostModel:
        """The simulator's model of this host, calibrated by the start-up probe: its
        ``gated_iteration_time`` (slowdown), ``guest_speed`` (fill of the bubbles),
        ``windows``; ``dataclasses.replace`` it with another configuration's no-guest
        figures (iteration time, idle shares, resumptions) to ask about that one."""
        if self.probe is None:
            raise RuntimeError("BubbleRuntime(probe=None) measured no co-location")
        return self.probe.model()

    def windows(self) -> dict[int, list[IdleWindow]]:
        """What the host publishes now: per stage, its measured idle share until its end."""
        t, end = self._clock.now(), self.host.expected_end() - self._clock.origin
        out = {}
        for s in range(self.spec.stages):
            room = (float("inf") if self.memory_limit is None
                    else (self.memory_limit - self.host.stage_peak(s)) / GB)
            cap = 0.0 if self.host.ended[s] else self.host.idle_fraction(s)
            out[s] = [IdleWindow(s, t, max(end, t), "pipeline", cap, room)]
        return out

    def _publish(self) -> None:
        w = self.windows()
        self.published.append((self._clock.now(), w))
        self._engine.set_hint("bubbles", w)

    # ------------------------------------------------------------ the loop
    def _loop(self) -> None:
        engine = self._engine
        try:
            while not (self._done.is_set() and self.host.done):
                events: list[ev.Event] = []
                while not self._events.empty():
                    events.append(self._events.get())
                try:
                    item = self.host.early.pop(0) if self.host.early else self.out.get(timeout=0.05)
                except queue.Empty:
                    item = None
                republish = False
                if item is not None:
                    if self.host.take(item):
                        republish = item[0] == "iter" and item[1] == self.spec.stages - 1
                    elif item[0] == "trial":
                        events += self._on_trial(self.guests[item[1]][item[2]], item[3], item[4])
                events += self._reap()
                if self._done.is_set():
                    continue
                if republish or self.host.done:
                    self._publish()
                if events or republish:
                    self._execute(engine.handle(*events))
        except BaseException as exc:  # the caller must hear of it, not wait for ever
            self.error = exc
            self._done.set()
        finally:
            for rec in list(self.on_stage.values()):  # a stop first: it leaves the gate cleanly
                rec.control.put(msg.StopRequest(reason="stop"))
            for _, inbox in self.workers.values():
                inbox.put(msg.Quit())
            for proc, _ in self.workers.values():
                proc.join(5.0)
                if proc.is_alive():
                    proc.kill()
            self.host.close()
            self._over.set()

    def _on_trial(self, rec: GuestRecord, m: msg.TrialMessage, extra: Any) -> list[ev.Event]:
        """Events for what a guest said; ``extra`` is a report's peak memory, an exit's
        :class:`~nbtune.bubbles.guest_trial.GuestEnd`."""
        tid = rec.launch.trial_id
        t = float(m.t or 0.0) - self._clock.origin
        if isinstance(m, msg.Started):
            return [] if rec.cancelled else [ev.TrialStarted(t, tid)]
        if isinstance(m, msg.Report):
            rec.reports.append((float(m.step), dict(m.metrics)))
            if rec.cancelled:
                return []
            out: list[ev.Event] = [ev.TrialReported(t, tid, float(m.step), dict(m.metrics))]
            if not rec.sampled:  # its own peak, alone on its stage worker: the profiler's sample
                rec.sampled = True
                out.insert(0, ev.TrialSampled(t, tid, 1.0, float(extra) / GB))
            return out
        if isinstance(m, msg.Recomputed):
            return [ev.TrialRecomputed(t, tid, float(m.step))]
        if isinstance(m, msg.Exit):
            rec.exit, rec.intervals = m, list(extra.intervals if extra is not None else ())
            self._vacate(rec)
            if rec.cancelled:
                return []
            if not m.ok:
                return [ev.TrialFailed(t, tid, error=str(m.error or ""))]
            step = m.step if m.step is not None else 0.0
            if float(step) < rec.launch.budget - 1e-9:
                return [ev.TrialFailed(t, tid, error=(
                    f"train returned at step {m.step} before its budget "
                    f"{rec.launch.budget:g}"))]
        return []

    def _reap(self) -> list[ev.Event]:
        """A guest process that died without its exit message fails its trial."""
        out: list[ev.Event] = []
        for rec in list(self.on_stage.values()):
            if rec.exit is None and not rec.proc.is_alive() and self.out.empty():
                rec.exit = msg.Exit(ok=False)
                self._spawn_worker(rec.stage)
                self._vacate(rec)
                if not rec.cancelled:
                    out.append(ev.TrialFailed(self._clock.now(), rec.launch.trial_id,
                                              error=f"guest process died ({rec.proc.exitcode})"))
        return out

    # ------------------------------------------------------------ commands
    def _execute(self, cmds: list[Command]) -> None:
        for c in cmds:
            if isinstance(c, Launch):
                self._launch(c)
            elif isinstance(c, Pause | Stop | Resize):
                recs = self.guests.get(c.trial_id)
                if recs and recs[-1].exit is None and recs[-1].cancelled is None:
                    rec = recs[-1]
                    rec.cancelled = type(c).__name__.lower()
                    rec.control.put(msg.StopRequest(reason=rec.cancelled))
                if isinstance(c, Resize):
                    raise RuntimeError("BubbleRuntime does not resize trials: use allocator='bubbles'")
            elif isinstance(c, Finish):
                self._done.set()

    def _launch(self, c: Launch) -> None:
        if len(c.placement) != 1 or c.placement[0][1] < 1 - 1e-9:
            raise RuntimeError(f"trial {c.trial_id}: a stage takes one whole guest, got "
                               f"{c.placement} (use allocator='bubbles')")
        stage = c.placement[0][0]
        if stage in self.on_stage:  # the guest before (done or stopped) is on its way out
            if stage in self._deferred:
                raise RuntimeError(f"stage {stage} has a guest already (trial "
                                   f"{self.on_stage[stage].launch.trial_id})")
            self._deferred[stage] = c
            return
        core = self.host.guest_cores[stage]
        job = {"trial_id": c.trial_id, "config": dict(c.config),
               "start_step": c.start_budget, "budget": c.budget, "fn": self._fn,
               "checkpoint_dir": self._tmp.name, "max_budget": self._engine.max_budget,
               "metric": self._engine.metric, "threads": 1,
               "env": {} if core is None else {"NBTUNE_CPU_CORES": str(core)},
               "run": len(self.guests.get(c.trial_id, ()))}
        proc, inbox = self.workers[stage]
        rec = GuestRecord(c, stage, proc, inbox)
        self.guests.setdefault(c.trial_id, []).append(rec)
        self.on_stage[stage] = rec
        inbox.put(msg.Job(spec=job))

    def _vacate(self, rec: GuestRecord) -> None:
        if self.on_stage.get(rec.stage) is rec:
            del self.on_stage[rec.stage]
            if rec.stage in self._deferred:
                self._launch(self._deferred.pop(rec.stage))

    def close(self) -> None:
        """Stop what is still running (bounded)."""
        self._done.set()
        for rec in list(self.on_stage.values()):
            with contextlib.suppress(Exception):
                rec.control.put(msg.StopRequest(reason="stop"))
        self._over.wait(self.spec.timeout)
        self._tmp.cleanup()
