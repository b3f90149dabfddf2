"""The algorithm protocol: pure objects that produce TrialGroups and judge results.

An algorithm never sees a runtime, a clock or a GPU. The engine asks it for
work (:meth:`BaseAlgorithm.ask`), tells it every result
(:meth:`BaseAlgorithm.on_report`) and when a trial's segment or life ends.
Algorithms own trial ids: a spec that reuses an id resumes that trial from its
checkpoint (a promotion), so the same object can drive the simulator, the Dask
runtime, or a contract test with no runtime at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nbtune.core.group import TrialGroup
from nbtune.core.space import Domain, sample_config, validate_space
from nbtune.core.tolerance import EPS
from nbtune.core.trial import Decision, TrialSpec, TrialState

__all__ = ["BaseAlgorithm", "AlgorithmError"]

_CONTINUE = Decision.CONTINUE  # returned on every report: a module name is found faster


class AlgorithmError(ValueError):
    """Bad options for an algorithm: says which option and what would be valid."""


class BaseAlgorithm:
    """Common state and helpers; subclasses implement :meth:`ask` and usually :meth:`on_report`.

    ``mode="min"`` means lower metric values are better. Internally every
    algorithm ranks by :meth:`loss` (lower is better) so both modes share code.

    ``points_to_evaluate`` (Ray Tune's name; Optuna's ``enqueue_trial``): configurations to
    try first, in order, before anything is sampled. A point may leave hyperparameters out;
    those are sampled. Every algorithm that samples configurations draws them through
    :meth:`draw_config`.
    """

    #: registry name, e.g. ``"asha"``
    name: str = "base"
    #: True when the algorithm submits whole rungs and waits at stage barriers
    synchronous: bool = False
    #: True when a paused trial waits for a rung verdict with an unchanged config, so a
    #: runtime may keep its process waiting in place instead of needing a checkpoint
    waits_at_rungs: bool = False

    def __init__(
        self,
        space: Mapping[str, Any],
        *,
        metric: str,
        mode: str = "min",
        max_budget: float,
        num_trials: int | None = None,
        min_budget: float = 1.0,
        seed: int | None = None,
        points_to_evaluate: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self.space = validate_space(space)
        if mode not in ("min", "max"):
            raise AlgorithmError(f"mode must be 'min' or 'max', got {mode!r}")
        if not isinstance(metric, str) or not metric:
            raise AlgorithmError("metric must be the name of a reported metric, e.g. 'loss'")
        if not (isinstance(max_budget, int | float) and max_budget > 0):
            raise AlgorithmError(f"max_budget must be a number > 0, got {max_budget!r}")
        if not (0 < min_budget <= max_budget):
            raise AlgorithmError(
                f"min_budget must be in (0, max_budget={max_budget}], got {min_budget!r}"
            )
        if num_trials is not None and (int(num_trials) != num_trials or num_trials < 1):
            raise AlgorithmError(f"num_trials must be a positive integer, got {num_trials!r}")
        self.metric = metric
        self.mode = mode
        self.max_budget = float(max_budget)
        self.min_budget = float(min_budget)
        self.num_trials = None if num_trials is None else int(num_trials)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._next_trial_id = 0
        self._next_group_id = 0
        self._retired: list[int] = []
        #: trial_id -> {budget: loss}
        self.history: dict[int, dict[float, float]] = {}
        self.configs: dict[int, dict[str, Any]] = {}
        self.ended: dict[int, TrialState] = {}
        #: configurations still to try before sampling (see the class docstring)
        self.points_to_evaluate = _check_points(self.space, points_to_evaluate)

    # ----------------------------------------------------------------- helpers
    def loss(self, value: float) -> float:
        """Map a metric value to 'lower is better'."""
        v = float(value)
        return v if self.mode == "min" else -v

    def new_trial_id(self) -> int:
        tid = self._next_trial_id
        self._next_trial_id += 1
        return tid

    def new_group_id(self) -> int:
        gid = self._next_group_id
        self._next_group_id += 1
        return gid

    def new_group(self, specs: list[TrialSpec]) -> TrialGroup:
        gid = self.new_group_id()
        specs = [
            TrialSpec(s.trial_id, s.config, s.budget, s.restore_from, gid) for s in specs
        ]
        return TrialGroup(gid, specs)

    def draw_config(self) -> dict[str, Any]:
        """The next configuration to try: the next of ``points_to_evaluate`` (what it leaves
        out sampled), else one sampled from the space."""
        if not self.points_to_evaluate:
            return sample_config(self.space, self.rng)
        point = self.points_to_evaluate.pop(0)
        rest = {k: v for k, v in self.space.items() if k not in point}
        drawn = sample_config(rest, self.rng) if rest else {}
        return {k: point[k] if k in point else drawn[k] for k in self.space}

    def new_trial(self, config: dict[str, Any]) -> int:
        """A new trial of ``config`` (a copy kept in ``configs``); its id."""
        tid = self.new_trial_id()
        self.configs[tid] = dict(config)
        return tid

    def new_spec(self, config: dict[str, Any], budget: float) -> TrialSpec:
        return TrialSpec(self.new_trial(config), dict(config), float(budget))

    def retire(self, trial_id: int) -> None:
        """Mark a paused trial as never to resume (e.g. it lost its rung)."""
        self._retired.append(trial_id)

    def pop_retired(self) -> list[int]:
        """Trials this algorithm has given up on since the last call (the engine stops them)."""
        out, self._retired = self._retired, []
        return out

    @property
    def trials_created(self) -> int:
        return self._next_trial_id

    def budget_ok(self) -> bool:
        return self.num_trials is None or self._next_trial_id < self.num_trials

    @staticmethod
    def log_eta(x: float, eta: float) -> int:
        """floor(log_eta(x)) robust to floating error (log_3(27) must be 3, not 2.9999)."""
        k = int(math.floor(math.log(x) / math.log(eta) + EPS))
        return max(k, 0)

    # ------------------------------------------------------------ the protocol
    def ask(self, max_trials: int) -> list[TrialGroup]:
        """Return new work. ``max_trials`` is how many trials could start now.

        Synchronous algorithms may return a whole rung regardless; returning
        ``[]`` means "nothing right now" (e.g. waiting at a stage barrier).
        """
        raise NotImplementedError

    def on_report(self, trial_id: int, budget: float, metrics: Mapping[str, Any]) -> Decision:
        """Record a result; say whether the trial should go on, pause or stop."""
        self.record(trial_id, budget, metrics)
        return _CONTINUE

    def record(self, trial_id: int, budget: float, metrics: Mapping[str, Any]) -> float | None:
        """Keep the result as a loss (lower is better); called once per report, so kept lean."""
        value = metrics.get(self.metric)
        if value is None:
            return None
        if type(value) is not float:  # a float already (most often): no call
            value = float(value)
        loss = value if self.mode == "min" else -value
        h = self.history.get(trial_id)
        if h is None:
            h = self.history[trial_id] = {}
        h[budget if type(budget) is float else float(budget)] = loss
        return loss

    def speculate(self) -> list[TrialSpec]:
        """Continuations worth running on workers that would idle at a barrier, best first.

        Each spec names a *paused* trial and the budget its next promotion would
        ask for. The engine may run them before the verdict (barrier filling) but
        shows the algorithm nothing until the promotion really comes (then it
        replays the reports) or the trial is retired (then they are dropped), so
        the algorithm's decisions never depend on it. Default: none.
        """
        return []

    @property
    def stop_budgets(self) -> tuple[float, ...]:
        """The budgets at whose report :meth:`on_report` may stop a trial, if only those.

        A runtime whose trials report asynchronously lets a trial wait for the
        verdict after reporting one of these, so a trial that is stopped trains
        no unit past it (Ray's function trainables block in ``report`` alike);
        anywhere else it trains on at once. Default: none named (no waiting).
        """
        return ()

    def on_segment_end(self, trial_id: int, budget: float) -> None:
        """The trial reached the budget its spec asked for and is paused (not terminal)."""

    def on_trial_end(self, trial_id: int, state: TrialState) -> None:
        """The trial completed, was stopped or failed for good."""
        self.ended[trial_id] = state

    @property
    def finished(self) -> bool:
        """True once the algorithm will never return more work."""
        raise NotImplementedError


def _check_points(space: Mapping[str, Any],
                  points: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """``points_to_evaluate`` as a list of dicts, each value inside its hyperparameter's domain."""
    if points is None:
        return []
    if isinstance(points, Mapping) or not isinstance(points, Sequence):
        raise AlgorithmError("points_to_evaluate must be a list of configurations "
                             "(dicts of hyperparameter values)")
    out = []
    for i, point in enumerate(points):
        if not isinstance(point, Mapping):
            raise AlgorithmError(f"points_to_evaluate[{i}] must be a dict of hyperparameter "
                                 f"values, got {type(point).__name__}")
        unknown = sorted(set(point) - set(space))
        if unknown:
            raise AlgorithmError(f"points_to_evaluate[{i}] names {unknown}, which the search "
                                 f"space does not have (it has {sorted(space)})")
        for k, v in point.items():
            dom = space[k]
            ok = dom.contains(v) if isinstance(dom, Domain) else v == dom
            if not ok:
                raise AlgorithmError(f"points_to_evaluate[{i}][{k!r}] = {v!r} is outside the "
                                     f"search space ({dom!r})")
        out.append(dict(point))
    return out
