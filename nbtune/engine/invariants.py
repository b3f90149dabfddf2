"""The engine's invariants, checked after every ``handle`` when ``validate=True``.

Read-only: the contract tests and the property tests run engines with
``validate=True`` so an algorithm or allocator that breaks the contract (a trial
placed twice, queued twice, past its budget, over a GPU's share) fails at the
event that broke it, not later.
"""

from __future__ import annotations

from typing import Any

from nbtune.core.tolerance import EPS
from nbtune.core.trial import TrialState
from nbtune.engine import fusion_units
from nbtune.engine.state import InvariantError

#: the :class:`~nbtune.engine.engine.Engine` these functions work on (not imported:
#: the engine imports this module)
Engine = Any

__all__ = ["check"]


def check(eng: Engine) -> None:
    """Raise :class:`InvariantError` if any invariant is broken."""
    if eng.ledger.cluster is None:
        return
    caps = {g.gpu_id: eng.allocator.max_share(eng, g.gpu_id) for g in eng.cluster.gpus}
    eng.ledger.check(caps)
    running = {tid for tid, t in eng.trials.items() if t.state is TrialState.RUNNING}
    if running != set(eng.ledger.placements):
        raise InvariantError(
            f"running trials {sorted(running)} != placed {sorted(eng.ledger.placements)}"
        )
    pend = [s.trial_id for s in eng.pending]
    if len(set(pend)) != len(pend):
        raise InvariantError(f"a trial is queued twice: {pend}")
    for tid in pend:
        if eng.trials[tid].state is not TrialState.PENDING:
            raise InvariantError(f"queued trial {tid} is {eng.trials[tid].state.value}")
    for t in eng.trials.values():
        if t.budget_used > eng.max_budget + EPS or t.target_budget > eng.max_budget + EPS:
            raise InvariantError(f"trial {t.trial_id} exceeds max_budget {eng.max_budget}")
        if len(t.results) > 1 and t.results[-1][1] <= t.results[-2][1] + EPS:
            raise InvariantError(f"trial {t.trial_id} recorded budget {t.results[-1][1]} twice "
                                 "or out of order")
        if t.state is TrialState.PENDING and t.trial_id not in pend:
            raise InvariantError(f"pending trial {t.trial_id} is not queued")
    # under fusion the cap counts what the allocator places: fused units
    n = len(running) if eng.fusion is None else len(eng.fusion.running(eng))
    if eng.max_concurrent is not None and n > eng.max_concurrent:
        raise InvariantError(f"{n} trials (or fused units) run, cap is {eng.max_concurrent}")
    fusion_units.check(eng)
