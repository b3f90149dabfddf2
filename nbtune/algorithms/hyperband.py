"""Hyperband (Li et al., JMLR 2018): successive halving over several exploration levels.

With ``R = max_budget / min_budget`` and ``s_max = floor(log_eta R)``, bracket
``s`` (``s_max`` down to 0) starts ``n = ceil((s_max+1)/(s+1) * eta**s)``
configs at ``r = R * eta**-s`` (in units of ``min_budget``) and runs successive
halving inside: rung ``i`` keeps ``floor(n * eta**-i)`` configs at
``r * eta**i``. Aggressive brackets try many configs cheaply; the last one trains
a few to ``max_budget`` from the start, hedging against misleading early results.

Brackets are independent, so by default, when every running bracket waits at a
barrier and the engine has free slots, the next bracket starts (as Ray Tune's
``HyperBandScheduler`` and Syne Tune do) instead of leaving GPUs idle.
``pipeline_brackets=False`` runs one bracket at a time instead: the next starts
only when the current one has finished, as in Li et al.'s serial loop and in
the Fluid artifact's SyncBOHB scheduler (``fluid/syncbohb.py``:
``choose_trial_to_run`` only hands out trials of the first bracket that still
has a pending or running trial), the setting of Fluid's §6.2 SyncBOHB runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbtune.algorithms._common import EPS, ceil_eps, floor_eps, snap_budget, validate_eta
from nbtune.algorithms.algorithm_protocol import AlgorithmError, BaseAlgorithm
from nbtune.algorithms.successive_halving import BracketAlgorithm
from nbtune.core.group import TrialGroup

__all__ = ["Hyperband", "hyperband_brackets"]


def hyperband_brackets(
    max_budget: float, min_budget: float = 1.0, eta: float = 3
) -> list[list[tuple[int, float]]]:
    """Li et al.'s brackets, most exploratory first: per bracket, per rung ``(n_i, r_i)``.

    Budgets are exact (not rounded); the last rung of every bracket is ``max_budget``.
    """
    eta = validate_eta(eta)
    if not (0 < min_budget <= max_budget):
        raise AlgorithmError(f"need 0 < min_budget <= max_budget, got {min_budget}, {max_budget}")
    big_r = max_budget / min_budget
    s_max = BaseAlgorithm.log_eta(big_r, eta)
    brackets = []
    for s in range(s_max, -1, -1):
        n = ceil_eps((s_max + 1) / (s + 1) * eta**s)
        r = big_r * eta ** (-s)
        rungs = [(floor_eps(n * eta ** (-i)), r * eta**i * min_budget) for i in range(s + 1)]
        rungs[-1] = (rungs[-1][0], float(max_budget))  # no float drift on the last rung
        brackets.append(rungs)
    return brackets


class Hyperband(BracketAlgorithm):
    """Hyperband with brackets cycling ``s_max .. 0`` until ``num_trials`` configs exist.

    ``num_trials=None`` runs one full cycle (the paper's single Hyperband
    iteration). ``pipeline_brackets`` (default True) lets the next bracket
    start while running ones wait at a barrier and slots are free; False
    runs brackets strictly one after another (see the module docstring). When the cap falls inside a bracket, that bracket's first rung
    is truncated and later rungs keep ``floor(n' * eta**-i)`` (at least 1).
    Rung budgets are rounded to whole units when both ``min_budget`` and
    ``max_budget`` are integers, because runtimes report once per unit.
    """

    name = "hyperband"

    def __init__(
        self,
        space: Mapping[str, Any],
        *,
        eta: float = 3,
        pipeline_brackets: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(space, **kwargs)
        if not isinstance(pipeline_brackets, bool):
            raise AlgorithmError(f"pipeline_brackets must be True or False, got "
                                 f"{pipeline_brackets!r}")
        self.pipeline_brackets = pipeline_brackets
        self.eta = validate_eta(eta)
        self.plan = hyperband_brackets(self.max_budget, self.min_budget, self.eta)
        self.cap = (
            self.num_trials
            if self.num_trials is not None
            else sum(rungs[0][0] for rungs in self.plan)
        )
        self._next_plan = 0

    def _budgets(self, rungs: list[tuple[int, float]]) -> list[float]:
        raw = [r for _, r in rungs]
        snapped = [snap_budget(r, self.min_budget, self.max_budget) for r in raw]
        if all(b > a + EPS for a, b in zip(snapped, snapped[1:], strict=False)):
            return snapped
        return raw

    def can_start_bracket(self) -> bool:
        return self.trials_created < self.cap

    def _start_next_bracket(self) -> TrialGroup | None:
        rungs = self.plan[self._next_plan % len(self.plan)]
        self._next_plan += 1
        sizes = [n for n, _ in rungs]
        left = self.cap - self.trials_created
        if sizes[0] > left:  # the cap cuts this bracket: truncate its first rung
            sizes = [max(1, floor_eps(left * self.eta ** (-i))) for i in range(len(rungs))]
        return self.emit(self.open_bracket(sizes, self._budgets(rungs)))

    def ask(self, max_trials: int) -> list[TrialGroup]:
        """Ready rungs of running brackets, then new brackets while slots would stay idle.

        A new bracket starts when no bracket is active (regardless of
        ``max_trials``) or, with ``pipeline_brackets``, when everything is
        waiting at a barrier and ``max_trials`` exceeds the trials handed out
        in this call.
        """
        groups = self.emit_ready()
        handed = sum(len(g) for g in groups)
        while self.can_start_bracket() and (
            not self.open_brackets()  # every bracket done
            or ((self.pipeline_brackets or self._fill_tail()) and max_trials - handed > 0)
        ):
            g = self._start_next_bracket()
            if g is None:  # cannot happen (a bracket has >= 1 config); never spin
                break
            groups.append(g)
            handed += len(g)
        return groups

    def _fill_tail(self) -> bool:
        """Barrier filling, one bracket at a time: start the next bracket in the last rung's tail.

        With ``fill_barriers`` the next bracket may start on idle workers once
        every open bracket waits on its last rung (all of it handed out: no
        promotion will need a worker again) and :meth:`draws_settled` says the
        results still outstanding cannot change the configurations it draws.
        Then it draws, in the same order, exactly what it would draw after
        the bracket ended, and its rungs decide on its own results only: the
        run's configurations and results are those of the serial run.
        """
        if not self.fill_barriers or self.pipeline_brackets:
            return False
        open_ = self.open_brackets()
        return bool(open_) and all(b.last_rung and not b.ready for b in open_) \
            and self.draws_settled()

    def outstanding(self) -> dict[float, int]:
        """Rung results still to come, per budget (members neither reported nor failed)."""
        out: dict[float, int] = {}
        for b in self.brackets:
            if not b.done:
                k = sum(1 for t in b.members if t not in b.results and t not in b.failed)
                out[b.budget] = out.get(b.budget, 0) + k
        return out

    def draws_settled(self) -> bool:
        """Whether outstanding results could change the next configurations: random draws, never."""
        return True

    @property
    def finished(self) -> bool:
        return not self.can_start_bracket() and not self.open_brackets()
