"""Synchronous successive halving (Jamieson & Talwalkar, 2016).

``n`` configurations train to ``min_budget``; at every rung the best
``floor(n/eta)`` (at least one) are promoted to ``eta`` times the budget, until
the survivors reach ``max_budget``. Each rung is one
:class:`~nbtune.core.group.TrialGroup`, and the algorithm waits at the rung's
barrier: that is what makes it *synchronous*.

:class:`Bracket` holds the rung logic and :class:`BracketAlgorithm` the event
handling, so Hyperband and synchronous BOHB reuse both by composition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nbtune.algorithms._common import (
    EPS,
    ceil_eps,
    floor_eps,
    latest_loss,
    rank_key,
    rung_budgets,
    validate_eta,
)
from nbtune.algorithms.algorithm_protocol import AlgorithmError, BaseAlgorithm
from nbtune.core.group import TrialGroup
from nbtune.core.trial import TrialSpec, TrialState

__all__ = ["Bracket", "BracketAlgorithm", "SuccessiveHalving", "halving_sizes"]


def halving_sizes(n: int, num_rungs: int, eta: float) -> list[int]:
    """Rung sizes when the top ``floor(n_i / eta)`` (at least one) go on."""
    sizes = [int(n)]
    for _ in range(num_rungs - 1):
        sizes.append(max(1, floor_eps(sizes[-1] / eta)))
    return sizes


class Bracket:
    """One run of successive halving: ``sizes[i]`` trials train to ``budgets[i]``.

    It only tracks trial ids and losses; the owning algorithm creates trials,
    builds specs and retires the losers this class names.
    """

    def __init__(self, index: int, sizes: list[int], budgets: list[float]) -> None:
        if len(sizes) != len(budgets) or not sizes:
            raise ValueError("a bracket needs one size per rung budget")
        self.index = index
        self.sizes = list(sizes)
        self.budgets = list(budgets)
        self.rung = 0
        self.members: list[int] = []
        self.results: dict[int, float] = {}
        self.failed: set[int] = set()
        #: members of the current rung not yet handed to the engine
        self.ready: list[int] = []
        self.done = False

    @property
    def budget(self) -> float:
        """Budget of the current rung."""
        return self.budgets[self.rung]

    @property
    def last_rung(self) -> bool:
        return self.rung == len(self.budgets) - 1

    def start(self, trial_ids: list[int]) -> None:
        self.members = list(trial_ids)
        self.ready = list(trial_ids)
        if not self.members:
            self.done = True

    def take_ready(self) -> list[int]:
        out, self.ready = self.ready, []
        return out

    def record(self, trial_id: int, loss: float) -> bool:
        """The trial reached the current rung's budget with ``loss``; False if not ours."""
        if self.done or trial_id not in self.members or trial_id in self.results:
            return False
        if trial_id in self.failed:
            return False
        self.results[trial_id] = loss
        return True

    def fail(self, trial_id: int) -> None:
        """The trial ended before reaching the rung: it loses the rung, nobody waits for it."""
        if self.done or trial_id not in self.members or trial_id in self.results:
            return
        if trial_id in self.ready:  # never handed out (e.g. stopped while paused)
            self.ready.remove(trial_id)
            self.members.remove(trial_id)
            if not self.members:
                self.done = True
            return
        self.failed.add(trial_id)

    @property
    def barrier_passed(self) -> bool:
        """Every member of the rung reported or failed: ``results`` and ``failed`` only ever
        hold members (:meth:`record`, :meth:`fail`), never the same one, so counting them
        says it without walking the members."""
        return not self.done and not self.ready and \
            len(self.results) + len(self.failed) >= len(self.members)

    def advance(self, alive: Callable[[int], bool]) -> list[int]:
        """Close the finished rung; return the paused losers to retire.

        Keeps exactly the best ``sizes[rung+1]`` by loss (ties by trial id, so
        the choice is deterministic), fewer only if fewer trials survived.
        """
        viable = sorted(
            (t for t in self.members if t in self.results and alive(t)),
            key=lambda t: (rank_key(self.results[t]), t),
        )
        if self.last_rung:
            self.done = True
            return []  # the last rung trained to max_budget: its trials completed
        keep = min(self.sizes[self.rung + 1], len(viable))
        winners, losers = viable[:keep], viable[keep:]
        if not winners:
            self.done = True
            return losers
        self.rung += 1
        self.members = list(winners)
        self.results = {}
        self.failed = set()
        self.ready = list(winners)
        return losers


class BracketAlgorithm(BaseAlgorithm):
    """Event handling shared by synchronous rung algorithms (SHA, Hyperband, sync BOHB).

    Subclasses open brackets with :meth:`open_bracket` and hand out rungs with
    :meth:`emit`. Override :meth:`sample_new_config` to change how new
    configurations are drawn and :meth:`observe` to learn from rung results.
    """

    synchronous = True
    waits_at_rungs = True

    def __init__(
        self, space: Mapping[str, Any], *, fill_barriers: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(space, **kwargs)
        if not isinstance(fill_barriers, bool):
            raise AlgorithmError(f"fill_barriers must be True or False, got {fill_barriers!r}")
        #: let the engine continue likely promotions on workers idle at a rung barrier
        self.fill_barriers = fill_barriers
        self.brackets: list[Bracket] = []
        self._open: list[Bracket] = []  # brackets maybe not done, in order (see open_brackets)
        self._closed = False  # a bracket of _open may be done since open_brackets last looked
        #: indices of the brackets whose rung may have trials not handed out yet: a rung's
        #: ``ready`` fills only as it starts (:meth:`open_bracket`, :meth:`_settle`)
        self._stirred: set[int] = set()
        self._bracket_of: dict[int, Bracket] = {}
        self._target: dict[int, float] = {}

    # ---------------------------------------------------------------- hooks
    def sample_new_config(self) -> dict[str, Any]:
        return self.draw_config()

    def observe(self, trial_id: int, budget: float, loss: float) -> None:
        """A trial finished a rung at ``budget`` with ``loss`` (model-based subclasses learn)."""

    # --------------------------------------------------------------- brackets
    def open_bracket(self, sizes: list[int], budgets: list[float]) -> Bracket:
        b = Bracket(len(self.brackets), sizes, budgets)
        ids = [self.new_trial(self.sample_new_config()) for _ in range(sizes[0])]
        b.start(ids)
        for t in ids:
            self._bracket_of[t] = b
        self.brackets.append(b)
        self._open.append(b)
        self._closed = self._closed or b.done
        self._stirred.add(b.index)
        return b

    def open_brackets(self) -> list[Bracket]:
        """The brackets not done, in order: ``[b for b in self.brackets if not b.done]``
        without walking the finished ones again (a bracket once done stays done), nor the
        open ones while none can have finished: a bracket ends only as it starts empty
        (:meth:`open_bracket`) or as a rung result or a loss settles it (:meth:`_settle`),
        and both say so."""
        if self._closed:
            self._closed = False
            self._open = [b for b in self._open if not b.done]
        return self._open

    def emit(self, b: Bracket) -> TrialGroup | None:
        """The current rung's trials that were not handed out yet, as one group."""
        ready = b.take_ready()
        if not ready:
            return None
        budget, gid = b.budget, self.new_group_id()
        specs = []
        for t in ready:  # in the group already (not rebuilt by new_group)
            self._target[t] = budget
            specs.append(TrialSpec(t, dict(self.configs[t]), budget, None, gid))
        return TrialGroup(gid, specs)

    def emit_ready(self) -> list[TrialGroup]:
        """A group of each open bracket's rung trials not handed out yet, in bracket order.

        Only the brackets whose rung started since the last call are looked at (the others'
        ``ready`` is empty), not every open one: this runs at each scheduling round.
        """
        groups = []
        if not self._stirred:
            return groups
        stirred, self._stirred = sorted(self._stirred), set()
        brackets = self.brackets
        for i in stirred:
            b = brackets[i]
            if b.ready and not b.done:
                g = self.emit(b)
                if g is not None:
                    groups.append(g)
        return groups

    def speculate(self) -> list[TrialSpec]:
        """Likely promotions of open rungs, best first: barrier filling (``fill_barriers``).

        In every bracket waiting at a barrier, the trials that already reached
        the rung and rank within the ``sizes[rung+1]`` best *of those known so
        far* (a straggler may still displace them: the engine drops the work of
        any that lose), at the next rung's budget. Only what a run knows: the
        reported losses, never the stragglers' future ones.
        """
        if not self.fill_barriers:
            return []
        out: list[TrialSpec] = []
        for b in self.brackets:
            if b.done or b.last_rung or b.ready or b.barrier_passed:
                continue
            known = sorted((t for t in b.results if t not in self.ended),
                           key=lambda t: (rank_key(b.results[t]), t))
            last = b.budgets[-1]
            out.extend(TrialSpec(t, dict(self.configs[t]), last)
                       for t in known[:b.sizes[b.rung + 1]])
        return out

    def _settle(self, b: Bracket) -> None:
        while b.barrier_passed:
            for t in b.advance(lambda t: t not in self.ended):
                self.retire(t)
            self._stirred.add(b.index)  # its next rung's trials are ready
        if b.done:  # it finished here, or in the fail() before (see open_brackets)
            self._closed = True

    # ----------------------------------------------------------------- events
    def on_segment_end(self, trial_id: int, budget: float) -> None:
        b = self._bracket_of.get(trial_id)
        target = self._target.get(trial_id)
        if b is None or target is None or budget < target - EPS:
            return  # not a rung result (the engine paused it for its own reasons)
        loss = latest_loss(self.history, trial_id)
        if b.record(trial_id, loss):
            self.observe(trial_id, target, loss)
        self._settle(b)

    def on_trial_end(self, trial_id: int, state: TrialState) -> None:
        super().on_trial_end(trial_id, state)
        b = self._bracket_of.get(trial_id)
        if b is None:
            return
        target = self._target.get(trial_id)
        if state == TrialState.COMPLETED and target is not None and b.budget == target:
            loss = latest_loss(self.history, trial_id)
            if b.record(trial_id, loss):
                self.observe(trial_id, target, loss)
        else:
            b.fail(trial_id)  # errored or stopped: a loser of its rung
        self._settle(b)


class SuccessiveHalving(BracketAlgorithm):
    """One bracket of synchronous successive halving.

    Rung budgets are ``min_budget * eta**k`` below ``max_budget``, then
    ``max_budget`` (rounded to whole units when both ends are integers).
    ``num_trials=None`` uses ``ceil(eta**(rungs-1))`` configs, so exactly one
    survivor reaches ``max_budget`` — Hyperband's most exploratory bracket.
    """

    name = "sha"

    def __init__(self, space: Mapping[str, Any], *, eta: float = 3, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        self.eta = validate_eta(eta)
        self.budgets = rung_budgets(self.min_budget, self.max_budget, self.eta)
        n = self.num_trials
        if n is None:
            n = max(1, ceil_eps(self.eta ** (len(self.budgets) - 1)))
        self.sizes = halving_sizes(n, len(self.budgets), self.eta)

    def ask(self, max_trials: int) -> list[TrialGroup]:
        """The first rung on the first call, then each rung once its barrier has passed."""
        if not self.brackets:
            self.open_bracket(self.sizes, self.budgets)
        return self.emit_ready()

    @property
    def finished(self) -> bool:
        return bool(self.brackets) and self.brackets[0].done
