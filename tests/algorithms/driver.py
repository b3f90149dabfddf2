"""A runtime-free engine stand-in that drives an algorithm and checks its contract.

The driver plays the engine: it asks for work with the number of free slots,
queues the specs of every returned TrialGroup, runs up to ``slots`` trials at
once (trial ``t`` advances one budget unit every ``1 + t % speeds`` ticks, so
trials finish out of order), reports a deterministic synthetic metric after
every unit, honours decisions, ends segments, stops retired trials and
optionally makes some trials fail. Any breach of the contract raises
:class:`ContractViolation`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nbtune.algorithms.algorithm_protocol import BaseAlgorithm
from nbtune.core.space import (
    Domain,
    choice,
    grid,
    loguniform,
    numeric_domains,
    quniform,
    randint,
    uniform,
)
from nbtune.core.trial import Decision, TrialSpec, TrialState

EPS = 1e-9


class ContractViolation(AssertionError):
    """The algorithm broke the engine contract (stall, bad promotion, budget overrun ...)."""


#: every kind of domain plus a constant: what the contract tests run every algorithm on
MIXED_SPACE: dict[str, Any] = {
    "lr": loguniform(1e-4, 1e-1),
    "batch_size": choice([16, 32, 64]),
    "depth": randint(1, 6),
    "momentum": grid([0.8, 0.9, 0.99]),
    "dropout": quniform(0.0, 0.5, 0.05),
    "width": uniform(0.5, 2.0),
    "epochs_const": 7,
}


def quadratic_metric(space: Mapping[str, Any], config: Mapping[str, Any], budget: float) -> float:
    """Loss falling with budget, best near 0.3 of every unit-encoded dimension."""
    base = sum((d.to_unit(config[k]) - 0.3) ** 2 for k, d in numeric_domains(space).items())
    return base + 1.0 / budget


@dataclass
class SimTrial:
    trial_id: int
    config: dict[str, Any]
    state: TrialState = TrialState.PENDING
    used: float = 0.0
    target: float = 0.0
    restore_from: int | None = None
    segments: list[tuple[float, float]] = field(default_factory=list)
    progress: int = 0  # ticks into the current unit


@dataclass
class DriverResult:
    trials: dict[int, SimTrial]
    specs: list[tuple[int, tuple[tuple[str, Any], ...], float, int | None]]
    ticks: int
    asks: int
    retired: list[int]
    groups: list[list[TrialSpec]]

    @property
    def states(self) -> dict[int, TrialState]:
        return {t: s.state for t, s in self.trials.items()}


class Driver:
    def __init__(
        self,
        algo: BaseAlgorithm,
        *,
        slots: int = 4,
        metric_fn: Callable[[Mapping[str, Any], Mapping[str, Any], float], float] | None = None,
        fail: Callable[[int, float], bool] | None = None,
        speeds: int = 3,
        max_ticks: int = 200_000,
        report_as: str | None = None,
    ) -> None:
        self.algo = algo
        self.slots = slots
        self.metric_fn = metric_fn or quadratic_metric
        self.fail = fail
        self.speeds = max(1, speeds)
        self.max_ticks = max_ticks
        self.report_as = report_as or algo.metric
        self.trials: dict[int, SimTrial] = {}
        self.pending: deque[int] = deque()
        self.running: list[int] = []
        self.spec_log: list[tuple[int, tuple[tuple[str, Any], ...], float, int | None]] = []
        self.retired: list[int] = []
        self.groups: list[list[TrialSpec]] = []
        self.asks = 0

    # ----------------------------------------------------------------- checks
    def _violation(self, msg: str) -> None:
        raise ContractViolation(f"{self.algo.name}: {msg}")

    def _check_spec(self, spec: TrialSpec, group_id: int) -> None:
        algo = self.algo
        if spec.group_id != group_id:
            self._violation(f"spec of trial {spec.trial_id} has group {spec.group_id} != {group_id}")
        if spec.budget > algo.max_budget + EPS:
            self._violation(f"trial {spec.trial_id} asked for {spec.budget} > max_budget")
        for k, dom in algo.space.items():
            if k not in spec.config:
                self._violation(f"trial {spec.trial_id} config lacks {k!r}")
            if isinstance(dom, Domain) and not dom.contains(spec.config[k]):
                self._violation(f"trial {spec.trial_id}: {k}={spec.config[k]!r} outside {dom}")
            if not isinstance(dom, Domain) and spec.config[k] != dom:
                self._violation(f"trial {spec.trial_id}: constant {k} changed")
        t = self.trials.get(spec.trial_id)
        if t is None:
            if algo.num_trials is not None and len(self.trials) >= algo.num_trials:
                self._violation(f"more than num_trials={algo.num_trials} trials created")
        else:
            if t.state != TrialState.PAUSED:
                self._violation(
                    f"spec for trial {t.trial_id} which is {t.state.value}, not paused"
                )
            if spec.budget <= t.used + EPS:
                self._violation(
                    f"trial {t.trial_id} budget not increasing: {spec.budget} after {t.used}"
                )
        if spec.restore_from is not None:
            # like the engine: the trial's budget becomes the donor's
            d = self.trials.get(spec.restore_from)
            if d is None or d.trial_id == spec.trial_id or not d.segments:
                self._violation(
                    f"trial {spec.trial_id} restores from {spec.restore_from} without a checkpoint"
                )
            assert d is not None
            if t is not None and d.used < t.used - EPS:
                self._violation(f"trial {t.trial_id} restored back from {t.used} to {d.used}")
            if spec.budget <= d.used + EPS:
                self._violation(
                    f"trial {spec.trial_id} asks for {spec.budget} <= donor's budget {d.used}"
                )

    # ------------------------------------------------------------------- loop
    def _ask(self) -> None:
        free = max(self.slots - len(self.running) - len(self.pending), 0)
        groups = self.algo.ask(free)
        self.asks += 1
        for g in groups:
            self.groups.append(list(g.specs))
            for spec in g.specs:
                self._check_spec(spec, g.group_id)
                t = self.trials.get(spec.trial_id)
                if t is None:
                    t = SimTrial(spec.trial_id, dict(spec.config))
                    self.trials[spec.trial_id] = t
                t.config = dict(spec.config)
                t.state = TrialState.PENDING
                t.target = spec.budget
                t.restore_from = spec.restore_from
                if spec.restore_from is not None:
                    t.used = self.trials[spec.restore_from].used
                self.pending.append(spec.trial_id)
                self.spec_log.append(
                    (spec.trial_id, tuple(sorted(spec.config.items())), spec.budget,
                     spec.restore_from)
                )
        for tid in self.algo.pop_retired():
            t = self.trials.get(tid)
            if t is None or t.state != TrialState.PAUSED:
                state = None if t is None else t.state.value
                self._violation(f"retired trial {tid} is {state}, not paused")
            assert t is not None
            t.state = TrialState.STOPPED
            self.retired.append(tid)
            self.algo.on_trial_end(tid, TrialState.STOPPED)

    def _end(self, t: SimTrial, state: TrialState) -> None:
        t.state = state
        self.running.remove(t.trial_id)
        self.algo.on_trial_end(t.trial_id, state)

    def _step(self, t: SimTrial) -> None:
        t.progress += 1
        if t.progress < 1 + t.trial_id % self.speeds:
            return
        t.progress = 0
        nxt = min(t.used + 1.0, t.target)
        if self.fail is not None and self.fail(t.trial_id, nxt):
            self._end(t, TrialState.ERROR)
            return
        t.used = nxt
        value = self.metric_fn(self.algo.space, t.config, nxt)
        decision = self.algo.on_report(t.trial_id, nxt, {self.report_as: value})
        if not isinstance(decision, Decision):
            self._violation(f"on_report returned {decision!r}, not a Decision")
        if decision == Decision.STOP:
            self._end(t, TrialState.STOPPED)
        elif nxt >= self.algo.max_budget - EPS:
            t.segments.append((t.target, nxt))  # the final checkpoint
            self._end(t, TrialState.COMPLETED)
        elif nxt >= t.target - EPS or decision == Decision.PAUSE:
            t.state = TrialState.PAUSED
            self.running.remove(t.trial_id)
            t.segments.append((t.target, nxt))
            self.algo.on_segment_end(t.trial_id, nxt)

    def run(self) -> DriverResult:
        ticks = 0
        while True:
            self._ask()
            while self.pending and len(self.running) < self.slots:
                tid = self.pending.popleft()
                self.trials[tid].state = TrialState.RUNNING
                self.running.append(tid)
            if not self.running:
                if self.algo.finished:
                    break
                self._violation(
                    f"stall: nothing running or pending, not finished, ask({self.slots}) gave []"
                )
            for tid in sorted(self.running):
                self._step(self.trials[tid])
            ticks += 1
            if ticks > self.max_ticks:
                self._violation(f"no end after {self.max_ticks} ticks")
        # once finished: no more work, nothing left paused
        if self.algo.ask(self.slots):
            self._violation("ask returned work after finished")
        if self.algo.pop_retired():
            self._violation("retired trials after finished")
        left = [t for t, s in self.trials.items() if s.state == TrialState.PAUSED]
        if left:
            self._violation(f"finished with paused trials never retired: {left}")
        if not self.trials:
            self._violation("finished without creating a single trial")
        return DriverResult(
            self.trials, self.spec_log, ticks, self.asks, self.retired, self.groups
        )


def fail_every(k: int) -> Callable[[int, float], bool]:
    """Failure injector: every ``k``-th trial errors on reaching budget 1, 2 or 4 (by id)."""

    def fail(trial_id: int, budget: float) -> bool:
        at = (1.0, 2.0, 4.0)[(trial_id // k) % 3]
        return trial_id % k == k - 1 and math.isclose(budget, at)

    return fail
