"""What a trial needs and how long it will run, as far as an allocator can tell from the view.

Knapsack placement needs each trial's :class:`~nbtune.core.resources.Demand`
(HyperSack §III: compute share, GPU memory, CPU cores) and, for the
"decreasing" policies, its expected runtime. Both come from whatever the
engine was given as hints, in a fixed order so the answer is predictable:

demand:  the job history, ``hints["profiles"]`` (the runtime's profiler, a
         :class:`~nbtune.allocators.profiling.ProfileStore`, looked up by
         the config's model signature, as HyperSack's Sampler does) →
         ``hints["workload"].demand`` (a prior only unit tests of the
         policies give; ``nbtune.tune`` passes none) → :data:`DEFAULT_DEMAND`.
runtime: remaining budget × seconds per unit: the unit time the engine
         measured → the profile's → ``hints["workload"].unit_time`` → 1
         (then trials are ordered by remaining budget).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nbtune.allocators.allocator_protocol import SchedulingView
from nbtune.allocators.profiling import Profile, ProfileLookup, is_profile_store, profile_for
from nbtune.core.resources import Demand

__all__ = ["DEFAULT_DEMAND", "DemandLookup", "trial_demand", "expected_runtime",
           "expected_runtimes"]

#: a trial nothing is known about takes a whole GPU, no memory or CPU accounted
DEFAULT_DEMAND = Demand()


def _profile(view: SchedulingView, config: Mapping[str, Any]) -> Profile | None:
    return profile_for(view.hints.get("profiles"), config)


def _valid(d: Any, trial_id: int, source: str) -> Demand:
    if not isinstance(d, Demand):
        raise TypeError(
            f"{source} gave {type(d).__name__} for trial {trial_id}, expected "
            "nbtune.core.resources.Demand or None"
        )
    if not d.compute > 0 or d.memory_gb < 0 or d.cpus < 0:
        raise ValueError(
            f"trial {trial_id}: demand {d} from {source} is invalid: compute must be > 0, "
            "memory_gb and cpus >= 0"
        )
    return d


def trial_demand(
    view: SchedulingView,
    trial_id: int,
    config: Mapping[str, Any],
    default: Demand = DEFAULT_DEMAND,
    lookup: ProfileLookup | None = None,
) -> Demand:
    """The trial's demand from the first hint source that knows it, else ``default``
    (``lookup`` finds the profile by trial, remembering its signature)."""
    prof = (_profile(view, config) if lookup is None
            else lookup(view.hints.get("profiles"), trial_id, config))
    if prof is not None:
        return _valid(prof.demand, trial_id, 'hints["profiles"]')
    model = view.hints.get("workload")
    if model is not None:
        d = model.demand(trial_id, config)
        if d is not None:
            return _valid(d, trial_id, 'hints["workload"].demand')
    return default


def expected_runtime(view: SchedulingView, trial_id: int, config: Mapping[str, Any],
                     budget: float) -> float:
    """Seconds the trial needs to reach ``budget`` from where it is (for ordering only).

    The measured unit time was taken at whatever width the trial last ran;
    the "decreasing" policies only compare trials, so it is used as is.
    """
    return expected_runtimes(view, [(trial_id, config, budget)])[0]


def expected_runtimes(
    view: SchedulingView, trials: Iterable[tuple[int, Mapping[str, Any], float]]
) -> list[float]:
    """:func:`expected_runtime` for many ``(trial_id, config, budget)`` at once (hints read once)."""
    store = view.hints.get("profiles")
    if store is not None and not is_profile_store(store):
        store = None
    model = view.hints.get("workload")
    out = []
    for tid, config, budget in trials:
        remaining = max(budget - view.trial(tid).budget_used, 0.0)
        measured = view.unit_time(tid)
        if measured is not None:
            out.append(remaining * measured[0])
            continue
        if store is not None:
            prof = profile_for(store, config)
            if prof is not None and prof.unit_time:
                out.append(remaining * prof.unit_time)
                continue
        if model is not None:
            out.append(remaining * float(model.unit_time(tid, config)))
        else:
            out.append(remaining)
    return out


class DemandLookup:
    """:func:`trial_demand` with a memory, for allocators that ask on every engine event.

    A simulator's workload model is deterministic, so a trial's demand is
    remembered for as long as its config is unchanged (PBT may hand a trial
    new hyperparameters) and the model is the same object. A profile store
    can learn at any time, so with ``hints["profiles"]`` every call asks again
    (remembering only the trial's signature).
    """

    def __init__(self, default: Demand = DEFAULT_DEMAND) -> None:
        self.default = default
        self._model: Any = None
        self._memo: dict[int, tuple[Mapping[str, Any], Demand]] = {}
        self._profiles = ProfileLookup()
        self._checked: dict[int, tuple[Profile, Demand]] = {}  # id(profile) -> its demand

    def __call__(self, view: SchedulingView, trial_id: int, config: Mapping[str, Any]) -> Demand:
        hints = view.hints
        if hints.get("profiles") is not None:
            return trial_demand(view, trial_id, config, self.default, self._profiles)
        model = hints.get("workload")
        if model is not self._model:
            self._model, self._memo = model, {}
        hit = self._memo.get(trial_id)
        if hit is not None and (hit[0] is config or hit[0] == config):
            return hit[1]
        d = trial_demand(view, trial_id, config, self.default)
        self._memo[trial_id] = (config, d)
        return d

    def many(self, view: SchedulingView, trial_ids: Iterable[int]) -> list[Demand]:
        """``[self(view, tid, view.trial(tid).config) for tid in trial_ids]``, the hints read once."""
        trial = view.trial
        hints = view.hints
        if hints.get("profiles") is not None:
            return self._from_profiles(view, trial_ids)
        model = hints.get("workload")
        if model is not self._model:
            self._model, self._memo = model, {}
        memo = self._memo
        out = []
        for tid in trial_ids:
            config = trial(tid).config
            hit = memo.get(tid)
            if hit is not None and (hit[0] is config or hit[0] == config):
                out.append(hit[1])
                continue
            d = trial_demand(view, tid, config, self.default)
            memo[tid] = (config, d)
            out.append(d)
        return out

    def _from_profiles(self, view: SchedulingView, trial_ids: Iterable[int]) -> list[Demand]:
        """:meth:`many` with a profile store: :func:`trial_demand` per trial, each profile's
        demand validated once (a profile is immutable; the store hands out new ones)."""
        trial, store, lookup, default = view.trial, view.hints["profiles"], self._profiles, \
            self.default
        checked = self._checked
        out = []
        tids = list(trial_ids)
        configs = [trial(tid).config for tid in tids]
        sigs = lookup.signatures(store, tids, configs) if is_profile_store(store) else None
        if sigs is not None:  # the store asked once per model, as many() asks it
            demands: dict[str, Demand] = {}
            for sig in dict.fromkeys(sigs):  # (in the order many() would ask)
                if sig is None:
                    break
                prof = store.get(sig)
                if prof is None:
                    break
                hit = checked.get(id(prof))
                if hit is None or hit[0] is not prof:
                    hit = checked[id(prof)] = (
                        prof, _valid(prof.demand, tids[sigs.index(sig)], 'hints["profiles"]'))
                demands[sig] = hit[1]
            else:  # every trial's model has a profile: its demand
                return list(map(demands.__getitem__, sigs))
        for tid, config, prof in zip(tids, configs, lookup.many(store, tids, configs),
                                     strict=True):
            if prof is not None:
                hit = checked.get(id(prof))
                if hit is not None and hit[0] is prof:
                    out.append(hit[1])
                    continue
                d = _valid(prof.demand, tid, 'hints["profiles"]')
                checked[id(prof)] = (prof, d)
                out.append(d)
            else:
                out.append(trial_demand(view, tid, config, default, lookup))
        return out
