"""Fluid's runtime estimates h_i1 and h_{i,w} for live trials, from what the view offers.

h_i1 is remaining budget × seconds per unit on one GPU. Seconds per unit come
from the engine's measurement (``view.unit_time``, converted to width 1
through the overhead model), else a profile in the ``ProfileStore`` the
runtime's profiler put in ``view.hints["profiles"]``, else a workload prior
in ``view.hints["workload"]`` (only unit tests of the policies give one:
``nbtune.tune`` never hands the allocators the model), else a fit of the
times measured so far against the config's sizes (the allocator's
:class:`~nbtune.allocators.unit_cost.UnitCostFit`), else the mean of the other
live trials, else 1. Nothing here knows which runtime runs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from nbtune.allocators.allocator_protocol import SchedulingView
from nbtune.allocators.profiling import Profile, ProfileLookup, ProfileStore, is_profile_store
from nbtune.allocators.unit_cost import UnitCostFit
from nbtune.core.overhead_model import OverheadModel
from nbtune.core.resources import Placement, width
from nbtune.core.tolerance import EPS as _TOL
from nbtune.core.trial import TrialRecord

__all__ = ["FluidEstimator", "with_hints"]

_UNSET: Any = object()  # a profile not looked up yet (None: looked up, there is none)
_CONFIG = attrgetter("config")


class FluidEstimator:
    """h_i1 and h_{i,w} for live trials from what a :class:`SchedulingView` offers.

    ``guessed`` lists the trials :meth:`h1` found nothing measured for (no report of their
    own, no profile of their model): their h_i1 is a guess, from ``costs`` (a
    :class:`~nbtune.allocators.unit_cost.UnitCostFit` of the times measured so far) where it
    answers, else the others' mean.
    """

    def __init__(
        self,
        view: SchedulingView,
        *,
        alpha: float | None = None,
        beta: float | None = None,
        signature_keys: Iterable[str] | None = None,
        lookup: ProfileLookup | None = None,
        costs: UnitCostFit | None = None,
    ) -> None:
        self.view = view
        self.costs = costs  # the allocator's fit of measured times, for unmeasured trials
        self.fixed = None if alpha is None and beta is None else OverheadModel(alpha or 1.0,
                                                                              beta or 1.0)
        self.keys = None if signature_keys is None else list(signature_keys)
        hints = view.hints
        self.workload = hints.get("workload")
        store = hints.get("profiles")
        self.store: ProfileStore | None = store if is_profile_store(store) else None
        # an allocator keeps one lookup across its calls: it remembers the trials' signatures
        self._lookup = ProfileLookup(self.keys) if lookup is None else lookup
        self._profiles: dict[int, Profile | None] = {}  # this call's lookups, one per trial
        self._h1: dict[int, float] = {}
        self.guessed: set[int] = set()
        self._oh: dict[int, OverheadModel] = {}
        # one object per distinct model: trials whose models are equal share one, so that
        # the factor caches (keyed by the model's identity) and :meth:`runtimes`' one-model
        # path see how few models there are, not one per trial
        self._models: dict[OverheadModel, OverheadModel] = {}
        # a model object already seen -> its shared one (a model's hash is a Python call; the
        # profiles hand out one object each, so most trials find theirs here by identity)
        self._shared: dict[int, tuple[OverheadModel, OverheadModel]] = {}
        self._factors: dict[tuple[int, float], float] = {}  # (id of a model in _oh, w)
        # the workload prior's methods, looked up once (this runs per trial per decision)
        self._wl_overhead = getattr(self.workload, "overhead", None)
        self._wl_unit_time = getattr(self.workload, "unit_time", None)

    @property
    def lookup(self) -> ProfileLookup:
        """The allocator's :class:`ProfileLookup` (it remembers the trials' signatures)."""
        return self._lookup

    def adopt(self, h1: Mapping[int, float], models: Mapping[int, OverheadModel],
              guessed: Iterable[int] = ()) -> None:
        """Take h_i1 and overhead models worked out elsewhere (a
        :class:`~nbtune.allocators.running_h1.RunningH1` kept across calls), as :meth:`h1`
        would have set them: :meth:`runtime` and :meth:`runtimes` then answer for them."""
        self._h1.update(h1)
        self._oh.update(models)
        self.guessed.update(guessed)

    def _profile(self, tid: int) -> Profile | None:
        """The store's profile of the trial's model (:func:`profile_for`), looked up once."""
        store = self.store
        if store is None:
            return None
        try:
            return self._profiles[tid]
        except KeyError:
            pass
        prof = self._profiles[tid] = self._lookup(store, tid, self.view.trial(tid).config)
        return prof

    def overhead(self, tid: int) -> OverheadModel:
        oh = self._oh.get(tid)
        if oh is None:
            prof = None if self.store is None else self._profile(tid)
            if self.fixed is not None:
                oh = self.fixed
            elif prof is not None:
                oh = prof.overhead
            elif self._wl_overhead is not None:
                oh = self._wl_overhead(self.view.trial(tid).config)
            else:
                oh = OverheadModel()
            oh = self._oh[tid] = self._share(oh)
        return oh

    def _share(self, oh: OverheadModel) -> OverheadModel:
        """The one object of the models equal to ``oh`` in this estimator."""
        hit = self._shared.get(id(oh))
        if hit is not None and hit[0] is oh:
            return hit[1]
        shared = self._models.setdefault(oh, oh)
        self._shared[id(oh)] = (oh, shared)  # keeps ``oh`` alive: its id stays its own
        return shared

    def unit_time(self, tid: int) -> float | None:
        """Seconds per budget unit alone on one GPU, or None if nothing is known."""
        return self._unit(tid, self.view.unit_time(tid))

    def _unit(self, tid: int, seen: tuple[float, float] | None) -> float | None:
        if seen is not None and seen[0] > 0 and seen[1] > 0:
            return seen[0] / self.overhead(tid).factor(seen[1])
        if self.store is not None:
            prof = self._profile(tid)
            if prof is not None and prof.unit_time:
                return prof.unit_time
        if self._wl_unit_time is not None:
            return float(self._wl_unit_time(tid, self.view.trial(tid).config))
        return None

    def remaining(self, tid: int, target: float) -> float:
        """Budget left to ``target``, counting progress since the last report when it is known."""
        view = self.view
        return _left(view.trial(tid), view.unit_time(tid), view.running.get(tid), target,
                     view.time)

    def redo(self, tid: int, w_new: float, old: Placement, new: Placement) -> float:
        """Seconds of steps trained again when resizing ``tid`` from ``old`` to ``new`` restarts it.

        A loop that keeps no checkpoint goes back to step 1 when its process is relaunched;
        the runtime says which resizes relaunch (hint ``"resize_restarts"``: ``"moves"``, a
        placement on other GPUs; ``"any"``; absent: none). Such a resize costs, beyond ε, the
        budget trained so far trained again at ``w_new`` (call :meth:`h1` first).
        """
        rule = self.view.hints.get("resize_restarts")
        if rule is None or (rule == "moves" and {g for g, _ in old} == {g for g, _ in new}):
            return 0.0
        target = self.view.trial(tid).target_budget
        left = self.remaining(tid, target)
        return self.runtime(tid, w_new) * max(target - left, 0.0) / left

    def h1(self, targets: Mapping[int, float],
           records: Sequence[TrialRecord] | None = None) -> dict[int, float]:
        """Remaining runtime at width 1 for each ``{trial_id: target budget}``.

        ``records``: the trials' records in ``targets``' order, when the caller
        fetched them already (``view.trial`` of each).

        The plan runs this over every live trial on every scheduling call, so
        :meth:`unit_time` and :meth:`remaining` (:func:`_left`) are spelled out
        inline (with :meth:`overhead` and :meth:`_profile`), ``max``
        as the comparisons it makes (same result, ties and all); the same arithmetic,
        checked against them by ``tests/allocators/test_scaling_equivalence.py``.
        Each trial's overhead model is looked up once here for :meth:`runtime`.
        """
        view = self.view
        trial_of, seen_of, running, now = view.trial, view.unit_time, view.running, view.time
        ohs, share, factors = self._oh, self._share, self._factors
        # :meth:`overhead`, :meth:`_unit` and :meth:`_profile` spelled out on the trial
        # fetched once; without a profile store they reduce to the fixed model or the
        # workload prior's
        plain = self.store is None
        store, lookup, profiles = self.store, self._lookup, self._profiles
        fixed, wl_overhead, wl_unit = self.fixed, self._wl_overhead, self._wl_unit_time
        if records is None:
            records = list(map(trial_of, targets))
        if not plain:  # the trials' profiles in one pass (the store asked once per model)
            if not profiles:  # (a new estimator: every trial is asked)
                tids = list(targets)
                profiles.update(zip(tids, lookup.many(store, tids, list(map(_CONFIG, records))),
                                    strict=True))
            else:
                ask = [(tid, t.config) for tid, t in zip(targets, records, strict=True)
                       if tid not in profiles]
                if ask:
                    tids = [tid for tid, _ in ask]
                    profiles.update(zip(tids, lookup.many(store, tids, [c for _, c in ask]),
                                        strict=True))
        shared = self._shared
        costs = self.costs  # the fit of the times known, for the unmeasured (None: the mean)
        if costs is not None and not costs.active:
            costs = None
        rows = []  # trials with no seconds per unit known: guessed once the others are known
        known = []
        out = {}
        for (tid, target), t, seen in zip(targets.items(), records, map(seen_of, targets),
                                          strict=True):
            oh = ohs.get(tid)
            prof: Any = _UNSET
            if oh is None:
                if plain:
                    prof = None
                else:
                    prof = profiles.get(tid, _UNSET)
                    if prof is _UNSET:
                        prof = profiles[tid] = lookup(store, tid, t.config)
                oh = (fixed if fixed is not None else
                      prof.overhead if prof is not None else
                      wl_overhead(t.config) if wl_overhead is not None else
                      OverheadModel())
                hit = shared.get(id(oh))  # :meth:`_share`, spelled out
                oh = ohs[tid] = hit[1] if hit is not None and hit[0] is oh else share(oh)
            if seen is not None and seen[0] > 0 and seen[1] > 0:
                key = (id(oh), seen[1])  # :meth:`_factor`, spelled out
                f = factors.get(key)
                if f is None:
                    f = factors[key] = oh.factor(seen[1])
                u = seen[0] / f
                known.append(u)
            else:
                u = None
                if not plain:
                    if prof is _UNSET:
                        prof = profiles.get(tid, _UNSET)
                        if prof is _UNSET:
                            prof = profiles[tid] = lookup(store, tid, t.config)
                    if prof is not None and prof.unit_time:
                        u = prof.unit_time
                if u is None and wl_unit is not None:
                    u = float(wl_unit(tid, t.config))
                if u is not None:
                    known.append(u)
            left = target - t.budget_used
            if seen is not None and t.results and seen[0] > 0:
                pl = running.get(tid)
                if pl is not None:
                    last_t = t.results[-1][0]
                    if last_t >= t.share_since - _TOL and abs(
                            (pl[0][1] if len(pl) == 1 else width(pl)) - seen[1]) < 1e-6:
                        gone = now - last_t
                        left -= (0.0 if gone < 0.0 else gone) / seen[0]  # max(gone, 0.0)
            floor = 1e-6 * (1.0 if target < 1.0 else target)  # max(target, 1.0), its tie rule
            if u is not None:
                out[tid] = (floor if floor > left else left) * u  # max(left, floor)
                if costs is not None:  # every time known now trains the fit of the unmeasured
                    costs.observe(tid, t.config, u)
            else:
                out[tid] = 0.0  # (its place in the order; its value below)
                rows.append((tid, floor if floor > left else left, t))
        if rows:
            fallback = sum(known) / len(known) if known else 1.0
            guessed = self.guessed
            for tid, rem, t in rows:
                guessed.add(tid)
                pred = None if costs is None else costs.predict(t.config)
                out[tid] = rem * (fallback if pred is None else pred)
        self._h1.update(out)
        return out

    def runtime(self, tid: int, w: float) -> float:
        """h_{i,w}: remaining time at width ``w`` (call :meth:`h1` first)."""
        oh = self._oh.get(tid) or self.overhead(tid)
        key = (id(oh), w)  # widths take few values and most trials share one model
        f = self._factors.get(key)
        if f is None:
            f = self._factors[key] = oh.factor(w)
        return self._h1[tid] * f

    def runtimes(self, tids: Sequence[int], ws: np.ndarray) -> np.ndarray:
        """:meth:`runtime` of each trial at the widths in ``ws`` (last axis: ``tids``), the same floats.

        ``ws`` may hold several rows of widths (one per step of a ladder); each
        distinct (model, width) factor is computed once, as :meth:`runtime`
        does, and h_i1 × factor is one IEEE multiplication either way.
        """
        ws = np.asarray(ws, dtype=float)
        if not len(tids):
            return np.empty(ws.shape)
        ohs = list(map(self._oh.get, tids))
        ids = set(map(id, ohs))  # (identity: a model's == is a Python call per trial)
        if id(None) in ids:
            ohs = [oh or self.overhead(t) for t, oh in zip(tids, ohs, strict=True)]
            ids = set(map(id, ohs))
        hs = np.fromiter(map(self._h1.__getitem__, tids), dtype=float, count=len(tids))
        first = ohs[0]
        if len(ids) == 1:  # one model for all (the common case)
            vals = np.unique(ws)  # each width's index among them: a search, not unique's argsort
            fs = np.array([self._factor(first, w) for w in vals.tolist()], dtype=float)
            return hs * fs[np.searchsorted(vals, ws)]
        rows = ws.reshape(-1, len(tids)).tolist()
        fs = np.array([[self._factor(oh, w) for oh, w in zip(ohs, row, strict=True)] for row in rows],
                      dtype=float)
        return hs * fs.reshape(ws.shape)

    def _factor(self, oh: OverheadModel, w: float) -> float:
        """``oh.factor(w)`` through the estimator's cache, as :meth:`runtime` does."""
        key = (id(oh), w)
        f = self._factors.get(key)
        if f is None:
            f = self._factors[key] = oh.factor(w)
        return f


def _left(t: TrialRecord, seen: tuple[float, float] | None, pl: Placement | None, target: float,
          now: float) -> float:
    """Budget ``t`` has left to ``target``, less the progress since its last report if known.

    That progress counts only when the measurement ``seen`` was taken at the
    width the trial holds now and since it got it.
    """
    left = target - t.budget_used
    if seen is not None and pl is not None and t.results and seen[0] > 0:
        last_t = t.results[-1][0]
        if last_t >= t.share_since - _TOL and abs(width(pl) - seen[1]) < 1e-6:
            left -= max(now - last_t, 0.0) / seen[0]
    return max(left, 1e-6 * max(target, 1.0))


class _WithHints:
    """A view with extra hints (a ProfileStore given to the allocator rather than the runtime)."""

    def __init__(self, view: SchedulingView, hints: Mapping[str, Any]) -> None:
        self._view, self._hints = view, hints

    @property
    def hints(self) -> Mapping[str, Any]:
        return self._hints

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)


def with_hints(view: SchedulingView, hints: Mapping[str, Any]) -> SchedulingView:
    """``view`` with ``hints`` in place of its own."""
    return _WithHints(view, hints)  # type: ignore[return-value]
