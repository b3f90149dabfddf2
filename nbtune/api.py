"""``nbtune.tune``: the one call most users need."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Mapping
from typing import Any

from nbtune.allocators import make_allocator
from nbtune.core.space import validate_space
from nbtune.engine.engine import Engine
from nbtune.experiment import Experiment
from nbtune.runtimes.base import Runtime
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads.base import WorkloadModel

__all__ = ["tune"]

_names = itertools.count(1)


def _make_runtime(runtime: str | Runtime, trainable: Any = None) -> Runtime:
    if isinstance(runtime, str):
        if runtime == "auto":  # what the trainable is says where it can run
            runtime = "sim" if isinstance(trainable, WorkloadModel) else "dask"
        if runtime == "sim":
            return SimRuntime()
        if runtime == "dask":  # a local cluster sized to the machine (GPUs if any), kept
            from nbtune.runtimes.dask.shared import shared_runtime  # heavy import, on demand

            return shared_runtime()
        raise ValueError(
            f"runtime must be 'auto', 'sim', 'dask' or a runtime object, got {runtime!r}"
        )
    if not isinstance(runtime, Runtime):
        raise TypeError(f"runtime {runtime!r} does not implement the Runtime protocol")
    return runtime


def _check_names(algorithm: Any, allocator: Any) -> None:
    """Unknown registry names fail before budgets and modes are even looked at."""
    from nbtune.algorithms import ALGORITHMS, AlgorithmError
    from nbtune.allocators import ALLOCATORS

    if isinstance(algorithm, str) and algorithm.strip().lower() not in ALGORITHMS:
        raise AlgorithmError(f"unknown algorithm {algorithm!r}; valid names: "
                             f"{', '.join(ALGORITHMS)}")
    if isinstance(allocator, str) and allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; choose one of {sorted(ALLOCATORS)}")


def _auto_type(algorithm: Any, trainable: Any,
               options: Mapping[str, Any]) -> dict[str, Any]:
    """ASHA/BOHB pause and promote (``type="promotion"``) when the function checkpoints.

    Without checkpoints they run in stopping mode (trials train on past rungs);
    a function that writes checkpoints can be paused at a rung and resumed
    from it, Li et al.'s original ASHA. An explicit ``type=`` always wins.
    """
    out = dict(options)
    if (isinstance(algorithm, str) and algorithm.strip().lower() in ("asha", "bohb")
            and "type" not in out and not isinstance(trainable, WorkloadModel)):
        from nbtune.runtimes.dask.trial_api import uses_checkpoints  # no distributed import

        if uses_checkpoints(trainable):
            out["type"] = "promotion"
    return out


def tune(
    trainable: Any,
    space: Mapping[str, Any] | None = None,
    *,
    algorithm: Any = "asha",
    metric: str,
    mode: str = "min",
    max_budget: float,
    num_trials: int | None = None,
    allocator: Any = "fifo",
    runtime: str | Runtime = "auto",
    name: str | None = None,
    store: Any = None,
    seed: int | None = None,
    min_budget: float = 1.0,
    validate: bool = False,
    max_failures: int = 0,
    allocator_options: Mapping[str, Any] | None = None,
    **algorithm_options: Any,
) -> Experiment:
    """Tune ``trainable`` over ``space`` and return the :class:`Experiment`.

    ``trainable`` is a training function ``train(config, trial)`` (or Ray's
    ``train(config)`` reporting with :func:`nbtune.report`) for the Dask
    runtime, or a workload model (e.g. :class:`nbtune.workloads.SyntheticWorkload`)
    for the simulator; ``runtime="auto"`` picks the one that fits (a function
    runs on a local Dask cluster sized to the machine, on its GPUs if it has
    any). Argument errors are raised before any runtime starts, in the order a
    user fixes them: the trainable, the space, the algorithm and allocator
    names, then budgets, mode and metric. ``algorithm`` and ``allocator`` are registry names or
    instances; extra keyword arguments go to the algorithm (``eta=3`` ...).
    The simulator runs to completion before this returns; the Dask runtime
    returns at once (call :meth:`Experiment.wait`).

    ``store`` persists the experiment so :func:`nbtune.resume` can continue it
    after the kernel dies: ``None`` keeps it in memory, ``True`` uses
    ``./nbtune-store/nbtune.db``, a directory ``<dir>/nbtune.db``, a file path
    or SQLAlchemy URL exactly that, or pass a :class:`nbtune.store.Store`. With
    a store and no ``seed`` a random seed is drawn and stored (replay needs it).
    """
    if not callable(trainable) and not isinstance(trainable, WorkloadModel):
        raise TypeError(f"the trainable must be a training function train(config, trial) or a "
                        f"workload model, got {type(trainable).__name__}")
    if space is None:
        space = getattr(trainable, "space", None)
        if space is None:
            raise ValueError("give a search space: tune(train, {'lr': loguniform(1e-4, 1e-1)}, ...)")
    validate_space(space)
    _check_names(algorithm, allocator)
    if seed is None and store is not None and store is not False and isinstance(algorithm,
                                                                              str | type):
        seed = secrets.randbelow(2**31)  # resume replays the same draws: fix the seed now
    from nbtune.algorithms import make_algorithm

    algorithm_options = _auto_type(algorithm, trainable, algorithm_options)
    algo = make_algorithm(
        algorithm, space, metric=metric, mode=mode, max_budget=max_budget,
        num_trials=num_trials, seed=seed, min_budget=min_budget, **algorithm_options,
    )
    alloc = make_allocator(allocator, **dict(allocator_options or {}))
    st = None
    if store is not None and store is not False:
        from nbtune.store import open_store  # SQLAlchemy, on demand

        st = open_store(store)
        if name is not None:
            st.ensure_new(name)  # a clash fails before anything runs, with the resume hint
    rt = _make_runtime(runtime, trainable)
    if isinstance(rt, SimRuntime) and not isinstance(trainable, WorkloadModel):
        raise TypeError(
            "runtime='sim' needs a workload model (nbtune.workloads.SyntheticWorkload, "
            "TraceWorkload); to run a training function use runtime='dask' (or 'auto')"
        )
    hints = {"workload": trainable} if isinstance(trainable, WorkloadModel) else {}
    engine = Engine(algo, alloc, validate=validate, max_failures=max_failures, hints=hints)
    if name is None:
        name = st.free_name() if st is not None else f"experiment-{next(_names)}"
    exp = Experiment(name, engine, rt, trainable)
    if st is not None:
        from nbtune.store.recorder import runtime_checkpoints, start_recording

        exp.store = st
        exp.recorder = start_recording(
            st, name, engine, algorithm=algorithm, algorithm_options=algorithm_options,
            allocator=allocator, allocator_options=allocator_options, trainable=trainable,
            runtime=getattr(rt, "name", type(rt).__name__), max_failures=max_failures,
            checkpoints=runtime_checkpoints(st, name, rt),
        )
    try:
        rt.start(engine, trainable)
    except BaseException:
        if exp.recorder is not None:
            exp.recorder.close()  # an error in this process: keep everything recorded so far
            if exp.recorder.batches == 0 and st is not None:
                st.delete(name)  # it never started: leave the name free, not a stub to resume
        raise
    return exp
