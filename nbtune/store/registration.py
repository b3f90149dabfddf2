"""Entering an experiment into a store: what resume needs to rebuild it, and where checkpoints go.

:func:`start_recording` writes the experiment's row (the algorithm and
allocator as registry names or ``MODULE:NAME`` with their options, the
trainable's reference) and starts a :class:`~nbtune.store.recorder.Recorder`;
:func:`runtime_checkpoints` points a checkpointing runtime at the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nbtune.algorithms import effective_algorithm_options
from nbtune.engine.engine import Engine
from nbtune.store.recorder import Recorder
from nbtune.store.serialize import SerializationError, dump_space, import_ref, to_jsonable
from nbtune.store.store import Store

__all__ = ["start_recording", "runtime_checkpoints", "trainable_ref"]

_COMMON = ("space", "metric", "mode", "max_budget", "min_budget", "num_trials", "seed")


def _describe(spec: Any, options: Mapping[str, Any] | None) -> tuple[str, Any]:
    """``(name, JSON options)`` to rebuild an algorithm/allocator; options None = not rebuildable."""
    if isinstance(spec, str):
        name = spec.strip().lower()
    elif isinstance(spec, type):
        name = f"{spec.__module__}:{spec.__qualname__}"
    else:
        return str(getattr(spec, "name", type(spec).__name__)), None
    try:
        return name, to_jsonable(dict(options or {}))
    except SerializationError:
        return name, None


def trainable_ref(trainable: Any) -> str | None:
    """``"module:qualname"`` when resume can import ``trainable`` back by name, else None."""
    module = getattr(trainable, "__module__", None)
    qual = getattr(trainable, "__qualname__", None)
    if not module or not qual or module == "__main__" or "<locals>" in qual:
        return None
    try:
        obj = import_ref(f"{module}:{qual}")
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qual}" if obj is trainable else None


def start_recording(
    store: Store,
    name: str,
    engine: Engine,
    *,
    algorithm: Any,
    algorithm_options: Mapping[str, Any] | None = None,
    allocator: Any = "fifo",
    allocator_options: Mapping[str, Any] | None = None,
    trainable: Any = None,
    runtime: str = "",
    max_failures: int = 0,
    background: bool = True,
    checkpoints: Callable[[int], tuple[float, str] | None] | None = None,
    fusion: Mapping[str, Any] | None = None,
    run_options: Mapping[str, Any] | None = None,
) -> Recorder:
    """Create ``name`` in ``store`` (a stored name raises) and record ``engine`` into it.

    ``algorithm``/``allocator`` are what the user passed (a registry name, a
    class or an instance) with their options, so resume can rebuild them.
    ``checkpoints`` is the runtime's ``latest_checkpoint(trial_id)``, if it has one;
    ``fusion`` the engine's fusion settings (``FusionBinder.settings()``), if it fuses;
    ``run_options`` (JSON) what ``tune`` wrapped round the algorithm (``scaling``).
    """
    # a wrapper (tune(scaling=S)'s EagerTransfer, in run_options) records what it wraps
    algo = getattr(engine.algorithm, "inner", engine.algorithm)
    # the common options are stored as columns, taken from the algorithm itself
    options = effective_algorithm_options(algo, algorithm_options or {})
    alg_name, alg_opts = _describe(algorithm, {k: v for k, v in options.items()
                                               if k not in _COMMON})
    alloc_name, alloc_opts = _describe(allocator, allocator_options)
    store.create_experiment(
        name, algorithm=alg_name, algorithm_options=alg_opts, allocator=alloc_name,
        allocator_options=alloc_opts, metric=algo.metric, mode=algo.mode,
        max_budget=float(algo.max_budget), min_budget=float(algo.min_budget),
        num_trials=algo.num_trials, seed=algo.seed, max_failures=int(max_failures),
        space=dump_space(algo.space), trainable=trainable_ref(trainable), runtime=runtime,
        fusion=None if fusion is None else to_jsonable(dict(fusion)),
        run_options=dict(run_options) if run_options else None,
    )
    return Recorder(store, name, engine, background=background, checkpoints=checkpoints)


def runtime_checkpoints(store: Store, name: str, runtime: Any) -> Any:
    """Point a checkpointing runtime at the store's directory; return its checkpoint lookup.

    A resumed run must find the files the dead one wrote, so a runtime with a
    ``checkpoint_dir`` left unset (the Dask runtime) writes under
    ``Store.checkpoint_dir(name)``; its ``latest_checkpoint(trial_id)`` lets the
    recorder store each reference. Runtimes without checkpoints (the simulator) get None.
    """
    if not runtime.keeps_checkpoints:
        return None
    local = store.local_checkpoint_dir(name)
    if local is not None and runtime.checkpoint_dir is None:
        runtime.checkpoint_dir = local
    return runtime.latest_checkpoint
