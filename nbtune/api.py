"""``nbtune.tune``: the one call most users need.

It takes the run's options as keywords or as option objects
(:mod:`nbtune.build.run_options`), merges them into one :class:`~nbtune.build.RunSpec`,
checks it and has :func:`nbtune.build.build_run` assemble and start the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nbtune.build import (
    ExecutionOptions,
    OptionGroup,
    RecordingOptions,
    ResourceOptions,
    SearchOptions,
    build_run,
    check_run,
    merge_options,
)
from nbtune.experiment import Experiment
from nbtune.runtimes.runtime_protocol import Runtime

__all__ = ["tune", "SearchOptions", "ResourceOptions", "ExecutionOptions", "RecordingOptions"]

# tune's defaults are the option objects' own: one set
_S, _R, _E, _C = SearchOptions(), ResourceOptions(), ExecutionOptions(), RecordingOptions()


def tune(
    trainable: Any,
    space: Mapping[str, Any] | None = None,
    *,
    algorithm: Any = _S.algorithm,
    metric: str | None = _S.metric,
    mode: str = _S.mode,
    max_budget: float | None = _S.max_budget,
    num_trials: int | None = _S.num_trials,
    allocator: Any = _R.allocator,
    runtime: str | Runtime = _E.runtime,
    name: str | None = _C.name,
    store: Any = _C.store,
    seed: int | None = _S.seed,
    min_budget: float = _S.min_budget,
    validate: bool = _E.validate,
    max_failures: int = _E.max_failures,
    allocator_options: Mapping[str, Any] | None = _R.allocator_options,
    scaling: float | None = _S.scaling,
    eager_fraction: float = _S.eager_fraction,
    plan: Any = _R.plan,
    trial_timeout: float | None = _E.trial_timeout,
    execution: str | None = _E.execution,
    fusion: bool | int = _E.fusion,
    shape_keys: Sequence[str] | None = _E.shape_keys,
    gpus_per_trial: float | None = _R.gpus_per_trial,
    options: OptionGroup | Sequence[OptionGroup] | None = None,
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

    ``scaling=S`` tunes Hydro surrogates (docs/surrogates.rst): every trial's
    config gets ``scaling=S`` (build the model with ``nbtune.surrogate.build``)
    and the best configuration is trained on the full model (``scaling=1``)
    once ``eager_fraction`` of the surrogate trials has ended.

    ``plan`` (an :class:`nbtune.planner.Plan`) carries a RubberBand plan out on
    the Dask runtime: the cluster is resized at stage boundaries and the bill
    metered (:attr:`Experiment.cost`); it replaces ``allocator``.

    ``trial_timeout`` (seconds, Dask runtime): a launch of a trial still
    running that long after it started is killed and fails with an error
    saying so (a hung data loader must not hold a GPU for ever); the other
    trials go on. ``execution`` (Dask runtime): ``"process"``, ``"thread"`` or ``"auto"``
    (the runtime's default): where a trial runs on its worker (docs/dask.rst).

    ``fusion=F`` fuses trials, Hydro-style (docs/fusion.rst): pending
    trials whose ``shape_keys`` values agree (default: ``batch_size`` when the space has
    it; keys that change parameter shapes must be listed) train as one fused model of up to
    F members in one process on one worker. ``fusion=True`` measures F_max instead: each
    shape group first runs units of one and two members, and once both reported their
    peak memory its units are as wide as fits the worker's memory less 10 %. Each member is an ordinary trial (results gain
    a ``group`` column, the fused unit's id); an algorithm stops or pauses members one by
    one. Needs a training function written against the fusion trial API
    (``trial.model``/``optimizer``/``loss``, e.g. through ``as_fusion_trial``) and the Dask
    runtime.

    ``gpus_per_trial`` is Ray Tune's fixed per-trial request: ``k`` whole GPUs
    (one DDP trial over k workers) or a fraction of one (packed), FIFO order;
    leave it out and nbtune's allocator sizes trials from measurements.

    ``options`` takes the same settings grouped, as one option object or a sequence of
    them: :class:`~nbtune.build.SearchOptions` (algorithm, metric, mode, budgets,
    num_trials, seed, algorithm_options, scaling, eager_fraction),
    :class:`~nbtune.build.ResourceOptions` (allocator, allocator_options, gpus_per_trial,
    plan), :class:`~nbtune.build.ExecutionOptions` (runtime, trial_timeout, execution,
    fusion, shape_keys, max_failures, validate) and :class:`~nbtune.build.RecordingOptions`
    (store, name). A setting given both as a keyword and in an option object is a
    TypeError. ``metric`` and ``max_budget`` are required, from either.
    """
    keywords = {
        "algorithm": algorithm, "metric": metric, "mode": mode, "max_budget": max_budget,
        "num_trials": num_trials, "allocator": allocator, "runtime": runtime, "name": name,
        "store": store, "seed": seed, "min_budget": min_budget, "validate": validate,
        "max_failures": max_failures, "allocator_options": allocator_options,
        "scaling": scaling, "eager_fraction": eager_fraction, "plan": plan,
        "trial_timeout": trial_timeout, "execution": execution, "fusion": fusion,
        "shape_keys": shape_keys, "gpus_per_trial": gpus_per_trial,
    }
    spec = merge_options(trainable, space, options, keywords, algorithm_options)
    return build_run(check_run(spec))
