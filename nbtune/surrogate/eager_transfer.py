"""Hydro's eager transfer (§4.3): train the full model with the best configuration early.

:class:`EagerTransfer` wraps any algorithm of the spine. The wrapped algorithm
tunes surrogates: every spec it emits gets ``config["scaling"] = S`` (the
training function builds ``shrink(model, S)``, see :func:`build`). Once a
fraction (default 50 %) of the surrogate trials has ended and the engine has
room (it asks with ``max_trials > 0`` only when a worker is idle), a
**TargetTrial** starts: the best surrogate configuration so far, with
``scaling = 1``, trained for the full budget. When the surrogates later find a
better configuration, a new TargetTrial starts and the old one is stopped at
its next report (when no worker is idle the stop frees one for the new trial:
Hydro's "terminate or start another depending on utilisation"). The
experiment finishes only when the final best configuration has been trained
on the target, so that is always done. Target trials have ids from
``TARGET_ID_BASE`` up and ``config["nbtune_target"] = True``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from nbtune.algorithms.algorithm_protocol import AlgorithmError, BaseAlgorithm
from nbtune.core.group import TrialGroup
from nbtune.core.roles import SCALING_KEY, TARGET_KEY  # in core: allocators, results read them
from nbtune.core.trial import Decision, TrialSpec, TrialState

__all__ = ["SCALING_KEY", "TARGET_ID_BASE", "TARGET_KEY", "EagerTransfer", "build",
           "surrogate_tuning"]

#: trial and group ids of TargetTrials start here (the wrapped algorithm owns the ones below)
TARGET_ID_BASE = 1_000_000


def build(make_model: Callable[[], Any], config: Mapping[str, Any],
          example_input: Any = None) -> Any:
    """The model a trial trains: ``shrink(make_model(), config["scaling"])`` (S = 1 without it).

    The one line a training function changes to take part in surrogate tuning::

        sur = build(make_model, config)   # was: model = make_model()  (from nbtune.surrogate)
        opt = sur.optimizer(torch.optim.SGD, lr=config["lr"], momentum=config["momentum"])
    """
    from nbtune.surrogate.shrinker import shrink

    return shrink(make_model(), float(config.get(SCALING_KEY, 1)), example_input)


class EagerTransfer(BaseAlgorithm):
    """Wrap ``inner`` so it tunes surrogates at scale ``scaling`` and hands its best to the target."""

    name = "eager_transfer"

    def __init__(self, inner: BaseAlgorithm, *, scaling: float, fraction: float = 0.5,
                 target_budget: float | None = None) -> None:
        if not isinstance(inner, BaseAlgorithm):
            raise AlgorithmError(f"EagerTransfer wraps an nbtune algorithm, got {inner!r}")
        if not (isinstance(scaling, int | float) and scaling >= 1):
            raise AlgorithmError(f"scaling must be a number >= 1 (Hydro's S), got {scaling!r}")
        if not 0 <= fraction <= 1:
            raise AlgorithmError(f"fraction must be in [0, 1], got {fraction!r}")
        super().__init__(inner.space, metric=inner.metric, mode=inner.mode,
                         max_budget=inner.max_budget, min_budget=inner.min_budget,
                         seed=inner.seed)
        self.inner = inner
        self.synchronous = inner.synchronous
        self.scaling = float(scaling)
        self.fraction = float(fraction)
        self.target_budget = float(target_budget or inner.max_budget)
        #: TargetTrial id -> the configuration it trains (without the marker keys)
        self.targets: dict[int, dict[str, Any]] = {}
        self._next_target = TARGET_ID_BASE
        self._paused: set[int] = set()
        self._issued: set[int] = set()  # surrogate trials handed to the engine

    # -------------------------------------------------------------- the best so far
    def best_config(self) -> dict[str, Any] | None:
        """The surrogates' best configuration at the highest budget any of them reached."""
        hist = {t: h for t, h in self.inner.history.items() if h}
        if not hist:
            return None
        top = max(max(h) for h in hist.values())
        at_top = {t: h[top] for t, h in hist.items() if top in h and math.isfinite(h[top])}
        if not at_top:
            return None
        best = min(at_top, key=lambda t: (at_top[t], t))
        return dict(self.inner.configs[best])

    def _surrogates_done(self) -> int:
        """Surrogate trials ended or paused at their budget (an ASHA rung counts as done)."""
        return len(self._paused) + sum(1 for t in self.inner.ended if t not in self._paused)

    def _current(self) -> int | None:
        """The newest TargetTrial still alive."""
        live = [t for t in self.targets if t not in self.ended]
        return max(live) if live else None

    def _target_done(self, config: Mapping[str, Any]) -> bool:
        return any(self.ended.get(t) is TrialState.COMPLETED and c == config
                   for t, c in self.targets.items())

    def _want_target(self) -> dict[str, Any] | None:
        total = self.inner.num_trials or self.inner.trials_created
        if total == 0 or self._surrogates_done() < self.fraction * total:
            return None
        best = self.best_config()
        if best is None or self._target_done(best):
            return None
        cur = self._current()
        if cur is not None and self.targets[cur] == best:
            return None
        return best

    # ----------------------------------------------------------------- the protocol
    def ask(self, max_trials: int) -> list[TrialGroup]:
        groups: list[TrialGroup] = []
        if not self.inner.finished:
            for g in self.inner.ask(max_trials):
                specs = [replace(s, config={**s.config, SCALING_KEY: self.scaling})
                         for s in g.specs]
                self._paused.difference_update(s.trial_id for s in specs)  # resumed
                self._issued.update(s.trial_id for s in specs)
                groups.append(TrialGroup(g.group_id, specs))
                max_trials -= len(specs)
        best = self._want_target()
        if best is not None and max_trials > 0:
            tid = self._next_target
            self._next_target += 1
            self.targets[tid] = best
            cfg = {**best, SCALING_KEY: 1, TARGET_KEY: True}
            groups.append(TrialGroup(tid, [TrialSpec(tid, cfg, self.target_budget, None, tid)]))
        return groups

    def on_report(self, trial_id: int, budget: float, metrics: Mapping[str, Any]) -> Decision:
        if trial_id not in self.targets:
            return self.inner.on_report(trial_id, budget, metrics)
        self.record(trial_id, budget, metrics)
        cur = self._current()
        if trial_id != cur or self._want_target() is not None:
            return Decision.STOP  # replaced (or about to be): free its worker for the new one
        return Decision.CONTINUE

    def on_segment_end(self, trial_id: int, budget: float) -> None:
        if trial_id not in self.targets:
            self._paused.add(trial_id)
            self.inner.on_segment_end(trial_id, budget)

    def on_trial_end(self, trial_id: int, state: TrialState) -> None:
        if trial_id in self.targets:
            self.ended[trial_id] = state
        else:
            self._paused.discard(trial_id)
            self.inner.on_trial_end(trial_id, state)

    def pop_retired(self) -> list[int]:
        return self.inner.pop_retired() + super().pop_retired()

    @property
    def trials_created(self) -> int:
        return self.inner.trials_created + len(self.targets)

    @property
    def finished(self) -> bool:
        if not self.inner.finished:
            return False
        if any(t not in self._paused and t not in self.inner.ended for t in self._issued):
            return False  # a surrogate still runs: it may yet be the best (random search is
            # "finished" once it has issued its last trial)
        best = self.best_config()
        if best is None:
            return True  # every surrogate failed: nothing to transfer
        if self._target_done(best):
            return True
        # the final best's TargetTrial failed for good: do not loop on it
        return any(c == best and s is TrialState.ERROR for t, c in self.targets.items()
                   for s in [self.ended.get(t)])

    def target_results(self) -> dict[int, dict[str, Any]]:
        """TargetTrial id -> {config, state, best metric} for reports and tests."""
        return {t: {"config": c, "state": self.ended.get(t),
                    "loss": min(self.history.get(t, {}).values(), default=None)}
                for t, c in self.targets.items()}


def surrogate_tuning(algorithm: BaseAlgorithm, allocator: Any, scaling: float,
                     fraction: float = 0.5) -> tuple[EagerTransfer, Any]:
    """What ``tune(scaling=S)`` runs, and ``resume`` of such a run rebuilds: the algorithm
    wrapped in :class:`EagerTransfer`, and the allocator (None: a plan brings its own) in
    :class:`~nbtune.allocators.hetero.HeterogeneityAware` (§5.2: a target that cannot fill
    a fast GPU gets an older one)."""
    from nbtune.allocators.hetero import HeterogeneityAware

    algo = EagerTransfer(algorithm, scaling=scaling, fraction=fraction)
    if allocator is not None and not isinstance(allocator, HeterogeneityAware):
        allocator = HeterogeneityAware(allocator)
    return algo, allocator
