"""h_i1 of every running trial, kept from one decision to the next.

DynamicFluid's plan asks for h_i1 of every running trial on every decision,
and the estimate moves with the clock: a trial measured at the width it holds
has ``(now − last report) / seconds per unit`` less budget left than its last
report says. :class:`RunningH1` keeps, per trial, what that estimate is made
of (budget left at the last report, its time, seconds per unit, the overhead
model) in arrays indexed by slot, recomputes them only for the trials whose
inputs changed since the last call (a report, a resize, a new measurement, a
new profile of their model), and applies the clock to all of them in a few
array operations. Every value is the same IEEE arithmetic, in the same order,
as :meth:`FluidEstimator.h1 <nbtune.allocators.fluid_estimator.FluidEstimator.h1>`
(the fit of unmeasured trials' times is told each time once, as there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import compress
from operator import attrgetter, itemgetter, ne
from typing import Any

import numpy as np

from nbtune.allocators.fluid_estimator import FluidEstimator
from nbtune.core.overhead_model import OverheadModel
from nbtune.core.resources import Placement, width
from nbtune.core.tolerance import EPS as _TOL
from nbtune.core.trial import TrialRecord

__all__ = ["RunningH1"]

_FIELDS = attrgetter("target_budget", "config", "share_since", "unit_time", "budget_used")
_RESULTS = attrgetter("results")
_LAST = itemgetter(slice(-1, None))  # [the last result], or [] before the first


class RunningH1:
    """Per-trial parts of h_i1 for running trials, in slot-indexed arrays updated by change.

    A trial's parts come in three layers, each redone only when what it rests on
    changed: its model (record, target, config, placement, when it got that
    placement, the profile of its model: overhead model), its measurement
    (seconds per unit and the width it was taken at), its progress (budget used,
    time of the last report).
    """

    _ARRAYS = ("_target", "_used", "_last", "_since", "_per", "_floor", "_unit", "_width")
    _FLAGS = ("_reported", "_counts", "_known", "_no_pred")

    def __init__(self) -> None:
        self._context: tuple[Any, ...] | None = None
        self._reset(64)

    def _reset(self, size: int) -> None:
        self._given: tuple[list[int], list[float], np.ndarray] = ([], [], np.empty(0, np.intp))
        self._source: Any = None  # the trial_changes whose mark _mark is
        self._mark = -1
        self._slot: dict[int, int] = {}
        self._free: list[int] = list(range(size - 1, -1, -1))
        self._key: dict[int, tuple[Any, ...]] = {}  # trial -> what its parts were made from
        self._models: list[OverheadModel | None] = [None] * size
        self._sig: list[str | None] = [None] * size
        self._prof_unit: list[float | None] = [None] * size  # the profile's seconds per unit
        for name in self._ARRAYS:  # target budget, budget used, last report, share since,
            setattr(self, name, np.zeros(size))  # seconds per unit measured, h floor, h_i1/left,
            # the width of the placement it holds
        for name in self._FLAGS:  # has a report, progress since it counts, seconds per unit known
            setattr(self, name, np.zeros(size, dtype=bool))
        self._per[:] = 1.0
        # the fit's guess of seconds per unit (none: _no_pred), and the fit's generation it
        # was made at (-1: none made since the trial's model was last worked out)
        self._pred = np.zeros(size)
        self._pred_gen = np.full(size, -1, dtype=np.int64)
        self._by_sig: dict[str, set[int]] = {}
        self._prof: dict[str, tuple[Any, Any]] = {}  # signature -> its profile, _facts of it
        self._shared: dict[OverheadModel, OverheadModel] = {}
        self._factors: dict[tuple[int, float], float] = {}

    def _grow(self) -> None:
        n = len(self._models)
        self._free.extend(range(2 * n - 1, n - 1, -1))
        for name in ("_models", "_sig", "_prof_unit"):
            getattr(self, name).extend([None] * n)
        for name in self._ARRAYS + self._FLAGS + ("_pred",):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.zeros_like(a)]))
        self._per[n:] = 1.0
        self._pred_gen = np.concatenate([self._pred_gen, np.full(n, -1, dtype=np.int64)])

    def _index_sig(self, tid: int, old: str | None, new: str | None) -> None:
        if old == new:
            return
        if old is not None:
            tids = self._by_sig[old]
            tids.discard(tid)
            if not tids:
                del self._by_sig[old], self._prof[old]
        if new is not None:
            self._by_sig.setdefault(new, set()).add(tid)

    def _drop(self, tid: int) -> None:
        s = self._slot.pop(tid)
        self._index_sig(tid, self._sig[s], None)
        del self._key[tid]
        self._models[s] = self._sig[s] = None
        self._free.append(s)

    def h1(self, est: FluidEstimator, running: Mapping[int, Placement],
           records: Sequence[TrialRecord] | None, now: float,
           view: Any = None) -> dict[int, float] | None:
        """h_i1 of each trial in ``running`` (``records``: theirs, in its order) at ``now``,
        adopted by ``est`` for its runtimes; None where ``est`` reads a workload prior
        (the caller then asks ``est.h1``).

        ``view``, where it offers the engine's ``trial_changes`` and ``in_running_order``,
        saves the look at every trial: the trials changed since the last call are named
        there, and only those are looked at (``records`` may then be None: they are read
        from ``view``, as they are where ``view`` cannot tell what changed).
        """
        if est.workload is not None:
            return None
        costs = est.costs
        store = est.store
        context = (store, costs, est.lookup, est.fixed)  # the last by value: one per estimator
        was = self._context
        if was is None or any(a is not b for a, b in zip(context[:3], was[:3], strict=True)) \
                or context[3] != was[3]:
            self._context = context
            self._reset(64)
        if costs is not None and not costs.active:
            costs = None
        changes = getattr(view, "trial_changes", None)
        log = None
        if changes is not None:  # (a bound method: equal for the same engine)
            mark, log = changes(self._mark if self._source == changes else -1, running)
            self._source, self._mark = (changes if mark >= 0 else None), mark
        slot = self._slot
        if log is None:
            if len(slot) > len(running) or any(t not in running for t in slot):
                for tid in [t for t in slot if t not in running]:
                    self._drop(tid)
        else:
            touched = set(log)
            for tid in [t for t in touched if t in slot and t not in running]:
                self._drop(tid)
        stale: set[int] = set()
        if store is not None:  # a model whose profile the store learnt anew: its trials again
            get, prof = store.get, self._prof
            for sig, tids in self._by_sig.items():
                p = get(sig)
                if p is not prof[sig][0]:  # a new object: stale if what h_i1 reads of it moved
                    facts = _facts(p)
                    if facts != prof[sig][1]:
                        stale.update(tids)
                    prof[sig] = (p, facts)
        tids = list(running)
        if log is None:
            if records is None:
                records = list(map(view.trial, running))
            # each trial's inputs, gathered and compared with the last call's by C loops (no
            # Python frame per trial): record, (target, config, since, measurement, budget
            # used), placement, [last result]
            keys = list(zip(records, map(_FIELDS, records), running.values(),
                            map(_LAST, map(_RESULTS, records)), strict=True))
            changed = list(map(ne, keys, map(self._key.get, tids)))
            if stale:
                changed = [c or tid in stale for c, tid in zip(changed, tids, strict=True)]
            if any(changed):
                dirty = list(compress(zip(tids, keys, strict=True), changed))
                self._update(est, costs, dirty, stale)
        else:
            # only the trials the log names (and those of a profile learnt anew) may have
            # changed: the same test on them, in running order
            maybe = view.in_running_order(touched | stale)
            if maybe:
                recs = list(map(view.trial, maybe))
                keys = list(zip(recs, map(_FIELDS, recs), map(running.__getitem__, maybe),
                                map(_LAST, map(_RESULTS, recs)), strict=True))
                get = self._key.get
                dirty = [(tid, key) for tid, key in zip(maybe, keys, strict=True)
                         if key != get(tid) or tid in stale]
                if dirty:
                    self._update(est, costs, dirty, stale)
        n = len(tids)
        idx = np.fromiter(map(slot.__getitem__, tids), dtype=np.intp, count=n)
        # est.h1's arithmetic, elementwise: budget left, less the progress since the last
        # report where it counts, at least the floor, times seconds per unit
        left = self._target[idx] - self._used[idx]
        last = self._last[idx]
        counts = self._counts[idx] & self._reported[idx] & (last >= self._since[idx] - _TOL)
        gone = now - last
        moved = left - np.where(gone < 0.0, 0.0, gone) / self._per[idx]
        left = np.where(counts, moved, left)
        floor = self._floor[idx]
        rem = np.where(floor > left, floor, left)
        unit = self._unit[idx]
        known = self._known[idx]
        guessed: list[int] = []
        if not known.all():  # est.h1's guess for the trials with no time known
            n_known = int(np.count_nonzero(known))
            fallback = sum(unit[known].tolist()) / n_known if n_known else 1.0
            unknown = ~known
            guessed = list(compress(tids, unknown.tolist()))
            if costs is None:
                unit = np.where(unknown, fallback, unit)
            else:  # the fit's answers, asked again only where it learnt something since
                where = np.flatnonzero(unknown)
                at = idx[where]
                pred_gen = self._pred_gen
                for i in np.flatnonzero(pred_gen[at] != costs.generation).tolist():
                    s = int(at[i])
                    t = view.trial(guessed[i]) if records is None else records[int(where[i])]
                    pred = costs.predict(t.config)
                    self._no_pred[s] = pred is None
                    self._pred[s] = 0.0 if pred is None else pred
                    pred_gen[s] = costs.generation
                guess = np.where(self._no_pred[at], fallback, self._pred[at])
                unit = unit.copy()
                unit[unknown] = guess
        h = (rem * unit).tolist()
        self._given = (tids, h, idx)
        out = dict(zip(running, h, strict=True))
        models = self._models
        est.adopt(out, dict(zip(running, map(models.__getitem__, idx.tolist()), strict=True)),
                  guessed)
        return out

    def last(self) -> tuple[list[int], list[float], np.ndarray]:
        """What the last :meth:`h1` call gave, as lists: the trial ids (``running``'s
        order), their h_i1, and the positions the table keeps them at (for
        :meth:`widths_at`)."""
        return self._given

    def widths_at(self, at: np.ndarray) -> np.ndarray:
        """The widths :meth:`widths` gives, of the trials kept at positions ``at``."""
        return self._width[at]

    def widths(self, tids: Iterable[int]) -> np.ndarray:
        """The width of the placement each of ``tids`` held at the last :meth:`h1` call (its
        shares summed, as :func:`~nbtune.core.resources.width` sums them)."""
        slot = self._slot
        return self._width[np.fromiter(map(slot.__getitem__, tids), dtype=np.intp)]

    def _update(self, est: FluidEstimator, costs: Any, dirty: list[tuple[Any, ...]],
                stale: set[int]) -> None:
        """Redo the layers that changed for each trial in ``dirty`` (running order: est.h1
        tells the fit each measured time in that order)."""
        slot, keys, free = self._slot, self._key, self._free
        progress: list[int] = []
        used: list[float] = []
        last: list[float] = []
        reported: list[bool] = []
        for tid, key in dirty:
            t, fields, pl, tail = key
            old = keys.get(tid)
            keys[tid] = key
            s = slot.get(tid)
            if s is None:
                if not free:
                    self._grow()
                s = slot[tid] = free.pop()
            if old is None or old[0] is not t or old[1][:3] != fields[:3] or old[2] != pl \
                    or tid in stale:
                self._model(est, tid, t, pl, s)
                self._measure(costs, tid, t, fields[3], s)
            elif old[1][3] != fields[3]:
                self._measure(costs, tid, t, fields[3], s)
            progress.append(s)
            used.append(fields[4])
            last.append(tail[0][0] if tail else 0.0)
            reported.append(bool(tail))
        at = np.array(progress, dtype=np.intp)
        self._used[at] = used
        self._last[at] = last
        self._reported[at] = reported

    def _model(self, est: FluidEstimator, tid: int, t: TrialRecord, pl: Placement,
               s: int) -> None:
        """Slot ``s``'s overhead model, target and placement, as est.h1 finds them."""
        store = est.store
        prof = None
        sig = None
        if store is not None:
            sig = est.lookup.signature(store, tid, t.config)
            if sig is not None:
                prof = store.get(sig)
        self._index_sig(tid, self._sig[s], sig)
        if sig is not None:
            self._prof[sig] = (prof, _facts(prof))
        self._sig[s] = sig
        self._pred_gen[s] = -1
        fixed = est.fixed
        oh = (fixed if fixed is not None else prof.overhead if prof is not None
              else OverheadModel())
        self._models[s] = self._shared.setdefault(oh, oh)
        self._width[s] = pl[0][1] if len(pl) == 1 else width(pl)
        target = t.target_budget
        self._target[s] = target
        self._since[s] = t.share_since
        self._floor[s] = 1e-6 * (1.0 if target < 1.0 else target)
        # the profile's seconds per unit, for a trial with no measurement of its own
        self._prof_unit[s] = prof.unit_time if prof is not None and prof.unit_time else None

    def _measure(self, costs: Any, tid: int, t: TrialRecord,
                 seen: tuple[float, float] | None, s: int) -> None:
        """Slot ``s``'s seconds per unit from the trial's own measurement ``seen``, if any."""
        if seen is not None and seen[0] > 0 and seen[1] > 0:
            oh = self._models[s]
            assert oh is not None
            fkey = (id(oh), seen[1])
            f = self._factors.get(fkey)
            if f is None:
                f = self._factors[fkey] = oh.factor(seen[1])
            u = seen[0] / f
        else:
            u = self._prof_unit[s]
        self._unit[s] = 0.0 if u is None else u
        self._known[s] = u is not None
        counts = seen is not None and seen[0] > 0 and abs(float(self._width[s]) - seen[1]) < 1e-6
        self._counts[s] = counts
        self._per[s] = seen[0] if counts else 1.0
        if u is not None and costs is not None:
            costs.observe(tid, t.config, u)


def _facts(prof: Any) -> tuple[Any, ...] | None:
    """What h_i1 reads of a profile: its overhead model and seconds per unit."""
    return None if prof is None else (prof.overhead, prof.unit_time)
