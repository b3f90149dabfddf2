"""Resume: continue a stored experiment after the kernel or the process died.

The design is event sourcing. The engine is a pure function of the events it
is fed (batch by batch) and of its algorithm and allocator, which are rebuilt
from their stored names, options and seed. So :func:`replay` feeds the stored
batches to a fresh engine and gets the very state the dead one had: the same
trials, results, TrialGroups, rungs, RNG draws and allocation log, with no
trial rerun. Every batch's commands were stored too, and replay checks it
gets the same ones back, so a rebuilt algorithm that drifted (another seed,
another option, another version) fails loudly instead of silently diverging.

Trials that were running when the process died are the only loose end. A new
runtime starts by feeding ``ExperimentStarted``; a :class:`RestartableEngine`
reads a second ``ExperimentStarted`` as "the runtime restarted": every trial it
believed running goes back to the front of the queue, from its own checkpoint
at the budget of its last recorded report, without counting as a failure (as
for a lost worker). That event is recorded like any other, so resuming a
resumed experiment replays through the restart in the same way.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from nbtune.algorithms.base import BaseAlgorithm
from nbtune.allocators.base import BaseAllocator
from nbtune.core import events as ev
from nbtune.core.commands import Command
from nbtune.engine.engine import Engine
from nbtune.experiment import Experiment
from nbtune.runtimes.base import Runtime
from nbtune.runtimes.profiler import Profiler
from nbtune.store.profiles import SqlProfileStore
from nbtune.store.recorder import Recorder, runtime_checkpoints
from nbtune.store.schema import ExperimentRow
from nbtune.store.serialize import from_jsonable, load_space
from nbtune.store.store import Store, command_payload, open_store

__all__ = ["RestartableEngine", "replay", "resume", "prepare_resume", "Resumption",
           "rebuild_algorithm", "rebuild_allocator", "ResumeError", "ExperimentFinishedError"]


class ResumeError(RuntimeError):
    """The stored experiment cannot be rebuilt as it was; the message says what to pass."""


class ExperimentFinishedError(ValueError):
    """The experiment already finished: there is nothing to resume, only results to read."""


class RestartableEngine(Engine):
    """An :class:`Engine` that survives its runtime: a repeated ``ExperimentStarted`` restarts.

    On the second and later ``ExperimentStarted`` the trials it had running
    are requeued at the front (first launched first) to continue from their
    checkpoints, and the new runtime's cluster is adopted. A new runtime's
    clock may start again from 0 (a wall clock cannot be wound forward): the
    restart then fixes ``time_offset`` so its times continue the experiment's
    timeline, and every later event is shifted by it before it is handled.
    Subscribers (the recorder) see the shifted events, so a replay needs no offset.
    """

    restarts = 0
    time_offset = 0.0

    def handle(self, *events: ev.Event) -> list[Command]:
        if self.started and any(isinstance(e, ev.ExperimentStarted) for e in events):
            first = next(e for e in events if isinstance(e, ev.ExperimentStarted))
            self.time_offset = max(0.0, self.time - first.time)
        if self.time_offset:
            events = tuple(dataclasses.replace(e, time=e.time + self.time_offset)
                           for e in events)
        return super().handle(*events)

    def _on_started(self, e: ev.ExperimentStarted, cmds: list[Command]) -> None:
        if not self.started:
            super()._on_started(e, cmds)
            return
        self.restarts += 1
        if self.done:
            return
        for tid in reversed(list(self.ledger.placements)):
            self._requeue(tid, failed=False, front=True)
        self._on_resources(ev.ResourcesChanged(e.time, e.cluster), cmds)


def replay(engine: Engine, log: list[tuple[list[ev.Event], list[tuple[str, Any]]]],
           *, check: bool = True) -> int:
    """Feed every stored batch to ``engine``; return how many. Pure: no runtime, no I/O.

    With ``check`` the commands the engine answers must equal the stored ones,
    batch for batch; otherwise :class:`ResumeError` says where they parted.
    """
    for i, (events, recorded) in enumerate(log):
        got = [command_payload(c) for c in engine.handle(*events)]
        if check and got != [(k, p) for k, p in recorded]:
            first = next((j for j, (a, b) in enumerate(zip(got, recorded, strict=False))
                          if a != tuple(b)), min(len(got), len(recorded)))
            want = recorded[first] if first < len(recorded) else "nothing"
            have = got[first] if first < len(got) else "nothing"
            raise ResumeError(
                f"replay diverged at batch {i} ({[type(e).__name__ for e in events]}): the "
                f"stored run answered {want}, the rebuilt one {have}. The algorithm or "
                "allocator is not the one that ran (other options, seed or code version)"
            )
    return len(log)


def _import(ref: str) -> Any:
    module, _, qual = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def rebuild_algorithm(row: ExperimentRow, given: Any = None) -> BaseAlgorithm:
    """The stored experiment's algorithm, fresh: from its registry name and options, or ``given``."""
    from nbtune.algorithms import make_algorithm

    space = load_space(row.space)
    base = {"metric": row.metric, "mode": row.mode, "max_budget": row.max_budget,
            "num_trials": row.num_trials, "seed": row.seed}
    if isinstance(given, BaseAlgorithm):
        if given.trials_created:
            raise ResumeError("pass a fresh algorithm to resume: this one already made trials")
        for key in ("metric", "mode", "max_budget"):
            if getattr(given, key) != base[key]:
                raise ResumeError(f"algorithm has {key}={getattr(given, key)!r}, the stored "
                                  f"experiment {row.name!r} has {base[key]!r}")
        return given
    if given is not None:
        raise TypeError(f"algorithm= takes a fresh BaseAlgorithm instance, got {given!r}")
    if row.algorithm_options is None:
        raise ResumeError(
            f"experiment {row.name!r} ran an algorithm instance ({row.algorithm}) whose options "
            "were not stored: pass algorithm= a fresh instance built the same way (same seed)"
        )
    spec: Any = _import(row.algorithm) if ":" in row.algorithm else row.algorithm
    return make_algorithm(spec, space, **base, min_budget=row.min_budget,
                          **from_jsonable(row.algorithm_options))


def rebuild_allocator(row: ExperimentRow, given: Any = None) -> BaseAllocator:
    from nbtune.allocators import make_allocator

    if isinstance(given, BaseAllocator):
        return given
    if given is not None:
        raise TypeError(f"allocator= takes a fresh allocator instance, got {given!r}")
    if row.allocator_options is None:
        raise ResumeError(
            f"experiment {row.name!r} ran an allocator instance ({row.allocator}): pass "
            "allocator= a fresh instance built the same way"
        )
    return make_allocator(row.allocator, **from_jsonable(row.allocator_options))


def _trainable(row: ExperimentRow, given: Any) -> Any:
    if given is not None:
        return given
    if row.trainable is None:
        raise ResumeError(
            f"experiment {row.name!r}: pass trainable= (the training function or workload "
            "model); only module-level functions are found again by name"
        )
    try:
        return _import(row.trainable)
    except (ImportError, AttributeError) as exc:
        raise ResumeError(f"cannot import the trainable {row.trainable!r} ({exc}); pass "
                          "trainable=") from None


def _continue_clock(rt: Runtime, t: float) -> None:
    """Wind a movable clock (the simulator's) on to the recorded time.

    Clocks that cannot move (a wall clock) restart from 0 and the
    :class:`RestartableEngine` offsets their times instead.
    """
    advance = getattr(rt.clock, "advance_to", None)
    if advance is not None and rt.clock.now() < t:
        advance(t)


@dataclasses.dataclass
class Resumption:
    """A stored experiment rebuilt and replayed but not running yet: :meth:`start` continues it.

    :func:`resume` is ``prepare_resume(...).start(runtime)``. The two steps are
    apart so a caller can look at the rebuilt engine first (its cluster, which
    trials will continue) and subscribe to it before the runtime starts: the
    simulator runs the whole rest of the experiment inside ``start``.
    """

    name: str
    store: Store
    row: ExperimentRow
    trainable: Any
    engine: RestartableEngine
    #: how many stored batches the replay fed to the engine
    batches: int

    def start(self, runtime: Any = "sim", *, background: bool = True) -> Experiment:
        """Start ``runtime`` (``"sim"``, ``"dask"`` or a runtime object) on the replayed engine."""
        from nbtune.api import _make_runtime

        st, name = self.store, self.name
        rt = _make_runtime(runtime)
        _continue_clock(rt, self.engine.time)
        st.mark_restart(name)
        recorder = Recorder(st, name, self.engine, background=background,
                            checkpoints=runtime_checkpoints(st, name, rt))
        exp = Experiment(name, self.engine, rt, self.trainable)
        exp.store, exp.recorder = st, recorder
        try:
            rt.start(self.engine, self.trainable)
        except BaseException:
            recorder.close()
            raise
        return exp


def prepare_resume(
    name: str,
    store: Any = True,
    trainable: Any = None,
    *,
    algorithm: BaseAlgorithm | None = None,
    allocator: BaseAllocator | None = None,
    validate: bool = False,
) -> Resumption:
    """Rebuild experiment ``name`` from ``store`` and replay its log; nothing runs yet.

    Raises what :func:`resume` raises, before any runtime exists: an unknown
    name, a finished experiment, a trainable or algorithm that cannot be rebuilt.
    """
    st = open_store(True if store is None else store)
    if not isinstance(st, Store):
        raise ValueError("resume needs the store the experiment was recorded in: store=False "
                         "keeps nothing to resume from")
    row = st.experiment(name)
    if row.state == "done":
        raise ExperimentFinishedError(
            f"experiment {name!r} already finished; read its results with "
            f"nbtune.store.Store({str(st.url)!r}).results({name!r})"
        )
    work = _trainable(row, trainable)
    algo = rebuild_algorithm(row, algorithm)
    alloc = rebuild_allocator(row, allocator)
    engine = RestartableEngine(algo, alloc, validate=validate, max_failures=row.max_failures)
    # measured again from the replayed events, so the allocator decides as it did the first time
    Profiler(SqlProfileStore(st)).attach(engine, work)
    batches = replay(engine, st.event_log(name))
    if engine.done:
        raise ExperimentFinishedError(f"experiment {name!r} had finished; nothing to resume")
    return Resumption(name, st, row, work, engine, batches)


def resume(
    name: str,
    store: Any = True,
    trainable: Any = None,
    runtime: Any = "sim",
    *,
    algorithm: BaseAlgorithm | None = None,
    allocator: BaseAllocator | None = None,
    validate: bool = False,
    background: bool = True,
) -> Experiment:
    """Continue experiment ``name`` from ``store`` (default ``./nbtune-store/nbtune.db``).

    Completed trials are not rerun; trials that were running restart from
    their checkpoints. ``trainable`` is needed unless it was a module-level
    function; ``algorithm``/``allocator`` only if the original run was given
    instances rather than registry names. Returns the :class:`Experiment`,
    which keeps recording into the same store.
    """
    return prepare_resume(name, store, trainable, algorithm=algorithm, allocator=allocator,
                          validate=validate).start(runtime, background=background)
