"""The one place an experiment is put together: runtime, engine, recorder, start.

``tune``, ``resume``, the ``%%tune`` magic, the CLI and the simulator replay
all come through here, so a rule about starting an experiment (the trainable
must fit the runtime, a virtual clock continues from the engine's time, a
run that never started leaves no record behind) is written once.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

from nbtune import kernels
from nbtune.engine.engine import Engine
from nbtune.experiment import Experiment, Recipe
from nbtune.runtimes.runtime_protocol import Runtime, check_trainable
from nbtune.runtimes.sim import SimRuntime

__all__ = ["build_experiment", "make_runtime", "runtime_class",
           "check_trainable", "check_mode"]

#: words in a metric's name that say which way is better (``val_accuracy``, ``train-loss``)
_MAXIMISED = {"accuracy", "acc", "auc", "roc", "f1", "precision", "recall", "reward", "return",
              "bleu", "rouge", "r2", "iou", "dice", "map", "top1", "top5", "ndcg"}
_MINIMISED = {"loss", "error", "err", "mse", "mae", "rmse", "nll", "perplexity", "ppl",
              "regret", "cost", "wer", "cer", "latency"}


def check_mode(metric: str, mode: str) -> str | None:
    """Warn when the metric's name says the other direction (``accuracy`` with ``mode='min'``).

    A silently minimised accuracy tunes towards the worst model and reports it
    as best; a warning, not an error, since names can mislead (``loss_reduction``).
    Returns the message given, or None.
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
    warnings.warn(msg, UserWarning, stacklevel=3)
    return msg


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
    store: Any = None,
    record: Callable[[Runtime], Any] | None = None,
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
