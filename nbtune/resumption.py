"""Resume beside ``tune``: continue a stored experiment after the kernel or process died.

:func:`prepare_resume` rebuilds the experiment's algorithm, allocator and
trainable from the store and replays its event log into a
:class:`~nbtune.engine.restart.RestartableEngine` (see
:mod:`nbtune.store.resume` for why that reproduces the dead engine exactly);
:meth:`Resumption.start` then starts a runtime on it through the same
:func:`~nbtune.build.build_experiment` that ``tune`` uses.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from nbtune.algorithms.algorithm_protocol import BaseAlgorithm
from nbtune.allocators.allocator_protocol import BaseAllocator
from nbtune.build import build_experiment, make_engine, resumed_runtime, wrap_surrogates
from nbtune.engine.restart import RestartableEngine
from nbtune.experiment import Experiment, Recipe
from nbtune.runtimes.profiler import Profiler
from nbtune.runtimes.runtime_protocol import Runtime
from nbtune.store.profile_store import SqlProfileStore
from nbtune.store.recorder import Recorder
from nbtune.store.registration import runtime_checkpoints
from nbtune.store.resume import (
    ExperimentFinishedError,
    algorithm_options,
    rebuild_algorithm,
    rebuild_allocator,
    rebuild_trainable,
    replay,
)
from nbtune.store.schema import ExperimentRow
from nbtune.store.serialize import from_jsonable, import_ref
from nbtune.store.store import Store, open_store

__all__ = ["resume", "prepare_resume", "recipe_of", "Resumption"]


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

    def start(self, runtime: str | Runtime = "auto", *, background: bool = True) -> Experiment:
        """Start ``runtime`` (``"auto"``, ``"sim"``, ``"dask"`` or a runtime object) on the
        replayed engine. ``"auto"`` goes back to the runtime the experiment ran on, as its
        store row records it, the simulator with as many GPUs as the engine last had
        (:func:`nbtune.build.resumed_runtime`)."""
        st, name = self.store, self.name
        runtime = resumed_runtime(runtime, self.row.runtime, self.trainable,
                                  self.engine.ledger.cluster)

        def record(rt: Runtime) -> Recorder:
            st.mark_restart(name)
            return Recorder(st, name, self.engine, background=background,
                            checkpoints=runtime_checkpoints(st, name, rt))

        return build_experiment(name, self.engine, runtime, self.trainable, store=st,
                                record=record, recipe=recipe_of(self.row))


def recipe_of(row: ExperimentRow) -> Recipe | None:
    """How the stored experiment's algorithm and allocator were made (None where an instance
    was given, or the run had surrogates or fusion: nothing a what-if rebuilds)."""
    if (row.algorithm_options is None or row.allocator_options is None or row.fusion
            or (row.run_options or {}).get("scaling") is not None):
        return None
    algorithm: Any = import_ref(row.algorithm) if ":" in row.algorithm else row.algorithm
    return Recipe(algorithm, algorithm_options(row), row.seed,
                  row.num_trials, row.min_budget, row.max_budget, row.allocator,
                  dict(from_jsonable(row.allocator_options)))


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
    work = rebuild_trainable(row, trainable)
    algo = rebuild_algorithm(row, algorithm)
    alloc = rebuild_allocator(row, allocator)
    run_options = row.run_options or {}
    # tune(scaling=S) wrapped both policies and fused as recorded: the same again, so the
    # replay rebuilds the same surrogates and units
    algo, alloc = wrap_surrogates(algo, alloc, run_options.get("scaling"),
                                  run_options.get("eager_fraction", 0.5))
    engine = cast(RestartableEngine, make_engine(
        algo, alloc, validate=validate, max_failures=row.max_failures, fusion=row.fusion,
        engine_class=RestartableEngine))
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
    runtime: str | Runtime = "auto",
    *,
    algorithm: BaseAlgorithm | None = None,
    allocator: BaseAllocator | None = None,
    validate: bool = False,
    background: bool = True,
) -> Experiment:
    """Continue experiment ``name`` from ``store`` (default ``./nbtune-store/nbtune.db``).

    Completed trials are not rerun; trials that were running restart from
    their checkpoints. A run started with ``fusion=`` fuses again with the same settings
    (its units' members restart from their own checkpoints, fused anew). ``trainable`` is
    needed unless it was a module-level function; ``algorithm``/``allocator`` only if the
    original run was given instances rather than registry names. ``runtime`` defaults to
    the runtime the experiment ran on, as ``nbtune resume`` does. Returns the :class:`Experiment`,
    which keeps recording into the same store.
    """
    return prepare_resume(name, store, trainable, algorithm=algorithm, allocator=allocator,
                          validate=validate).start(runtime, background=background)
