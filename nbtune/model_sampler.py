"""HyperSack's Sampler (§IV-C1): a short profiling run of each unique model before the search.

Knapsack placement needs each trial's demand before it runs; a model nothing is known
about takes a whole GPU, so a first run of a search space starts as FIFO does. HyperSack
identifies the unique models of the search space, looks each up in the job history of
earlier jobs, and trains the ones it does not find for a few iterations before scheduling.
:func:`sample_models` is that step on the runtime it is given: the unknown models run
once each for ``budget`` units, one per GPU (alone, so their utilization is their own),
through the runtime's profiler, which writes what it measured into the job history the
search then reads. The run is an ordinary experiment, so its makespan is the sampler's cost.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from nbtune.allocators.profiling import model_signature
from nbtune.build import (
    ExecutionOptions,
    ResourceOptions,
    RunSpec,
    SearchOptions,
    build_run,
    check_run,
)
from nbtune.core.space import Choice, Domain, validate_space
from nbtune.experiment import Experiment

__all__ = ["unique_models", "sample_models"]


def unique_models(space: Mapping[str, Any], *, seed: int | None = 0,
                  signature_keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """One configuration per model signature that ``space`` can draw, in declaration order.

    The signatures are :func:`~nbtune.allocators.profiling.model_signature`'s: the
    product of the ``choice``/``grid`` domains' values that change it (every non-float
    value, or only ``signature_keys``); the other hyperparameters are drawn once per
    configuration (continuous ones do not change a trial's cost; a ``randint`` is drawn,
    not enumerated).
    """
    space = validate_space(space)
    keys = None if signature_keys is None else set(signature_keys)
    rng = np.random.default_rng(seed)

    def counts(name: str, value: Any) -> bool:
        return (name in keys) if keys is not None else not isinstance(value, float)

    names = [k for k, d in space.items() if isinstance(d, Choice)
             and any(counts(k, o) for o in d.options)]
    values = [[o for o in space[k].options if counts(k, o)] for k in names]
    out: dict[str, dict[str, Any]] = {}
    for combo in itertools.product(*values):
        cfg = {k: (d.sample(rng) if isinstance(d, Domain) else d) for k, d in space.items()}
        cfg.update(zip(names, combo, strict=True))
        out.setdefault(model_signature(cfg, signature_keys), cfg)
    return list(out.values())


def sample_models(trainable: Any, space: Mapping[str, Any], *, runtime: Any, metric: str,
                  mode: str = "min", budget: float = 1.0, seed: int | None = 0,
                  signature_keys: Iterable[str] | None = None) -> Experiment | None:
    """Profile each model of ``space`` that the job history lacks, for ``budget`` units.

    ``runtime`` must carry a :class:`~nbtune.runtimes.profiler.Profiler` with a job
    history (``profiler=Profiler(history)``); a later run whose profiler reads the same
    history starts with the measurements. Returns the sampling experiment (its
    ``makespan`` is what sampling cost), or None when the history knew every model.
    The models are the profiler's signatures (its ``signature_keys`` unless given); the
    run is :func:`nbtune.tune`'s with ``algorithm="random"`` over the models' configs
    (``points_to_evaluate``) and ``allocator="fifo"``.
    """
    profiler = getattr(runtime, "profiler", None)
    if profiler is None or profiler.history is None:
        raise ValueError("sample_models needs a runtime whose profiler has a job history: "
                         "pass runtime=...(profiler=Profiler(history))")
    keys = profiler.keys if signature_keys is None else signature_keys
    todo = [c for c in unique_models(space, seed=seed, signature_keys=keys)
            if not profiler.remembers(trainable, c)]
    if not todo:
        return None
    search = SearchOptions(algorithm="random", metric=metric, mode=mode, max_budget=budget,
                           min_budget=budget, num_trials=len(todo), seed=seed,
                           algorithm_options={"points_to_evaluate": todo})
    exp = build_run(check_run(RunSpec(trainable, space, search, ResourceOptions(allocator="fifo"),
                                      ExecutionOptions(runtime=runtime))))
    exp.wait()
    profiler.flush()
    return exp
