"""The one place a run is assembled: policies, engine, runtime, recorder, start.

:func:`build_run` turns a checked :class:`~nbtune.build.run_options.RunSpec` into a running
:class:`~nbtune.experiment.Experiment` (``tune``, the ``%%tune`` magic and the demos);
``resume`` rebuilds its policies from the store and goes through :func:`make_engine`,
:func:`resumed_runtime` and :func:`build_experiment`; the simulator replay through
:func:`make_policies` and :func:`build_experiment`. So a rule about starting an experiment
(the trainable must fit the runtime, a virtual clock continues from the engine's time, a
run that never started leaves no record behind) is written once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from nbtune import kernels
from nbtune.build.run_checks import fusion_width
from nbtune.build.run_options import RunSpec
from nbtune.core.handles import RecorderHandle
from nbtune.engine import fusion_units
from nbtune.engine.engine import Engine
from nbtune.experiment import Experiment, Recipe
from nbtune.runtimes.runtime_protocol import Runtime, check_trainable
from nbtune.runtimes.sim import SimRuntime

if TYPE_CHECKING:
    from nbtune.store.store import Store

__all__ = ["build_run", "build_experiment", "make_policies", "make_engine", "make_runtime",
           "ran_on", "resumed_runtime", "runtime_class", "wrap_surrogates", "check_trainable"]

#: numbers the names of experiments run without a name or a store (``experiment-N``)
_names = itertools.count(1)

#: what the protocol asks of a runtime object, named in the error when one lacks some
_PROTOCOL = ("name", "virtual_clock", "keeps_checkpoints", "live_workers", "clock", "start",
             "wait", "done", "submit", "drives", "utilization")


def runtime_class(name: str) -> type:
    """The runtime registered as ``name`` (``"sim"`` or ``"dask"``): its capabilities are class attributes."""
    if name == "sim":
        return SimRuntime
    if name == "dask":
        from nbtune.runtimes.dask import DaskRuntime  # heavy import, on demand

        return DaskRuntime
    raise ValueError(f"runtime must be 'auto', 'sim', 'dask' or a runtime object, got {name!r}")


def make_runtime(spec: str | Runtime, *, trainable: Any = None, **options: Any) -> Runtime:
    """A runtime from its name (``"auto"``, ``"sim"``, ``"dask"``, with constructor ``options``) or as given.

    ``"auto"`` picks by what ``trainable`` is: a workload model runs on the
    simulator, a training function on Dask. ``"dask"`` without options is the
    process's kept local cluster (sized to the machine, GPUs if any), so the
    next experiment in a notebook starts at once; with options it is a new one.
    """
    if isinstance(spec, str):
        if spec == "auto":
            from nbtune.workloads.workload_protocol import WorkloadModel  # a lower layer, on demand

            spec = "sim" if isinstance(trainable, WorkloadModel) else "dask"
        if spec == "dask" and not options:
            from nbtune.runtimes.dask.driver_side.shared import (
                shared_runtime,  # heavy import, on demand
            )

            return shared_runtime()
        return runtime_class(spec)(**options)
    if not isinstance(spec, Runtime):
        missing = [n for n in _PROTOCOL if not hasattr(spec, n)]
        raise TypeError(f"runtime {spec!r} does not implement the Runtime protocol "
                        f"(it lacks {', '.join(missing)}): see nbtune.runtimes.runtime_protocol.Runtime")
    if options:
        raise TypeError(f"options {sorted(options)} are for a runtime name, not an instance")
    return spec


def build_experiment(
    name: str,
    engine: Engine,
    runtime: str | Runtime,
    trainable: Any,
    *,
    store: Store | None = None,
    record: Callable[[Runtime], RecorderHandle] | None = None,
    created: bool = False,
    start: bool = True,
    before_start: Callable[[Experiment], None] | None = None,
    after_start: Callable[[Experiment], None] | None = None,
    recipe: Recipe | None = None,
) -> Experiment:
    """Start ``engine`` on ``runtime`` with ``trainable``; return the running :class:`Experiment`.

    ``record(runtime)`` makes the store's recorder once the runtime exists (it
    points a checkpointing runtime at the store). An engine that already ran
    (a replayed one) continues on a virtual clock from its own time; a wall
    clock cannot move and the engine offsets it instead. If the start fails
    the recorder keeps what it has; when the row was ``created`` for this run
    and nothing was recorded, it is deleted so the name stays free. With
    ``start=False`` the caller starts it (``exp.runtime.start(exp.engine,
    exp.trainable)``) after subscribing to the engine: the simulator runs the
    whole experiment inside ``start``. ``before_start(exp)`` and
    ``after_start(exp)`` run just before and after ``runtime.start`` (a plan's
    executor readies the cluster, then follows the run); if either fails the
    start counts as failed, as above. ``recipe`` says how the algorithm and the
    allocator were made (what ``exp.what_if`` rebuilds them from).
    """
    rt = make_runtime(runtime, trainable=trainable)
    check_trainable(trainable, rt)
    if engine.started and rt.virtual_clock and rt.clock.now() < engine.time:
        rt.clock.advance_to(engine.time)  # type: ignore[attr-defined]
    exp = Experiment(name, engine, rt, trainable)
    exp.recipe = recipe
    if record is not None:
        exp.store, exp.recorder = store, record(rt)
    kernels.track(exp)  # in a notebook kernel: listed in the JupyterLab sidebar
    if not start:
        return exp
    try:
        if before_start is not None:
            before_start(exp)
        rt.start(engine, trainable)
        if after_start is not None:
            after_start(exp)
    except BaseException:
        kernels.untrack(exp)
        if exp.recorder is not None:
            exp.recorder.close()  # an error in this process: keep everything recorded so far
            if created and exp.recorder.batches == 0:
                store.delete(name)  # it never started: leave the name free, not a stub to resume
        raise
    return exp


def ran_on(recorded: str | None, trainable: Any) -> str:
    """The registered runtime a stored run continues on: the one its row records
    (``recorded``), or, when that is not a registered name, the one ``trainable`` runs on."""
    if recorded in ("sim", "dask"):
        return recorded
    from nbtune.workloads.workload_protocol import WorkloadModel  # a lower layer, on demand

    return "sim" if isinstance(trainable, WorkloadModel) else "dask"


def resumed_runtime(runtime: str | Runtime, recorded: str | None, trainable: Any,
                    cluster: Any = None) -> str | Runtime:
    """The runtime a resumed run starts on: ``"auto"`` goes back to the one it ran on
    (:func:`ran_on`), the simulator with the engine's last ``cluster``; anything else as
    given."""
    if not (isinstance(runtime, str) and runtime == "auto"):
        return runtime
    kind = ran_on(recorded, trainable)
    if kind == "sim" and cluster is not None:
        return make_runtime("sim", cluster=cluster)
    return kind


def make_policies(spec: RunSpec) -> tuple[Any, Any]:
    """``(algorithm, allocator)`` as ``spec`` names them (the allocator None with a plan,
    which brings its own); the algorithm checks the budgets."""
    from nbtune.algorithms import make_algorithm
    from nbtune.allocators import make_allocator

    s, r = spec.search, spec.resources
    algo = make_algorithm(s.algorithm, spec.space, metric=s.metric, mode=s.mode,
                          max_budget=s.max_budget, num_trials=s.num_trials, seed=s.seed,
                          min_budget=s.min_budget, **s.algorithm_options)
    alloc = None if r.plan is not None else make_allocator(r.allocator,
                                                           **dict(r.allocator_options or {}))
    return algo, alloc


def wrap_surrogates(algo: Any, alloc: Any, scaling: float | None,
                    eager_fraction: float) -> tuple[Any, Any]:
    """Hydro's shrink, tune, transfer (:mod:`nbtune.surrogate`) around both policies when
    ``scaling`` is given; as they are otherwise."""
    if scaling is None:
        return algo, alloc
    from nbtune.surrogate.eager_transfer import surrogate_tuning  # torch, on demand

    return surrogate_tuning(algo, alloc, scaling, eager_fraction)


def make_engine(algo: Any, alloc: Any, *, validate: bool = False, max_failures: int = 0,
                fusion: Mapping[str, Any] | None = None,
                engine_class: type[Engine] = Engine) -> Engine:
    """The engine over ``algo`` and ``alloc``; ``fusion`` is what
    :func:`nbtune.engine.fusion_units.enable` takes (None: no fusion)."""
    engine = engine_class(algo, alloc, validate=validate, max_failures=max_failures)
    if fusion:
        fusion_units.enable(engine, **fusion)
    return engine


def build_run(spec: RunSpec) -> Experiment:
    """Assemble and start the run ``spec`` describes (checked by
    :func:`~nbtune.build.run_checks.check_run`); return its :class:`Experiment`.

    The store is opened and the name checked free before the runtime is made; the
    trainable is checked against the runtime before the store records anything.
    """
    search, res, ex, rec = spec.search, spec.resources, spec.execution, spec.recording
    trainable = spec.trainable
    algo, alloc = make_policies(spec)
    st = None
    if rec.store is not None and rec.store is not False:
        from nbtune.store import open_store  # SQLAlchemy, on demand

        st = open_store(rec.store)
        if rec.name is not None:
            st.ensure_new(rec.name)  # a clash fails before anything runs, with the resume hint
    rt = make_runtime(ex.runtime, trainable=trainable)
    check_trainable(trainable, rt)  # before the store records anything
    width = fusion_width(ex.fusion)
    if width and rt.name != "dask":
        raise ValueError(f"fusion runs fused trials on the Dask runtime; runtime {rt.name!r} "
                         "cannot (use runtime='dask')")
    _set_trial_limits(rt, ex.runtime, ex.trial_timeout, ex.execution)
    algo, alloc = wrap_surrogates(algo, alloc, search.scaling, search.eager_fraction)
    run_options = None if search.scaling is None else {  # for resume
        "scaling": search.scaling, "eager_fraction": search.eager_fraction}
    executor = None
    if res.plan is not None:  # RubberBand: the plan's allocator and cluster executor
        from nbtune.planner.plan_executor import PlanExecutor, check_plan_fits  # on demand

        check_plan_fits(res.plan, algo)
        executor = PlanExecutor(res.plan, rt)
        alloc = executor.allocator
    fusion = None
    if width:  # elastic split (Hydro §5.3) through per-member checkpoints, if it saves any
        from nbtune.runtimes.dask.trial_side.trial_api import uses_checkpoints

        fusion = {"f_max": width, "shape_keys": ex.shape_keys,
                  "elastic": uses_checkpoints(trainable), "memory": ex.fusion is True}
    # no workload model in the hints: the runtime's profiler measures what allocators read
    engine = make_engine(algo, alloc, validate=ex.validate, max_failures=ex.max_failures,
                         fusion=fusion)
    if st is not None and getattr(rt, "profiler", None) is None:
        from nbtune.runtimes.profiler import Profiler
        from nbtune.store import SqlProfileStore

        rt.profiler = Profiler(SqlProfileStore(st))  # the job history outlives the kernel
    name = rec.name
    if name is None:
        name = st.free_name() if st is not None else f"experiment-{next(_names)}"
    record = None
    if st is not None:
        from nbtune.store.registration import runtime_checkpoints, start_recording

        def record(rt: Runtime) -> RecorderHandle:
            return start_recording(
                st, name, engine, algorithm=search.algorithm,
                algorithm_options=search.algorithm_options, allocator=res.allocator,
                allocator_options=res.allocator_options, trainable=trainable,
                runtime=rt.name, max_failures=ex.max_failures,
                checkpoints=runtime_checkpoints(st, name, rt), run_options=run_options,
                fusion=None if engine.fusion is None else engine.fusion.settings(),
            )
    hooks = {} if executor is None else _executor_hooks(executor)
    recipe = None
    if (isinstance(search.algorithm, str | type) and search.scaling is None
            and res.plan is None and not width):
        from nbtune.algorithms import effective_algorithm_options

        recipe = Recipe(search.algorithm,
                        effective_algorithm_options(engine.algorithm, search.algorithm_options),
                        search.seed, search.num_trials, search.min_budget, search.max_budget,
                        res.allocator, dict(res.allocator_options or {}))
    return build_experiment(name, engine, rt, trainable, store=st, record=record, created=True,
                            recipe=recipe, **hooks)


def _set_trial_limits(rt: Runtime, spec: Any, trial_timeout: float | None,
                      execution: str | None) -> None:
    """Put ``trial_timeout`` and ``execution`` on a runtime that runs training functions;
    the shared runtime (named, not given) is reset to its defaults when they are not given."""
    named = isinstance(spec, str)
    if trial_timeout is not None or named:
        if trial_timeout is not None and not hasattr(rt, "trial_timeout"):
            raise ValueError(f"trial_timeout needs a runtime that runs training functions "
                             f"(runtime='dask'); runtime {rt.name!r} has no wall clock to time")
        if hasattr(rt, "trial_timeout"):
            rt.trial_timeout = None if trial_timeout is None else float(trial_timeout)
    if execution is not None or named:
        if execution is not None and not hasattr(rt, "execution"):
            raise ValueError(f"execution needs a runtime that runs training functions "
                             f"(runtime='dask'); runtime {rt.name!r} runs none")
        if hasattr(rt, "execution"):
            rt.execution = execution or "auto"


def _executor_hooks(executor: Any) -> dict[str, Any]:
    """A plan's executor joins the experiment and readies the cluster, then follows the run."""

    def attach(exp: Experiment) -> None:
        exp.plan_executor = executor
        executor.prepare()

    return {"before_start": attach, "after_start": lambda exp: executor.start()}
