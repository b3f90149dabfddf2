"""``nbtune.tune``: the one call most users need."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Mapping
from typing import Any

from nbtune.allocators import make_allocator
from nbtune.engine.engine import Engine
from nbtune.experiment import Experiment
from nbtune.runtimes.base import Runtime
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads.base import WorkloadModel

__all__ = ["tune"]

_names = itertools.count(1)


def _make_runtime(runtime: str | Runtime) -> Runtime:
    if isinstance(runtime, str):
        if runtime == "sim":
            return SimRuntime()
        if runtime == "dask":
            from nbtune.runtimes import dask as dask_runtime  # heavy import, on demand

            return dask_runtime.DaskRuntime()
        raise ValueError(f"runtime must be 'sim', 'dask' or a runtime object, got {runtime!r}")
    if not isinstance(runtime, Runtime):
        raise TypeError(f"runtime {runtime!r} does not implement the Runtime protocol")
    return runtime


def tune(
    trainable: Any,
    space: Mapping[str, Any] | None = None,
    *,
    algorithm: Any = "asha",
    metric: str,
    mode: str = "min",
    max_budget: float,
    num_trials: int | None = None,
    allocator: Any = "auto",
    runtime: str | Runtime = "sim",
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

    ``trainable`` is a training function ``train(config, trial)`` for the Dask
    runtime, or a workload model (e.g. :class:`nbtune.workloads.SyntheticWorkload`)
    for the simulator. ``algorithm`` and ``allocator`` are registry names or
    instances; extra keyword arguments go to the algorithm (``eta=3`` ...).
    The simulator runs to completion before this returns; the Dask runtime
    returns at once (call :meth:`Experiment.wait`).

    ``store`` persists the experiment so :func:`nbtune.resume` can continue it
    after the kernel dies: ``None`` keeps it in memory, ``True`` uses
    ``./nbtune-store/nbtune.db``, a directory ``<dir>/nbtune.db``, a file path
    or SQLAlchemy URL exactly that, or pass a :class:`nbtune.store.Store`. With
    a store and no ``seed`` a random seed is drawn and stored (replay needs it).
    """
    if space is None:
        space = getattr(trainable, "space", None)
        if space is None:
            raise ValueError("give a search space: tune(train, {'lr': loguniform(1e-4, 1e-1)}, ...)")
    st = None
    if store is not None and store is not False:
        from nbtune.store import open_store  # SQLAlchemy, on demand

        st = open_store(store)
        if name is not None:
            st.ensure_new(name)  # a clash fails before anything runs, with the resume hint
        if seed is None and isinstance(algorithm, str | type):
            seed = secrets.randbelow(2**31)  # resume replays the same draws: fix the seed now
    rt = _make_runtime(runtime)
    if isinstance(rt, SimRuntime) and not isinstance(trainable, WorkloadModel):
        raise TypeError(
            "runtime='sim' needs a workload model (nbtune.workloads.SyntheticWorkload, "
            "TraceWorkload); to run a training function use runtime='dask'"
        )
    from nbtune.algorithms import make_algorithm

    algo = make_algorithm(
        algorithm, space, metric=metric, mode=mode, max_budget=max_budget,
        num_trials=num_trials, seed=seed, min_budget=min_budget, **algorithm_options,
    )
    alloc = make_allocator(allocator, **dict(allocator_options or {}))
    # no workload model in the hints: the runtime's profiler measures what allocators read
    engine = Engine(algo, alloc, validate=validate, max_failures=max_failures)
    if st is not None and getattr(rt, "profiler", None) is None:
        from nbtune.runtimes.profiler import Profiler
        from nbtune.store import SqlProfileStore

        rt.profiler = Profiler(SqlProfileStore(st))  # the job history outlives the kernel
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
