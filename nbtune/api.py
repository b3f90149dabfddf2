"""``nbtune.tune``: the one call most users need."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from nbtune.allocators import FifoAllocator, make_allocator
from nbtune.build import build_experiment, check_mode, make_runtime
from nbtune.core.code_names import names_used
from nbtune.core.space import validate_space
from nbtune.engine import fusion_units
from nbtune.engine.engine import Engine
from nbtune.experiment import Experiment, Recipe
from nbtune.runtimes.runtime_protocol import Runtime, check_trainable
from nbtune.workloads.workload_protocol import WorkloadModel

__all__ = ["tune"]

_names = itertools.count(1)


def _check_names(algorithm: Any, allocator: Any) -> None:
    """Unknown registry names fail before budgets and modes are even looked at."""
    from nbtune.algorithms import ALGORITHMS, AlgorithmError
    from nbtune.allocators import ALLOCATORS

    if isinstance(algorithm, str) and algorithm.strip().lower() not in ALGORITHMS:
        raise AlgorithmError(f"unknown algorithm {algorithm!r}; valid names: "
                             f"{', '.join(ALGORITHMS)}")
    if isinstance(allocator, str) and allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; choose one of {sorted(ALLOCATORS)}")


def _check_numbers(max_failures: Any, trial_timeout: Any) -> None:
    """Counts and limits that make no sense fail before anything starts."""
    if isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < 0:
        raise ValueError(f"max_failures must be an integer >= 0 (retries of a failing trial), "
                         f"got {max_failures!r}")
    if trial_timeout is not None and (isinstance(trial_timeout, bool) or not isinstance(
            trial_timeout, int | float) or not trial_timeout > 0):
        raise ValueError(f"trial_timeout must be a number of seconds > 0 or None, "
                         f"got {trial_timeout!r}")


#: the cap over the memory-measured F_max that ``fusion=True`` gives: above Hydro's 676
#: scaled ResNet-18s on one A100 (Fig. 8), a guard against a slope lost in noise
MAX_FUSION = 1024
_FUSION_NAMES = {"as_fusion_trial", "FusionTrial", "run_group"}


def _check_fusion(fusion: Any, shape_keys: Sequence[str] | None, trainable: Any,
                  space: Mapping[str, Any]) -> tuple[int, tuple[str, ...]]:
    """``(F, shape keys)``, F = 0 when fusion is off; bad values and a training function
    that does not build its model through the fusion trial API fail before anything runs."""
    if fusion is False or fusion is None:
        return 0, ()
    f = MAX_FUSION if fusion is True else fusion
    if isinstance(f, bool) or not isinstance(f, int) or f < 1:
        raise ValueError(f"fusion must be True, False or a number of trials per fused model "
                         f"F >= 1, got {fusion!r}")
    if isinstance(trainable, WorkloadModel) or not callable(trainable):
        raise ValueError("fusion needs a training function train(config, trial) (it fuses "
                         "real models); a workload model has none")
    names = names_used(trainable)
    if not (names & _FUSION_NAMES or {"model", "optimizer", "loss"} <= names):
        raise ValueError(
            f"fusion: {getattr(trainable, '__name__', trainable)!r} does not use the fusion "
            "trial API; build the model, optimizer and loss through the trial "
            "(trial = as_fusion_trial(trial); model = trial.model(make_model); opt = "
            "trial.optimizer(torch.optim.SGD, model, lr='lr'); trial.loss(...)), see "
            "docs/fusion.rst")
    keys = tuple(shape_keys) if shape_keys is not None else tuple(
        k for k in ("batch_size",) if k in space)
    unknown = [k for k in keys if k not in space]
    if unknown:
        raise ValueError(f"shape_keys {unknown} are not in the search space {sorted(space)}")
    return f, keys


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
        from nbtune.runtimes.dask.trial_side.trial_api import (
            uses_checkpoints,  # no distributed import
        )

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
    allocator: Any = "auto",
    runtime: str | Runtime = "auto",
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
    trial_timeout: float | None = None,
    execution: str | None = None,
    fusion: bool | int = False,
    shape_keys: Sequence[str] | None = None,
    gpus_per_trial: float | None = None,
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
    if gpus_per_trial is not None:
        allocator, allocator_options = _fixed_request(gpus_per_trial, allocator,
                                                      allocator_options, plan)
    check_mode(metric, mode)  # accuracy minimised by mistake: say so before anything runs
    _check_numbers(max_failures, trial_timeout)
    if execution is not None:
        from nbtune.runtimes.dask.driver_side.execution_mode import (
            check_execution,  # no distributed import
        )

        check_execution(execution)
    f_max, keys = _check_fusion(fusion, shape_keys, trainable, space)
    if f_max and scaling is not None:  # surrogates (width / S) and targets never share a unit
        keys = (*keys, "scaling")
    if seed is None and isinstance(algorithm, str | type):
        # resume and exp.what_if replay the same draws: fix the seed now
        seed = secrets.randbelow(2**31)
    from nbtune.algorithms import make_algorithm

    algorithm_options = _auto_type(algorithm, trainable, algorithm_options)
    algo = make_algorithm(
        algorithm, space, metric=metric, mode=mode, max_budget=max_budget,
        num_trials=num_trials, seed=seed, min_budget=min_budget, **algorithm_options,
    )
    alloc = None if plan is not None else make_allocator(allocator, **dict(allocator_options or {}))
    st = None
    if store is not None and store is not False:
        from nbtune.store import open_store  # SQLAlchemy, on demand

        st = open_store(store)
        if name is not None:
            st.ensure_new(name)  # a clash fails before anything runs, with the resume hint
    rt = make_runtime(runtime, trainable=trainable)
    check_trainable(trainable, rt)  # before the store records anything
    if f_max and rt.name != "dask":
        raise ValueError(f"fusion runs fused trials on the Dask runtime; runtime {rt.name!r} "
                         "cannot (use runtime='dask')")
    if trial_timeout is not None or isinstance(runtime, str):  # the shared runtime: reset
        if trial_timeout is not None and not hasattr(rt, "trial_timeout"):
            raise ValueError(f"trial_timeout needs a runtime that runs training functions "
                             f"(runtime='dask'); runtime {rt.name!r} has no wall clock to time")
        if hasattr(rt, "trial_timeout"):
            rt.trial_timeout = None if trial_timeout is None else float(trial_timeout)
    if execution is not None or isinstance(runtime, str):  # the shared runtime: reset
        if execution is not None and not hasattr(rt, "execution"):
            raise ValueError(f"execution needs a runtime that runs training functions "
                             f"(runtime='dask'); runtime {rt.name!r} runs none")
        if hasattr(rt, "execution"):
            rt.execution = execution or "auto"
    run_options = None
    if scaling is not None:  # Hydro: shrink -> tune -> transfer (nbtune.surrogate)
        from nbtune.surrogate.eager_transfer import surrogate_tuning

        algo, alloc = surrogate_tuning(algo, alloc, scaling, eager_fraction)
        run_options = {"scaling": scaling, "eager_fraction": eager_fraction}  # for resume
    executor = None
    if plan is not None:  # RubberBand: the plan's allocator and cluster executor
        from nbtune.planner.plan_executor import PlanExecutor, check_plan_fits  # on demand

        check_plan_fits(plan, algo)
        executor = PlanExecutor(plan, rt)
        alloc = executor.allocator
    # no workload model in the hints: the runtime's profiler measures what allocators read
    engine = Engine(algo, alloc, validate=validate, max_failures=max_failures)
    if f_max:  # elastic split (Hydro §5.3) through per-member checkpoints, if it saves any
        from nbtune.runtimes.dask.trial_side.trial_api import uses_checkpoints

        fusion_units.enable(engine, f_max, keys, elastic=uses_checkpoints(trainable),
                            memory=fusion is True)
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
                checkpoints=runtime_checkpoints(st, name, rt), run_options=run_options,
                fusion=None if engine.fusion is None else engine.fusion.settings(),
            )
    hooks = {} if executor is None else _executor_hooks(executor)
    recipe = None
    if isinstance(algorithm, str | type) and scaling is None and plan is None and not f_max:
        from nbtune.store.registration import effective_algorithm_options

        recipe = Recipe(algorithm, effective_algorithm_options(engine.algorithm, algorithm_options),
                        seed, num_trials, min_budget, max_budget, allocator,
                        dict(allocator_options or {}))
    return build_experiment(name, engine, rt, trainable, store=st, record=record, created=True,
                            recipe=recipe, **hooks)


def _fixed_request(gpus: float, allocator: Any, options: Mapping[str, Any] | None,
                   plan: Any) -> tuple[str, dict[str, Any]]:
    """``gpus_per_trial`` is FIFO with a fixed request; an allocator that sizes trials itself
    (or a plan, which brings its own) cannot honour one, so say which to drop."""
    if plan is not None or allocator not in ("auto", "fifo"):
        chosen = "plan=..." if plan is not None else f"allocator={allocator!r}"
        raise ValueError(f"gpus_per_trial fixes every trial's GPUs (FIFO, as Ray Tune does) but "
                         f"{chosen} sizes trials itself: drop gpus_per_trial, or use "
                         "allocator='fifo'")
    FifoAllocator(gpus_per_trial=gpus)  # a bad value fails here, before anything runs
    return "fifo", {**dict(options or {}), "gpus_per_trial": float(gpus)}


def _executor_hooks(executor: Any) -> dict[str, Any]:
    """A plan's executor joins the experiment and readies the cluster, then follows the run."""

    def attach(exp: Experiment) -> None:
        exp.plan_executor = executor
        executor.prepare()

    return {"before_start": attach, "after_start": lambda exp: executor.start()}
