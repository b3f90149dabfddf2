"""``nbtune.tune``: the one call most users need."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Mapping
from typing import Any

from nbtune.allocators import make_allocator
from nbtune.build import build_experiment, check_mode, make_runtime
from nbtune.engine.engine import Engine
from nbtune.experiment import Experiment
from nbtune.runtimes.base import Runtime, check_trainable

__all__ = ["tune"]

_names = itertools.count(1)


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
    scaling: float | None = None,
    eager_fraction: float = 0.5,
    plan: Any = None,
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

    ``scaling=S`` tunes Hydro surrogates (docs/surrogates.rst): every trial's
    config gets ``scaling=S`` (build the model with ``nbtune.surrogate.build``)
    and the best configuration is trained on the full model (``scaling=1``)
    once ``eager_fraction`` of the surrogate trials has ended.

    ``plan`` (an :class:`nbtune.planner.Plan`) carries a RubberBand plan out on
    the Dask runtime: the cluster is resized at stage boundaries and the bill
    metered (:attr:`Experiment.cost`); it replaces ``allocator``.
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
    check_mode(metric, mode)  # accuracy minimised by mistake: say so before anything runs
    rt = make_runtime(runtime)
    check_trainable(trainable, rt)  # before the store records anything
    from nbtune.algorithms import make_algorithm

    algo = make_algorithm(
        algorithm, space, metric=metric, mode=mode, max_budget=max_budget,
        num_trials=num_trials, seed=seed, min_budget=min_budget, **algorithm_options,
    )
    if scaling is not None:  # Hydro: shrink -> tune -> transfer (nbtune.surrogate)
        from nbtune.surrogate.eager_transfer import EagerTransfer

        algo = EagerTransfer(algo, scaling=scaling, fraction=eager_fraction)
    executor = None
    if plan is not None:  # RubberBand: the plan's allocator and cluster executor
        from nbtune.planner.executor import PlanExecutor, check_plan_fits  # on demand

        check_plan_fits(plan, algo)
        executor = PlanExecutor(plan, rt)
    alloc = (executor.allocator if executor is not None
             else make_allocator(allocator, **dict(allocator_options or {})))
    # no workload model in the hints: the runtime's profiler measures what allocators read
    engine = Engine(algo, alloc, validate=validate, max_failures=max_failures)
    if st is not None and getattr(rt, "profiler", None) is None:
        from nbtune.runtimes.profiler import Profiler
        from nbtune.store import SqlProfileStore

        rt.profiler = Profiler(SqlProfileStore(st))  # the job history outlives the kernel
    if name is None:
        name = st.free_name() if st is not None else f"experiment-{next(_names)}"
    record = None
    if st is not None:
        from nbtune.store.registration import runtime_checkpoints, start_recording

        def record(rt: Runtime) -> Any:
            return start_recording(
                st, name, engine, algorithm=algorithm, algorithm_options=algorithm_options,
                allocator=allocator, allocator_options=allocator_options, trainable=trainable,
                runtime=rt.name, max_failures=max_failures,
                checkpoints=runtime_checkpoints(st, name, rt),
            )
    hooks = {} if executor is None else _executor_hooks(executor)
    return build_experiment(name, engine, rt, trainable, store=st, record=record, created=True,
                            **hooks)


def _executor_hooks(executor: Any) -> dict[str, Any]:
    """A plan's executor joins the experiment and readies the cluster, then follows the run."""

    def attach(exp: Experiment) -> None:
        exp.plan_executor = executor
        executor.prepare()

    return {"before_start": attach, "after_start": lambda exp: executor.start()}
