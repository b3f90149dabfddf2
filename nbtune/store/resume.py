"""Resume: continue a stored experiment after the kernel or the process died.

The design is event sourcing. The engine is a pure function of the events it
is fed (batch by batch) and of its algorithm and allocator, which are rebuilt
from their stored names, options and seed. So :func:`replay` feeds the stored
batches to a fresh engine and gets the very state the dead one had: the same
trials, results, TrialGroups, rungs, RNG draws and allocation log, with no
trial rerun. Every batch's commands were stored too, and replay checks it
gets the same ones back, so a rebuilt algorithm that drifted (another seed,
another option, another version) fails loudly instead of silently diverging.

Trials that were running when the process died are the only loose end: the
engine's own restart rule (:class:`nbtune.engine.restart.RestartableEngine`)
puts them back in the queue. Resuming itself (:func:`nbtune.resume`) sits
beside ``tune`` in :mod:`nbtune.resumption`; this module holds what needs
only the store: the replay and the rebuilt algorithm and allocator.
"""

from __future__ import annotations

from typing import Any

from nbtune.algorithms.algorithm_protocol import BaseAlgorithm
from nbtune.allocators.allocator_protocol import BaseAllocator
from nbtune.core import events as ev
from nbtune.engine.engine import Engine
from nbtune.engine.restart import RestartableEngine
from nbtune.store.schema import ExperimentRow
from nbtune.store.serialize import from_jsonable, import_ref, load_space
from nbtune.store.store import command_payload

__all__ = ["RestartableEngine", "replay", "rebuild_algorithm", "rebuild_allocator",
           "algorithm_options",
           "rebuild_trainable", "ResumeError", "ExperimentFinishedError"]


class ResumeError(RuntimeError):
    """The stored experiment cannot be rebuilt as it was; the message says what to pass."""


class ExperimentFinishedError(ValueError):
    """The experiment already finished: there is nothing to resume, only results to read."""


def replay(engine: Engine, log: list[tuple[list[ev.Event], list[tuple[str, Any]]]],
           *, check: bool = True) -> int:
    """Feed every stored batch to ``engine``; return how many. Pure: no runtime, no I/O.

    With ``check`` the commands the engine answers must equal the stored ones,
    batch for batch; otherwise :class:`ResumeError` says where they parted.
    """
    for i, (events, recorded) in enumerate(log):
        got = [command_payload(c) for c in engine.handle(*events)]
        if check and got != [(k, p) for k, p in recorded]:
            first = next((j for j, (a, b) in enumerate(zip(got, recorded, strict=False))
                          if a != tuple(b)), min(len(got), len(recorded)))
            want = recorded[first] if first < len(recorded) else "nothing"
            have = got[first] if first < len(got) else "nothing"
            raise ResumeError(
                f"replay diverged at batch {i} ({[type(e).__name__ for e in events]}): the "
                f"stored run answered {want}, the rebuilt one {have}. The algorithm or "
                "allocator is not the one that ran (other options, seed or code version)"
            )
    return len(log)


def rebuild_algorithm(row: ExperimentRow, given: Any = None) -> BaseAlgorithm:
    """The stored experiment's algorithm, fresh: from its registry name and options, or ``given``."""
    from nbtune.algorithms import make_algorithm

    space = load_space(row.space)
    base = {"metric": row.metric, "mode": row.mode, "max_budget": row.max_budget,
            "num_trials": row.num_trials, "seed": row.seed}
    if isinstance(given, BaseAlgorithm):
        if given.trials_created:
            raise ResumeError("pass a fresh algorithm to resume: this one already made trials")
        for key in ("metric", "mode", "max_budget"):
            if getattr(given, key) != base[key]:
                raise ResumeError(f"algorithm has {key}={getattr(given, key)!r}, the stored "
                                  f"experiment {row.name!r} has {base[key]!r}")
        return given
    if given is not None:
        raise TypeError(f"algorithm= takes a fresh BaseAlgorithm instance, got {given!r}")
    if row.algorithm_options is None:
        raise ResumeError(
            f"experiment {row.name!r} ran an algorithm instance ({row.algorithm}) whose options "
            "were not stored: pass algorithm= a fresh instance built the same way (same seed)"
        )
    spec: Any = import_ref(row.algorithm) if ":" in row.algorithm else row.algorithm
    return make_algorithm(spec, space, **base, min_budget=row.min_budget,
                          **algorithm_options(row))


#: the stop rule of an ASHA or BOHB row that stores none: such a run ran under Ray's rule
_RECORDED_WITHOUT_STOP_RULE = "ray"


def algorithm_options(row: ExperimentRow) -> dict[str, Any]:
    """The stored options that rebuild ``row``'s algorithm as it ran.

    Runs record ASHA's effective ``stop_rule``; an ASHA or BOHB row without one
    ran under ``"ray"`` and is rebuilt so, whatever the default is.
    """
    options = dict(from_jsonable(row.algorithm_options or {}))
    if row.algorithm in ("asha", "bohb") and "stop_rule" not in options:
        options["stop_rule"] = _RECORDED_WITHOUT_STOP_RULE
    return options


def rebuild_allocator(row: ExperimentRow, given: Any = None) -> BaseAllocator:
    from nbtune.allocators import make_allocator

    if isinstance(given, BaseAllocator):
        return given
    if given is not None:
        raise TypeError(f"allocator= takes a fresh allocator instance, got {given!r}")
    if row.allocator_options is None:
        raise ResumeError(
            f"experiment {row.name!r} ran an allocator instance ({row.allocator}): pass "
            "allocator= a fresh instance built the same way"
        )
    return make_allocator(row.allocator, **from_jsonable(row.allocator_options))


def rebuild_trainable(row: ExperimentRow, given: Any = None) -> Any:
    """The stored experiment's trainable: ``given``, or found again by its recorded name."""
    if given is not None:
        return given
    if row.trainable is None:
        raise ResumeError(
            f"experiment {row.name!r}: pass trainable= (the training function or workload "
            "model); only module-level functions are found again by name"
        )
    try:
        return import_ref(row.trainable)
    except (ImportError, AttributeError) as exc:
        raise ResumeError(f"cannot import the trainable {row.trainable!r} ({exc}); pass "
                          "trainable=") from None
