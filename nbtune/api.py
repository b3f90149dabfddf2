"""``nbtune.tune``: the one call most users need."""

from __future__ import annotations

import itertools
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
    allocator: Any = "fifo",
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
    """
    if space is None:
        space = getattr(trainable, "space", None)
        if space is None:
            raise ValueError("give a search space: tune(train, {'lr': loguniform(1e-4, 1e-1)}, ...)")
    if store is not None:
        raise ValueError(
            "store= needs the persistent store of the Dask runtime; run without store for now"
        )
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
    hints = {"workload": trainable} if isinstance(trainable, WorkloadModel) else {}
    engine = Engine(algo, alloc, validate=validate, max_failures=max_failures, hints=hints)
    exp = Experiment(name or f"experiment-{next(_names)}", engine, rt, trainable)
    rt.start(engine, trainable)
    return exp
