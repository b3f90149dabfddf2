"""Optuna samplers (TPE, CMA-ES, ...) driven through Optuna's ask-and-tell interface.

Each nbtune trial is one Optuna trial: :meth:`OptunaSearch.ask` calls
``study.ask`` with distributions built from nbtune's domains, and the trial's
final (or last reported) value is told when it ends. Trials train to
``max_budget``; with an Optuna ``pruner`` every report is also passed to
``trial.report`` and a prune becomes :attr:`~nbtune.core.trial.Decision.STOP`.

Optuna is imported lazily so ``import nbtune`` works without it
(``pip install nbtune[optuna]``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from nbtune.algorithms.algorithm_protocol import AlgorithmError, BaseAlgorithm
from nbtune.core.group import TrialGroup
from nbtune.core.space import (
    Choice,
    Domain,
    LogUniform,
    QLogUniform,
    QUniform,
    RandInt,
    Uniform,
)
from nbtune.core.tolerance import EPS
from nbtune.core.trial import Decision, TrialSpec, TrialState

__all__ = ["OptunaSearch", "OptunaTPE", "OptunaCmaEs", "import_optuna"]

_PRIMITIVE = (type(None), bool, int, float, str)


def import_optuna() -> Any:
    try:
        import optuna
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise AlgorithmError(
            "the optuna algorithms need Optuna: pip install 'nbtune[optuna]' (or optuna>=3.6)"
        ) from exc
    return optuna


def _distribution(optuna: Any, name: str, dom: Domain) -> tuple[Any, bool]:
    """Optuna distribution for a domain, and whether values need mapping back.

    Returns ``(dist, needs_decode)``: categorical options that Optuna cannot
    store (tuples, objects) are passed as indices; quantized domains whose step
    does not divide the range are sampled continuously and re-quantized.
    """
    d = optuna.distributions
    if isinstance(dom, Choice):
        if all(isinstance(o, _PRIMITIVE) for o in dom.options):
            return d.CategoricalDistribution(list(dom.options)), False
        return d.CategoricalDistribution(list(range(len(dom.options)))), True
    if isinstance(dom, RandInt):
        return d.IntDistribution(int(dom.low), int(dom.high) - 1), False
    if isinstance(dom, QUniform):
        steps = (dom.high - dom.low) / dom.q
        if abs(steps - round(steps)) < EPS:
            return d.FloatDistribution(dom.low, dom.high, step=dom.q), False
        return d.FloatDistribution(dom.low, dom.high), True
    if isinstance(dom, QLogUniform):
        return d.FloatDistribution(dom.low, dom.high, log=True), True
    if isinstance(dom, LogUniform):
        return d.FloatDistribution(dom.low, dom.high, log=True), False
    if isinstance(dom, Uniform):
        return d.FloatDistribution(dom.low, dom.high), False
    raise AlgorithmError(f"{name!r}: the optuna adapter does not know domain {type(dom).__name__}")


class OptunaSearch(BaseAlgorithm):
    """Any ``optuna.samplers`` sampler (default ``TPESampler(seed=seed)``) as an nbtune algorithm.

    ``sampler`` may be a sampler instance or one of ``"tpe"``, ``"cmaes"``,
    ``"random"``; ``pruner`` an optional ``optuna.pruners`` instance. Optuna's
    per-trial INFO logging is silenced unless ``verbose=True`` (it would flood
    a notebook); that setting is global to Optuna.
    """

    name = "optuna"
    default_sampler: str = "tpe"

    def __init__(
        self,
        space: Mapping[str, Any],
        *,
        sampler: Any = None,
        pruner: Any = None,
        verbose: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(space, **kwargs)
        if self.num_trials is None:
            raise AlgorithmError(f"{self.name} has no natural size: pass num_trials")
        optuna = import_optuna()
        self._optuna = optuna
        if not verbose:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.sampler = self._make_sampler(optuna, sampler)
        self.distributions: dict[str, Any] = {}
        self._decode: set[str] = set()
        for k, dom in self.space.items():
            if isinstance(dom, Domain):
                dist, needs = _distribution(optuna, k, dom)
                self.distributions[k] = dist
                if needs:
                    self._decode.add(k)
        self.study = optuna.create_study(
            direction="minimize" if self.mode == "min" else "maximize",
            sampler=self.sampler,
            pruner=pruner if pruner is not None else optuna.pruners.NopPruner(),
        )
        for point in self.points_to_evaluate:  # Optuna's own queue: its sampler skips them
            self.study.enqueue_trial(self._params(point))
        self.points_to_evaluate = []
        self._pruning = pruner is not None
        self._otrials: dict[int, Any] = {}
        self._last_value: dict[int, float] = {}
        self._steps: dict[int, int] = {}

    def _make_sampler(self, optuna: Any, sampler: Any) -> Any:
        if sampler is None:
            sampler = self.default_sampler
        if not isinstance(sampler, str):
            return sampler
        seed = None if self.seed is None else int(self.seed)
        if sampler == "tpe":
            return optuna.samplers.TPESampler(seed=seed)
        if sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if sampler == "cmaes":
            try:
                import cmaes  # noqa: F401
            except ImportError as exc:
                raise AlgorithmError(
                    "Optuna's CMA-ES sampler needs the 'cmaes' package: pip install cmaes"
                ) from exc
            return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
        raise AlgorithmError(f"unknown sampler {sampler!r}: use 'tpe', 'cmaes', 'random' or an instance")

    def _params(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Optuna's parameters for (part of) a configuration: :meth:`_config` backwards."""
        out = {}
        for k, v in config.items():
            dom = self.space[k]
            if not isinstance(dom, Domain):
                continue
            out[k] = dom.index(v) if k in self._decode and isinstance(dom, Choice) else v
        return out

    def _config(self, params: Mapping[str, Any]) -> dict[str, Any]:
        cfg: dict[str, Any] = {}
        for k, dom in self.space.items():
            if not isinstance(dom, Domain):
                cfg[k] = dom
            elif k in self._decode and isinstance(dom, Choice):
                cfg[k] = dom.options[int(params[k])]
            elif k in self._decode:
                cfg[k] = dom.from_unit(dom.to_unit(params[k]))
            else:
                cfg[k] = params[k]
        return cfg

    def ask(self, max_trials: int) -> list[TrialGroup]:
        """Up to ``max_trials`` new Optuna trials, each to ``max_budget``."""
        specs: list[TrialSpec] = []
        while len(specs) < max_trials and self.budget_ok():
            ot = self.study.ask(self.distributions)
            spec = self.new_spec(self._config(ot.params), self.max_budget)
            self._otrials[spec.trial_id] = ot
            specs.append(spec)
        return [self.new_group(specs)] if specs else []

    def on_report(self, trial_id: int, budget: float, metrics: Mapping[str, Any]) -> Decision:
        loss = self.record(trial_id, budget, metrics)
        if loss is None or trial_id not in self._otrials:
            return Decision.CONTINUE
        value = float(metrics[self.metric])
        self._last_value[trial_id] = value
        if self._pruning and math.isfinite(value):
            step = self._steps.get(trial_id, 0) + 1
            self._steps[trial_id] = step
            ot = self._otrials[trial_id]
            ot.report(value, step)
            if ot.should_prune():
                return Decision.STOP
        return Decision.CONTINUE

    def on_trial_end(self, trial_id: int, state: TrialState) -> None:
        super().on_trial_end(trial_id, state)
        ot = self._otrials.pop(trial_id, None)
        if ot is None:
            return
        ts = self._optuna.trial.TrialState
        value = self._last_value.get(trial_id)
        if state == TrialState.COMPLETED and value is not None and math.isfinite(value):
            self.study.tell(ot, value)
        elif state == TrialState.STOPPED:
            self.study.tell(ot, state=ts.PRUNED)
        else:
            self.study.tell(ot, state=ts.FAIL)

    @property
    def finished(self) -> bool:
        return not self.budget_ok()


class OptunaTPE(OptunaSearch):
    """Optuna's TPE sampler (the default of ``"optuna"``), by name."""

    name = "optuna-tpe"
    default_sampler = "tpe"


class OptunaCmaEs(OptunaSearch):
    """Optuna's CMA-ES sampler (needs the ``cmaes`` package); categoricals sampled independently."""

    name = "optuna-cmaes"
    default_sampler = "cmaes"
