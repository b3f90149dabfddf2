"""A run's options checked before anything starts, in the order a user fixes them.

:func:`check_run` takes a :class:`~nbtune.build.run_options.RunSpec` as the user gave it
and returns the spec :func:`nbtune.build.build_run` assembles: the trainable, the space, the
algorithm and allocator names, then the numbers, mode and metric are checked, and what the
options imply is filled in (the space a workload model carries, ``gpus_per_trial`` as FIFO's
fixed request, fusion's shape keys, ASHA's promotion mode for a checkpointing function, a
seed to replay). Budgets are checked by the algorithm as it is made.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from nbtune.allocators import FifoAllocator
from nbtune.build.run_options import RunSpec
from nbtune.core.code_names import names_used
from nbtune.core.space import validate_space
from nbtune.workloads.workload_protocol import WorkloadModel

__all__ = ["check_run", "check_mode", "fusion_width", "MAX_FUSION"]

#: the cap over the memory-measured F_max that ``fusion=True`` gives: above Hydro's 676
#: scaled ResNet-18s on one A100 (Fig. 8), a guard against a slope lost in noise
MAX_FUSION = 1024
_FUSION_NAMES = {"as_fusion_trial", "FusionTrial", "run_group"}


def check_run(spec: RunSpec) -> RunSpec:
    """``spec`` checked, with what its options imply filled in; raises before anything runs."""
    trainable, search, res, ex = spec.trainable, spec.search, spec.resources, spec.execution
    if not callable(trainable) and not isinstance(trainable, WorkloadModel):
        raise TypeError(f"the trainable must be a training function train(config, trial) or a "
                        f"workload model, got {type(trainable).__name__}")
    space = spec.space
    if space is None:
        space = getattr(trainable, "space", None)
        if space is None:
            raise ValueError("give a search space: tune(train, {'lr': loguniform(1e-4, 1e-1)}, ...)")
    validate_space(space)
    _check_names(search.algorithm, res.allocator)
    if res.gpus_per_trial is not None:
        allocator, options = _fixed_request(res.gpus_per_trial, res.allocator,
                                            res.allocator_options, res.plan)
        res = dataclasses.replace(res, allocator=allocator, allocator_options=options)
    if search.metric is None or search.max_budget is None:
        missing = [k for k in ("metric", "max_budget") if getattr(search, k) is None]
        raise TypeError(f"tune() needs {' and '.join(missing)} (a keyword or in SearchOptions)")
    # accuracy minimised by mistake: say so now, pointing at the caller of tune()
    check_mode(search.metric, search.mode, stacklevel=4)
    _check_numbers(ex.max_failures, ex.trial_timeout)
    if ex.execution is not None:
        from nbtune.runtimes.dask.driver_side.execution_mode import (
            check_execution,  # no distributed import
        )

        check_execution(ex.execution)
    width, keys = _check_fusion(ex.fusion, ex.shape_keys, trainable, space)
    if width and search.scaling is not None:  # surrogates (width / S) and targets never share
        keys = (*keys, "scaling")
    ex = dataclasses.replace(ex, shape_keys=keys)
    seed = search.seed
    if seed is None and isinstance(search.algorithm, str | type):
        seed = secrets.randbelow(2**31)  # resume and exp.what_if replay the same draws
    search = dataclasses.replace(
        search, seed=seed,
        algorithm_options=_auto_type(search.algorithm, trainable, search.algorithm_options))
    return RunSpec(trainable, space, search, res, ex, spec.recording)


#: words in a metric's name that say which way is better (``val_accuracy``, ``train-loss``)
_MAXIMISED = {"accuracy", "acc", "auc", "roc", "f1", "precision", "recall", "reward", "return",
              "bleu", "rouge", "r2", "iou", "dice", "map", "top1", "top5", "ndcg"}
_MINIMISED = {"loss", "error", "err", "mse", "mae", "rmse", "nll", "perplexity", "ppl",
              "regret", "cost", "wer", "cer", "latency"}


def check_mode(metric: str, mode: str, *, stacklevel: int = 3) -> str | None:
    """Warn when the metric's name says the other direction (``accuracy`` with ``mode='min'``).

    A silently minimised accuracy tunes towards the worst model and reports it
    as best; a warning, not an error, since names can mislead (``loss_reduction``).
    Returns the message given, or None. ``stacklevel`` is :func:`warnings.warn`'s, so that
    the warning names the line of the user's call.
    """
    if not isinstance(metric, str):
        raise TypeError(f"metric must be the name of a reported metric, e.g. 'loss', "
                        f"got {metric!r}")
    words = {w for w in re.split(r"[^a-z0-9]+", metric.lower()) if w}
    wanted = ("max" if words & _MAXIMISED and not words & _MINIMISED
              else "min" if words & _MINIMISED and not words & _MAXIMISED else None)
    if wanted is None or wanted == mode or mode not in ("min", "max"):  # a bad mode: its own error
        return None
    msg = (f"metric {metric!r} is usually {wanted}imised but mode={mode!r}: the best trial "
           f"will be the one with the {'lowest' if mode == 'min' else 'highest'} {metric}; "
           f"pass mode={wanted!r} (%%tune: --mode {wanted}) if that is not what you want")
    warnings.warn(msg, UserWarning, stacklevel=stacklevel)
    return msg


def fusion_width(fusion: bool | int) -> int:
    """F, the most members a fused unit has (0: fusion off); ``True`` is :data:`MAX_FUSION`."""
    if fusion is False or fusion is None:
        return 0
    return MAX_FUSION if fusion is True else int(fusion)


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
