"""What a run's processes are launched with: the experiment's launch settings, one job per rank.

The :class:`~nbtune.runtimes.dask.driver_side.driver.RunDriver` decides *when* a run
starts and ends; this module says *what* each rank's trial process is told
(the pickled training function, its config and share, the checkpoint to
resume from, its environment). :class:`RunSettings` is fixed when an
experiment starts, so the driver is built with it rather than reading the
runtime's attributes. The training function itself is checked (:func:`check_signature`)
and pickled once (:func:`pickled`) when the experiment starts.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbtune.runtimes.dask import checkpoints as ck
from nbtune.runtimes.dask.driver_side.execution_mode import ExecutionChoice
from nbtune.runtimes.dask.driver_side.runs import EPS, Run, job_hints, rank_env

if TYPE_CHECKING:
    from nbtune.core.resources import Placement
    from nbtune.engine.engine import Engine
    from nbtune.runtimes.dask.driver_side.cluster import Slot

__all__ = ["RunSettings", "rank_jobs", "resize_restarts", "resizes_in_place", "restore_point",
           "check_signature", "pickled"]


@dataclass(frozen=True)
class RunSettings:
    """What every launch of one experiment shares (taken from the runtime when it starts)."""

    topic: str  # the experiment's topic: run keys and messages carry it
    fn: bytes  # the pickled training function
    checkpoint_dir: Path
    checkpointing: bool  # the function calls trial.checkpoint (trial_api.uses_checkpoints)
    gpus: bool
    mps: bool
    reuse: bool  # a process that ended a trial cleanly may run the next one
    memory_limit: int | None  # trial_memory_limit, bytes
    trial_timeout: float | None
    shutdown_grace: float  # seconds the runs get to leave after Finish
    #: process or thread, per launch (.execution; its measurements change as trials report)
    execution: ExecutionChoice = field(default_factory=ExecutionChoice)


def restore_point(checkpoint_dir: Path, tid: int, start: float,
                  restore_from: int | None) -> tuple[float, Path] | None:
    """The checkpoint a launch at ``start`` resumes from, or None for a fresh start.

    A trial cloned from another (PBT's exploit, ``restore_from``) gets a
    copy of the donor's checkpoint filed as its own, and its own newer
    files are dropped: every later relaunch (resize, lost worker, resume)
    then finds the cloned lineage, never the state it had before.
    """
    if restore_from is not None and restore_from != tid:
        donor = ck.latest_checkpoint(checkpoint_dir, restore_from, start)
        if donor is None:
            return None
        return donor[0], ck.adopt_checkpoint(donor[1], checkpoint_dir, tid, donor[0])
    if start <= EPS:
        return None
    return ck.latest_checkpoint(checkpoint_dir, tid, start)


def resizes_in_place(run: Run, placement: Placement, slots: Mapping[int, Slot],
                     s: RunSettings) -> bool:
    """A Resize that keeps every rank on its GPU needs no relaunch where the share is only
    the books' figure: on CPU workers, or GPUs without MPS, and with the thread count a
    relaunch would set unchanged (or a loop without checkpoints, which a relaunch would
    send back to step 1: a packing probe then cost it all its epochs)."""
    if [g for g, _ in placement] != [g for g, _ in run.placement] or (s.gpus and s.mps):
        return False
    if not s.checkpointing:
        return True
    for (g, old), (_, new) in zip(run.placement, placement, strict=True):
        slot = slots.get(g)
        if slot is None or (rank_env(run.trial_id, slot, old, gpus=s.gpus, mps=s.mps)[0]
                            != rank_env(run.trial_id, slot, new, gpus=s.gpus, mps=s.mps)[0]):
            return False
    return True


def resize_restarts(s: RunSettings) -> str | None:
    """The engine hint ``"resize_restarts"``: which resizes send a trial back to step 1.

    None when the loop checkpoints (a relaunch resumes where it was). Else ``"any"`` on MPS
    GPUs (every resize relaunches) or ``"moves"`` (only a placement on other GPUs
    relaunches: :func:`resizes_in_place`). Fluid counts the steps trained again as part of
    what such a resize costs (:meth:`~nbtune.allocators.fluid_estimator.FluidEstimator.redo`).
    """
    if s.checkpointing:
        return None
    return "any" if s.gpus and s.mps else "moves"


def rank_jobs(run: Run, slots: list[Slot], s: RunSettings, engine: Engine,
              found: tuple[float, Path] | None, **extra: Any) -> list[tuple[str, dict[str, Any]]]:
    """``(worker, job)`` for each rank of ``run``, in rank order; ``extra``: a fused unit's."""
    jobs: list[tuple[str, dict[str, Any]]] = []
    world = len(run.placement)
    execution = s.execution.mode(world, fused=bool(extra.get("members")))
    for rank, ((_g, share), slot) in enumerate(zip(run.placement, slots, strict=True)):
        threads, env = rank_env(run.trial_id, slot, share, gpus=s.gpus, mps=s.mps)
        job = {
            "topic": s.topic, "run_key": run.run_key, "run_id": run.run_id,
            "trial_id": run.trial_id, "rank": rank, "world_size": world, "slot": slot.index,
            "config": dict(run.config), "start_step": run.start_step, "budget": run.budget,
            "fn": s.fn, "checkpoint_dir": str(s.checkpoint_dir), "env": env, "threads": threads,
            "restore_path": None if found is None else str(found[1]),
            "restore_step": None if found is None else found[0],
            "device": "cuda" if s.gpus else "cpu", "sys_path": list(sys.path),
            "memory_limit": s.memory_limit, "max_budget": engine.max_budget,
            "metric": engine.metric, "checkpoints": s.checkpointing,
            **job_hints(engine),  # "hold", "verdicts"
            "reuse": s.reuse, "execution": execution,
            **extra,  # a fused unit's members (.fused_job)
        }
        jobs.append((slot.worker, job))
    return jobs


# ------------------------------------------------ the training function, checked and pickled once


def check_signature(fn: Any) -> None:
    """Raise TypeError unless ``fn`` can be called as ``train(config, trial)`` or ``train(config)``."""
    if not callable(fn):
        raise TypeError(f"the trainable must be a function train(config, trial), got {fn!r}")
    try:
        sig = inspect.signature(fn)
    except ValueError:  # builtins without a signature: let them try
        return
    for args in ((None, None), (None,)):  # train(config, trial), or Ray's train(config)
        try:
            sig.bind(*args)
            return
        except TypeError:
            continue
    raise TypeError(
        f"{getattr(fn, '__name__', fn)!r} must accept train(config, trial) or, reporting "
        "with nbtune.report(...), train(config)"
    )


def pickled(fn: Any) -> bytes:
    """``fn`` as the bytes sent to every trial process, or a TypeError saying what to change.

    A function that captures a lock, an open file, a socket or a database
    connection cannot cross processes; raised here, before any trial runs,
    instead of as a serialization trace from the first launch.
    """
    import cloudpickle

    try:
        return cloudpickle.dumps(fn)
    except Exception as exc:
        raise TypeError(
            f"the training function {getattr(fn, '__name__', fn)!r} cannot be pickled to send "
            f"to the trial processes ({type(exc).__name__}: {exc}): it refers to an object "
            "that cannot cross processes (a lock, an open file, a connection, a generator). "
            "Create that object inside the function, or pass its settings in the config"
        ) from exc
