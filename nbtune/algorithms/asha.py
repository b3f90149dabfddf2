"""ASHA: asynchronous successive halving (Li et al., MLSys 2020).

Rungs sit at ``min_budget * eta**k`` (then ``max_budget``). Two variants, as
in Syne Tune (``type=``):

* ``"stopping"`` (the default, as Ray Tune's ``ASHAScheduler`` and Optuna's
  pruners run): every trial is launched for ``max_budget`` and trains on
  past the rungs; at rung ``k`` a stop rule judges it, then its result joins
  the rung's. Nothing is paused or relaunched, so a training loop needs no
  checkpoint. The rungs below ``max_budget`` are :attr:`ASHA.stop_budgets`:
  a runtime lets the trial wait there for the verdict, so a stopped trial
  trains no unit past its rung (Ray's function trainables block in
  ``report`` alike). Two stop rules:

  - ``stop_rule="rank"`` (the default): Li et al.'s promotion rule applied
    as each trial arrives: the trial goes on when it is in the top
    ``floor(n/eta)`` of the ``n`` results at the rung, its own included, and
    while ``n < eta`` only when it is the best so far (Optuna's
    ``SuccessiveHalvingPruner``, decision for decision);
  - ``stop_rule="ray"``: Ray Tune's rule, decision for decision: stop when
    its loss is above the ``100/eta`` percentile of the losses recorded at
    the rung before it, so the first trial at a rung always goes on.

  ``rank`` is stricter at small ``n``: on three workloads it trained fewer
  epochs for a final best within 0.005 of ``ray``'s, which is why it is the
  default (benchmarks/asha_rules.py measures it).
* ``"promotion"`` (Li et al.'s Algorithm 2): every trial trains to its
  rung's budget and pauses. Whenever a slot frees up, :meth:`ASHA.ask`
  first looks for a promotion — from the highest rung down, a paused trial
  in the top ``floor(n_k / eta)`` of the ``n_k`` results recorded at rung
  ``k`` that was not promoted yet — and otherwise starts a new config at
  ``min_budget``. A promoted trial resumes from its checkpoint (or, on the
  Dask runtime, in the process that was held at the rung).

No barrier in either: workers never wait for a rung to fill, at the price of
sometimes keeping a trial that a full rung would have cut.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from nbtune.algorithms._common import (
    EPS,
    ceil_eps,
    latest_loss,
    rank_key,
    rung_budgets,
    validate_eta,
)
from nbtune.algorithms.algorithm_protocol import AlgorithmError, BaseAlgorithm
from nbtune.core.group import TrialGroup
from nbtune.core.trial import Decision, TrialSpec, TrialState

__all__ = ["ASHA", "promotable", "asha_keeps", "asha_keeps_ranked", "rank_keeps_ranked",
           "ASHA_TYPES", "STOP_RULES"]

#: the variants of :class:`ASHA` (Syne Tune's names)
ASHA_TYPES = ("stopping", "promotion")


def promotable(results: Mapping[int, float], eta: float) -> list[int]:
    """Trial ids in the top ``floor(n / eta)`` of one rung's results (best first).

    The pure promotion rule, for property tests. Ties are broken by trial id.
    """
    k = int(len(results) // eta + EPS)
    ranked = sorted(results, key=lambda t: (rank_key(results[t]), t))
    return ranked[:k]


def asha_keeps(others: list[float], loss: float, eta: float) -> bool:
    """The stopping rule: does a trial with ``loss`` go on past a rung where ``others`` are?

    Ray's ``ASHAScheduler``: ``others`` are the results recorded at the rung
    *before* this trial's own; it is stopped when its loss is above their
    ``100/eta`` percentile (linear interpolation; Ray's
    ``nanpercentile(rewards, (1 - 1/rf) * 100)`` on negated losses), and the
    first trial at a rung always goes on. Counting the trial's own result in
    the percentile would keep one rank more at every rung: with 3 results
    recorded, the second best of 4 would go on, where Ray stops it unless it
    is within two thirds of the way to the best.
    Unlike Ray (whose NaN reward is never stopped), a missing or NaN result
    counts as the worst; ``-inf`` as the best.
    """
    if not others:
        return True
    keys = [rank_key(v) for v in others]
    key = rank_key(loss)
    bottom, top = _stand_ins([k for k in (*keys, key) if math.isfinite(k)])
    vals = np.array([_finite(k, bottom, top) for k in keys], float)
    cutoff = float(np.percentile(vals, 100.0 / eta))
    return _finite(key, bottom, top) <= cutoff + 1e-12


def _stand_ins(finite: list[float]) -> tuple[float, float]:
    """Finite stand-ins for ``-inf`` and ``+inf``/NaN keys: interpolating with an infinity
    gives NaN; below and above every finite key they keep the order."""
    return (min(finite) - 1.0, max(finite) + 1.0) if finite else (-1.0, 1.0)


def _finite(key: float, bottom: float, top: float) -> float:
    return key if math.isfinite(key) else (bottom if key == -math.inf else top)


def asha_keeps_ranked(ranked: list[tuple[float, int]], loss: float, eta: float) -> bool:
    """:func:`asha_keeps` on ``others`` kept sorted by ``(rank_key, trial_id)``: O(log n), not O(n).

    Judging every report against the whole rung would make a large ASHA run
    quadratic in its trials. The rung is already sorted, so the
    percentile is two look-ups and numpy's linear interpolation between them;
    non-finite keys get the stand-ins of :func:`asha_keeps`, so both give the
    same answers.
    """
    n = len(ranked)
    if n == 0:
        return True
    neg = bisect.bisect_right(ranked, (-math.inf, math.inf))  # keys == -inf
    fin_end = bisect.bisect_left(ranked, (math.inf, -math.inf))  # keys < +inf
    key = rank_key(loss)
    ends = [ranked[neg][0], ranked[fin_end - 1][0]] if fin_end > neg else []
    bottom, top = _stand_ins(ends + ([key] if math.isfinite(key) else []))

    def value(i: int) -> float:
        return bottom if i < neg else (top if i >= fin_end else ranked[i][0])

    virtual = (100.0 / eta / 100.0) * (n - 1)  # numpy's "linear" method, step by step
    lo = int(math.floor(virtual))
    hi = min(lo + 1, n - 1)
    t = virtual - lo
    a, b = value(lo), value(hi)
    diff = b - a
    cutoff = b - diff * (1 - t) if t >= 0.5 else a + diff * t
    return _finite(key, bottom, top) <= cutoff + 1e-12


def rank_keeps_ranked(ranked: list[tuple[float, int]], loss: float, eta: float) -> bool:
    """Li et al.'s rule in stopping mode: is ``loss`` in the top ``floor(n/eta)`` of the rung?

    ``ranked`` are the other results recorded at the rung, sorted by ``(rank_key,
    trial_id)``; ``n`` counts them and this one. Below ``eta`` results the top is
    empty and a trial cannot wait to be promoted, so it goes on when it is the
    best so far. Ties go on (only strictly better results count against it), and
    a missing or NaN result never does: Optuna's ``SuccessiveHalvingPruner``
    decides the same (``_is_trial_promotable_to_next_rung``; it prunes NaN first).
    """
    key = rank_key(loss)
    if key == math.inf:
        return False
    top = max(int((len(ranked) + 1) // eta + EPS), 1)
    better = bisect.bisect_left(ranked, (key, -math.inf))  # others strictly below its key
    return better < top


#: how stopping mode judges a trial at a rung: Ray's ``ASHAScheduler`` or Li et al.'s rank
#: rule (Optuna's ``SuccessiveHalvingPruner``); each takes (the rung's others, loss, eta)
STOP_RULES = {"ray": asha_keeps_ranked, "rank": rank_keeps_ranked}


class ASHA(BaseAlgorithm):
    """Asynchronous successive halving, ``type="stopping"`` (default) or ``"promotion"``.

    ``num_trials=None`` starts ``ceil(eta**(rungs-1))`` configs, as
    :class:`~nbtune.algorithms.successive_halving.SuccessiveHalving` does (with
    ``eta=3`` and ``max_budget=27``: 27), so a plain ``tune(...)`` call runs.

    See the module docstring for the two variants and ``stop_rule`` (stopping
    mode's verdict at a rung: ``"rank"``, the default, or ``"ray"``). When ``num_trials``
    configs exist and nothing runs any more (and, with promotions, nothing
    can be promoted), the paused leftovers are retired (see
    :meth:`pop_retired`) and :attr:`finished` becomes True, so the experiment
    can end.
    """

    name = "asha"
    waits_at_rungs = True

    def __init__(self, space: Mapping[str, Any], *, eta: float = 3, type: str = "stopping",
                 stop_rule: str = "rank", **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        if type not in ASHA_TYPES:
            raise AlgorithmError(
                f"type must be 'stopping' (train on past rungs until stopped, no checkpoint "
                f"needed) or 'promotion' (pause at rungs, resume from a checkpoint), got {type!r}"
            )
        if stop_rule not in STOP_RULES:
            raise AlgorithmError(
                f"stop_rule must be 'ray' (Ray Tune's ASHAScheduler: stop below the rung's "
                f"1 - 1/eta percentile) or 'rank' (Li et al.'s top floor(n/eta), as Optuna's "
                f"SuccessiveHalvingPruner), got {stop_rule!r}"
            )
        self.type = type
        self.stop_rule = stop_rule
        self._keeps = STOP_RULES[stop_rule]
        self.stopping = type == "stopping"
        self.eta = validate_eta(eta)
        self.rungs = rung_budgets(self.min_budget, self.max_budget, self.eta)
        if self.num_trials is None:  # successive halving's size: one config reaches the top
            self.num_trials = max(1, ceil_eps(self.eta ** (len(self.rungs) - 1)))
        #: per rung: trial id -> loss recorded when the trial reached that rung
        self.rung_results: list[dict[int, float]] = [{} for _ in self.rungs]
        #: per rung: (rank key, trial id) kept sorted as results arrive, so finding the
        #: next promotion does not re-sort the rung on every report (O(n log n) each time,
        #: seconds over a run of a thousand trials)
        self._ranked: list[list[tuple[float, int]]] = [[] for _ in self.rungs]
        self.promoted: list[set[int]] = [set() for _ in self.rungs]
        self.level: dict[int, int] = {}
        self._active: set[int] = set()
        self._paused: set[int] = set()
        self._done = False

    # ---------------------------------------------------------------- hooks
    def sample_new_config(self) -> dict[str, Any]:
        return self.draw_config()

    def observe(self, trial_id: int, budget: float, loss: float) -> None:
        """A trial finished a rung at ``budget`` with ``loss`` (model-based subclasses learn)."""

    # ------------------------------------------------------------- promotion
    def find_promotion(self) -> tuple[int, int] | None:
        """``(trial_id, rung)`` of the next promotion, highest rung first, or None."""
        for k in range(len(self.rungs) - 2, -1, -1):
            ranked = self._ranked[k]
            top = int(len(ranked) // self.eta + EPS)  # the rule of :func:`promotable`
            promoted, paused = self.promoted[k], self._paused
            for _, t in ranked[:top]:
                if t not in promoted and t in paused:
                    return t, k
        return None

    def _settle(self) -> None:
        """Retire what can never be promoted once no new work can change the rungs."""
        if self._done or self.budget_ok() or self._active or self.find_promotion():
            return
        for t in sorted(self._paused):
            self.retire(t)
        self._paused.clear()
        self._done = True

    def ask(self, max_trials: int) -> list[TrialGroup]:
        """Up to ``max_trials`` specs: promotions first, then new configs at ``min_budget``.

        In stopping mode every new config is launched for ``max_budget``.
        """
        specs: list[TrialSpec] = []
        while len(specs) < max_trials and not self._done:
            p = None if self.stopping else self.find_promotion()
            if p is not None:
                t, k = p
                self.promoted[k].add(t)
                self._paused.discard(t)
                self._active.add(t)
                self.level[t] = k + 1
                specs.append(TrialSpec(t, dict(self.configs[t]), self.rungs[k + 1]))
            elif self.budget_ok():
                first = self.max_budget if self.stopping else self.rungs[0]
                spec = self.new_spec(self.sample_new_config(), first)
                self._active.add(spec.trial_id)
                self.level[spec.trial_id] = 0
                specs.append(spec)
            else:
                break
        self._settle()
        return [self.new_group(specs)] if specs else []

    # ----------------------------------------------------------------- events
    def on_report(self, trial_id: int, budget: float, metrics: Mapping[str, Any]) -> Decision:
        """Record; in stopping mode, judge the trial at every rung it reaches."""
        self.record(trial_id, budget, metrics)
        if not self.stopping or trial_id not in self._active:
            return Decision.CONTINUE
        k = self.level[trial_id]
        if k >= len(self.rungs) or budget < self.rungs[k] - EPS:
            return Decision.CONTINUE
        while k + 1 < len(self.rungs) and budget >= self.rungs[k + 1] - EPS:
            k += 1  # a runtime reporting on a coarser grid may pass several rungs at once
        self.level[trial_id] = k
        others = self._ranked[k]  # judged against the rung before its own result, as Ray
        if trial_id in self.rung_results[k]:
            others = [x for x in others if x[1] != trial_id]
        last = k == len(self.rungs) - 1  # max_budget: the engine completes it
        keep = last or self._keeps(others, latest_loss(self.history, trial_id), self.eta)
        self._reach_rung(trial_id)
        self.level[trial_id] = k + 1
        if last:
            return Decision.CONTINUE
        if keep:
            self.promoted[k].add(trial_id)
        return Decision.CONTINUE if keep else Decision.STOP

    def _reach_rung(self, trial_id: int) -> None:
        k = self.level[trial_id]
        loss = latest_loss(self.history, trial_id)
        old = self.rung_results[k].get(trial_id)
        if old is not None:
            self._ranked[k].remove((rank_key(old), trial_id))
        self.rung_results[k][trial_id] = loss
        bisect.insort(self._ranked[k], (rank_key(loss), trial_id))
        self.observe(trial_id, self.rungs[k], loss)

    def on_segment_end(self, trial_id: int, budget: float) -> None:
        if self.stopping:
            return  # trials run to max_budget: a pause is the engine's, not a rung
        if trial_id not in self._active or budget < self.rungs[self.level[trial_id]] - EPS:
            return  # not a rung result (the engine paused it for its own reasons)
        self._active.discard(trial_id)
        self._reach_rung(trial_id)
        self._paused.add(trial_id)
        self._settle()

    def on_trial_end(self, trial_id: int, state: TrialState) -> None:
        super().on_trial_end(trial_id, state)
        if trial_id in self._active and state == TrialState.COMPLETED and not self.stopping:
            self._reach_rung(trial_id)
        self._active.discard(trial_id)
        self._paused.discard(trial_id)
        self._settle()

    @property
    def stop_budgets(self) -> tuple[float, ...]:
        """Stopping mode: the rungs below ``max_budget``, where :meth:`on_report` may stop."""
        return tuple(self.rungs[:-1]) if self.stopping else ()

    @property
    def finished(self) -> bool:
        return self._done
