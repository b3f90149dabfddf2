"""Experiment specification (RubberBand Fig. 6): stages of (trials, iterations per trial).

Early-stopping algorithms such as successive halving fix their structure before
they run: how many trials each rung holds and how far each trains. The planner
needs exactly that, so :func:`spec_from` reads it off the *same algorithm
object* the engine runs (the brackets it opens), instead of re-deriving the
rung arithmetic here and drifting from it.

A trial paused at a rung resumes from where it stopped, so a stage's work per
trial is the *increment* ``budgets[i] - budgets[i-1]``. Hyperband is a set of
SHA jobs (one per bracket); the spec lists their stages one job after another,
which is how the planner's plans execute them (one bracket at a time, as
``Hyperband(pipeline_brackets=False)`` runs).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

__all__ = ["ExperimentSpec", "SpecError", "Stage", "spec_from"]

#: a guard against an algorithm whose brackets never stop opening
_MAX_BRACKETS = 10_000


class SpecError(ValueError):
    """The algorithm or the hand-written stages cannot be planned."""


@dataclass(frozen=True)
class Stage:
    """One synchronous stage: ``trials`` trials each train ``iterations`` more units."""

    trials: int
    iterations: float
    #: budget reached before the stage (its trials resume from there)
    start: float = 0.0
    #: which SHA job (Hyperband bracket) the stage belongs to
    job: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.trials, bool) or int(self.trials) != self.trials or self.trials < 1:
            raise SpecError(f"a stage needs a positive whole number of trials, got {self.trials!r}")
        if not self.iterations > 0:
            raise SpecError(f"a stage needs iterations > 0, got {self.iterations!r}")

    @property
    def end(self) -> float:
        return self.start + self.iterations


@dataclass(frozen=True)
class ExperimentSpec:
    """The stages of a tuning job, in execution order (the paper's ``ExperimentSpec``)."""

    stages: tuple[Stage, ...]
    name: str = "spec"

    def __post_init__(self) -> None:
        if not self.stages:
            raise SpecError("a spec needs at least one stage")

    def get_stage(self, stage_index: int) -> tuple[int, float]:
        """Number of trials and iterations per trial of a stage (paper API)."""
        s = self.stages[stage_index]
        return s.trials, s.iterations

    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def total_iterations(self) -> float:
        """Trial-iterations of work in the whole job (independent of any allocation)."""
        return sum(s.trials * s.iterations for s in self.stages)

    @classmethod
    def from_rungs(
        cls, rungs: list[tuple[int, float]], *, job: int = 0, name: str = "spec"
    ) -> ExperimentSpec:
        """Stages from ``(trials, cumulative budget)`` rungs of one SHA job."""
        return cls(tuple(_stages_of(rungs, job)), name)


def _stages_of(rungs: list[tuple[int, float]], job: int) -> list[Stage]:
    out: list[Stage] = []
    prev = 0.0
    for n, budget in rungs:
        if budget <= prev:
            raise SpecError(f"rung budgets must increase, got {budget} after {prev}")
        out.append(Stage(int(n), float(budget) - prev, prev, job))
        prev = float(budget)
    return out


def _brackets_of(algorithm: Any) -> list[tuple[list[int], list[float]]]:
    """Open every bracket the algorithm would open, on a copy, and read their rungs.

    Marking each opened bracket done makes the copy open the next one the way
    it does at run time (Hyperband's cap and truncation included), without
    results; the copy is thrown away.
    """
    algo = copy.deepcopy(algorithm)
    seen = 0
    out: list[tuple[list[int], list[float]]] = []
    while len(algo.brackets) < _MAX_BRACKETS:
        algo.ask(1 << 30)
        new = algo.brackets[seen:]
        if not new:
            break
        for b in new:
            out.append((list(b.sizes), list(b.budgets)))
            b.done = True
            b.ready = []
        seen = len(algo.brackets)
    return out


def spec_from(algorithm: Any) -> ExperimentSpec:
    """The stages of a synchronous rung algorithm (SHA, Hyperband, sync BOHB).

    Asynchronous or open-ended algorithms (ASHA, PBT, random search) have no
    structure known before running, so they are refused with a clear error.
    """
    from nbtune.algorithms.successive_halving import BracketAlgorithm

    if not isinstance(algorithm, BracketAlgorithm):
        raise SpecError(
            f"spec_from needs a synchronous rung algorithm (SuccessiveHalving, Hyperband, "
            f"SyncBOHB); {type(algorithm).__name__} has no stage structure known before it runs"
        )
    stages: list[Stage] = []
    for job, (sizes, budgets) in enumerate(_brackets_of(algorithm)):
        stages.extend(_stages_of(list(zip(sizes, budgets, strict=True)), job))
    if not stages:
        raise SpecError(f"{type(algorithm).__name__} opened no bracket")
    return ExperimentSpec(tuple(stages), getattr(algorithm, "name", "spec"))
