"""Overhead profiling: the packing limit c, the scaling limit d, α, β and per-trial demand.

Water-filling needs four numbers per model (Fluid §4.2.2): how many trials
can share a GPU before packing stops paying (``c``), how many GPUs one trial
can use before scaling stops paying (``d``), and the overhead exponents ``α``
and ``β`` of h(i,w). Fluid measures them "by trial and error on real
hardware" from a few iterations; RubberBand (§5) scales a trial by powers of
two and interpolates; HyperSack's Sampler (§IV-C1) runs ~10 iterations,
skips the first (pipeline set-up) and keeps the result in a job history so
a rerun of the same model skips profiling. This module turns such
measurements into a :class:`Profile`; the runtime takes the measurements,
and a :class:`ProfileStore` keeps them keyed by :func:`model_signature`.
Pure: no clock, no GPU, no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress, repeat
from operator import and_, is_, itemgetter, not_
from typing import Any, Protocol, runtime_checkable

from nbtune.core.overhead_model import OverheadModel
from nbtune.core.resources import Demand

_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)
_MISS = (object(), object(), None)  # a trial not remembered: fails both identity checks

__all__ = [
    "marginal_benefit", "packing_limit", "fit_alpha", "fit_beta", "scaling_limit",
    "interpolate_latency", "sample_iterations", "model_signature", "Profile",
    "ProfileStore", "InMemoryProfileStore", "profile_from_measurements", "MeasuredLimits",
    "profile_for", "is_profile_store", "store_signature", "ProfileLookup",
]


def _mean(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("no measurements")
    return sum(xs) / len(xs)


def marginal_benefit(times: Mapping[int, Sequence[float]]) -> dict[int, float]:
    """Fluid's O^p = 1 − (p−1)/p · avg(T^p)/avg(T^(p−1)) for every measured p > 1.

    ``times[p]`` holds the per-iteration times of the p trials packed together
    on one GPU (one number per trial, or more); ``times[1]`` is one trial alone.
    O^p is the fraction of time saved by packing a p-th trial: 1/2 when the
    second comes for free, 0 when it is as slow as running one after the other.
    """
    ps = sorted(times)
    if not ps or ps[0] != 1:
        raise ValueError(f"need the time of one trial alone (key 1), got keys {ps}")
    out: dict[int, float] = {}
    for prev, p in zip(ps, ps[1:], strict=False):
        if p != prev + 1:
            raise ValueError(f"packing measurements must be consecutive counts, got {ps}")
        a, b = _mean(times[prev]), _mean(times[p])
        if a <= 0 or b <= 0:
            raise ValueError(f"iteration times must be > 0, got {times[prev]}, {times[p]}")
        out[p] = 1.0 - (p - 1) / p * b / a
    return out


def packing_limit(times: Mapping[int, Sequence[float]], threshold: float = 0.05) -> int:
    """c: the largest p such that packing each of the 2nd … p-th trial still paid (O^q > O_th).

    Stops at the first p whose marginal benefit falls to the threshold (the
    inflection point of §4.2.2): benefits diminish, so later gains are noise.
    """
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold O_th must be in [0, 1), got {threshold}")
    c = 1
    for p, o in sorted(marginal_benefit(times).items()):
        if o <= threshold:
            break
        c = p
    return c


def fit_alpha(times: Mapping[int, Sequence[float]]) -> float:
    """α of h(w) = h1·α^(1/w − 1) from p trials packed at w = 1/p: T^p/T^1 = α^(p−1).

    Least squares in log space through the origin over every measured p > 1;
    α ≥ 1 (packing never makes a trial faster than alone).
    """
    t1 = _mean(times[1]) if 1 in times else None
    if t1 is None or t1 <= 0:
        raise ValueError("need the time of one trial alone (key 1) to fit alpha")
    xs = [(p - 1, math.log(_mean(ts) / t1)) for p, ts in times.items() if p > 1]
    if not xs:
        return 1.0
    slope = sum(x * y for x, y in xs) / sum(x * x for x, _ in xs)
    return max(1.0, math.exp(slope))


def fit_beta(step_times: Mapping[int, float]) -> float:
    """β of h(w) = h1/w·β^(w − 1) from per-iteration times at w workers (same global batch).

    t_w·w/t_1 = β^(w−1); least squares in log space; β ≥ 1.
    """
    if 1 not in step_times or step_times[1] <= 0:
        raise ValueError("need the step time on one worker (key 1) to fit beta")
    t1 = step_times[1]
    xs = [(w - 1, math.log(t * w / t1)) for w, t in step_times.items() if w > 1]
    if not xs:
        return 1.0
    slope = sum(x * y for x, y in xs) / sum(x * x for x, _ in xs)
    return max(1.0, math.exp(slope))


def scaling_limit(step_times: Mapping[int, float], min_gain: float = 0.1) -> int:
    """d: the most workers worth using, from step times at 1, 2, 4, … workers (RubberBand §5).

    Walks up the measured widths and stops at the first step that cut the
    iteration time by less than ``min_gain`` (a fraction): past it, extra GPUs
    mostly buy communication.
    """
    ws = sorted(step_times)
    if not ws or ws[0] != 1:
        raise ValueError(f"need the step time on one worker (key 1), got keys {ws}")
    if not 0 <= min_gain < 1:
        raise ValueError(f"min_gain must be in [0, 1), got {min_gain}")
    d = 1
    for prev, w in zip(ws, ws[1:], strict=False):
        if step_times[w] > step_times[prev] * (1 - min_gain):
            break
        d = w
    return d


def interpolate_latency(step_times: Mapping[int, float]) -> Callable[[float], float]:
    """A function w -> iteration time, interpolated linearly in log-log between measured widths."""
    ws = sorted(step_times)
    if not ws:
        raise ValueError("no step times")
    lx = [math.log(w) for w in ws]
    ly = [math.log(step_times[w]) for w in ws]

    def latency(w: float) -> float:
        x = math.log(w)
        if x <= lx[0]:
            return math.exp(ly[0])  # below the smallest measured width: no extrapolation
        for i in range(1, len(lx)):
            if x <= lx[i]:
                f = (x - lx[i - 1]) / (lx[i] - lx[i - 1])
                return math.exp(ly[i - 1] + f * (ly[i] - ly[i - 1]))
        return math.exp(ly[-1])  # beyond the last measurement: no further gain assumed

    return latency


def sample_iterations(values: Sequence[float], *, skip: int = 1, count: int = 10) -> float:
    """Mean of ``count`` iterations after the first ``skip`` (HyperSack's Sampler).

    The first iteration sets up the pipeline (CUDA context, data loader
    workers) and would bias times up and utilization down.
    """
    kept = list(values)[skip:skip + count]
    if not kept:
        raise ValueError(f"need more than {skip} iteration(s) to sample, got {len(values)}")
    return _mean(kept)


def model_signature(config: Mapping[str, Any], keys: Iterable[str] | None = None) -> str:
    """What identifies a model's resource profile: its architecture and batch size, not its lr.

    HyperSack: model size, optimizer and batch size decide GPU utilization.
    With ``keys`` only those config entries count; without, every entry that
    is not a float (strings, ints, bools: model names, layer counts, batch
    sizes), since continuous hyperparameters (lr, momentum) do not change cost.
    """
    if keys is not None:
        keys = list(keys)
        missing = [k for k in keys if k not in config]
        if missing:
            raise KeyError(f"signature keys {missing} are not in the config {sorted(config)}")
        items = {k: config[k] for k in keys}
    else:
        items = {k: v for k, v in config.items() if not isinstance(v, float)}
    if not items:  # continuous hyperparameters only: what json.dumps writes, without an encoder
        return "{}"
    return json.dumps(items, sort_keys=True, default=repr)


@dataclass(frozen=True)
class Profile:
    """What profiling learnt about one model signature."""

    signature: str
    unit_time: float | None = None  # seconds per budget unit alone on one GPU
    alpha: float = 1.0
    beta: float = 1.0
    c: int = 1
    d: int = 1
    demand: Demand = field(default_factory=Demand)
    #: measured seconds per unit with p trials packed on one GPU (p -> s); c, α come from it
    packing: dict[int, float] = field(default_factory=dict)
    #: measured seconds per unit at w GPUs alone (w -> s); d, β come from it
    scaling: dict[int, float] = field(default_factory=dict)
    #: measured ε: seconds a resize cost a trial (None: never resized)
    resize_cost: float | None = None

    @cached_property
    def overhead(self) -> OverheadModel:
        """The overhead model of α and β, one object per profile (allocators ask per trial)."""
        return OverheadModel(self.alpha, self.beta)

    @property
    def c_measured(self) -> bool:
        """True when c rests on a measurement of packing (p = 1 and some p > 1)."""
        return 1 in self.packing and len(self.packing) > 1

    @property
    def d_measured(self) -> bool:
        """True when d rests on a measurement of scaling (at least w = 1 and 2)."""
        return 1 in self.scaling and len(self.scaling) > 1

    @property
    def d_bounded(self) -> bool:
        """True when scaling measured a width past d that did not pay: d is a limit found,
        not just the widest width tried so far (a trial that only ran at 1 and 2 GPUs
        says nothing against 4)."""
        return self.d_measured and max(self.scaling) > self.d


@runtime_checkable
class ProfileStore(Protocol):
    """Job history: profiles by model signature (in memory here; SQL-backed on the Dask runtime)."""

    def get(self, signature: str) -> Profile | None: ...

    def put(self, profile: Profile) -> None: ...


class InMemoryProfileStore:
    """A dict of profiles: enough for one session, and the reference the SQL store must match."""

    def __init__(self, profiles: Iterable[Profile] = ()) -> None:
        self._profiles: dict[str, Profile] = {p.signature: p for p in profiles}

    def get(self, signature: str) -> Profile | None:
        return self._profiles.get(signature)

    def put(self, profile: Profile) -> None:
        if not isinstance(profile, Profile):
            raise TypeError(f"expected a Profile, got {type(profile).__name__}")
        self._profiles[profile.signature] = profile

    def __contains__(self, signature: object) -> bool:
        return signature in self._profiles

    def __len__(self) -> int:
        return len(self._profiles)


def profile_from_measurements(
    signature: str,
    *,
    iterations_per_unit: float,
    iteration_times: Sequence[float],
    packing: Mapping[int, Sequence[float]] | None = None,
    scaling: Mapping[int, float] | None = None,
    gpu_util: Sequence[float] = (),
    memory_gb: Sequence[float] = (),
    threshold: float = 0.05,
    min_gain: float = 0.1,
) -> Profile:
    """Build a :class:`Profile` from one profiling run.

    ``iteration_times`` are per-iteration seconds alone on one GPU (the first is
    skipped); ``packing[p]`` per-iteration times with p trials on one GPU;
    ``scaling[w]`` step times at w workers; ``gpu_util`` (0–1) and
    ``memory_gb`` samples per iteration give the trial's demand.
    """
    if iterations_per_unit <= 0:
        raise ValueError(f"iterations_per_unit must be > 0, got {iterations_per_unit}")
    it = sample_iterations(iteration_times)
    packing = dict(packing or {})
    packing.setdefault(1, [it])
    scaling = dict(scaling or {})
    scaling.setdefault(1, it)
    util = sample_iterations(gpu_util) if len(gpu_util) > 1 else 1.0
    mem = max(list(memory_gb)[1:] or list(memory_gb) or [0.0])
    return Profile(
        signature=signature,
        unit_time=it * iterations_per_unit,
        alpha=fit_alpha(packing),
        beta=fit_beta(scaling),
        c=packing_limit(packing, threshold),
        d=scaling_limit(scaling, min_gain),
        demand=Demand(compute=min(max(util, 0.0), 1.0), memory_gb=mem),
    )


_STORE_TYPES: dict[type, bool] = {}


def is_profile_store(obj: Any) -> bool:
    """``isinstance(obj, ProfileStore)``, remembered per type (a Protocol check is slow)."""
    t = type(obj)
    hit = _STORE_TYPES.get(t)
    if hit is None:
        hit = _STORE_TYPES[t] = isinstance(obj, ProfileStore)
    return hit


def profile_for(store: Any, config: Mapping[str, Any],
                keys: Iterable[str] | None = None) -> Profile | None:
    """The profile ``store`` holds for ``config``'s model, or None.

    A store that names its own signatures (the runtime's profiler, with the
    signature keys it was given) is asked with its own; any other store with
    :func:`model_signature` of ``keys``. A config without a key: no profile.
    """
    if store is None or not is_profile_store(store):
        return None
    sig = store_signature(store, config, keys)
    return None if sig is None else store.get(sig)


def store_signature(store: ProfileStore, config: Mapping[str, Any],
                    keys: Iterable[str] | None = None) -> str | None:
    """The signature ``store`` files ``config``'s model under (None: a config without a key),
    as :func:`profile_for` asks it."""
    own = getattr(store, "signature", None)
    try:
        return own(config) if callable(own) else model_signature(config, keys)
    except KeyError:
        return None


class ProfileLookup:
    """:func:`profile_for` by trial, for allocators that ask about every live trial on every call.

    A trial's signature is remembered while its config and the store are the
    same objects (PBT may hand a trial a new config); the profile itself is
    asked of the store each time, since a store learns as the run goes.
    """

    def __init__(self, keys: Iterable[str] | None = None) -> None:
        self.keys = None if keys is None else list(keys)
        self._signatures: dict[int, tuple[Any, Mapping[str, Any], str | None]] = {}

    def __call__(self, store: Any, trial_id: int, config: Mapping[str, Any]) -> Profile | None:
        sig = self.signature(store, trial_id, config)
        return None if sig is None else store.get(sig)

    def signature(self, store: Any, trial_id: int, config: Mapping[str, Any]) -> str | None:
        """The signature ``store`` files the trial's model under (None: no store, or no key),
        remembered as :meth:`__call__` remembers it."""
        if store is None:
            return None
        hit = self._signatures.get(trial_id)
        if hit is not None and hit[0] is store and hit[1] is config:
            return hit[2]  # the store was checked when it was remembered
        if not is_profile_store(store):
            return None
        sig = store_signature(store, config, self.keys)
        self._signatures[trial_id] = (store, config, sig)
        return sig

    def signatures(self, store: ProfileStore, trial_ids: Sequence[int],
                   configs: Sequence[Mapping[str, Any]]) -> list[str | None]:
        """Each trial's signature in ``store`` (``configs`` in the same order), remembered as
        :meth:`__call__` remembers it. When every one is remembered for this store and the
        very config object given, the checks are C loops (no Python frame per trial); only
        the others are worked out (in order), as :meth:`signature` works them out."""
        sigs = self._signatures
        hits = list(map(sigs.get, trial_ids, repeat(_MISS)))
        ok = list(map(and_, map(is_, map(_FIRST, hits), repeat(store)),
                      map(is_, map(_SECOND, hits), configs)))
        out = list(map(_THIRD, hits))
        if False in ok:
            for i in compress(range(len(ok)), map(not_, ok)):
                out[i] = self.signature(store, trial_ids[i], configs[i])
        return out

    def many(self, store: Any, trial_ids: Iterable[int],
             configs: Iterable[Mapping[str, Any]]) -> list[Profile | None]:
        """This lookup for each trial (``configs`` in the same order), the store asked once
        per signature: what an allocator reads of every live trial on every call."""
        tids = list(trial_ids)
        if store is None or not is_profile_store(store):
            return [None] * len(tids)
        sigs, keys, get = self._signatures, self.keys, store.get
        got: dict[str, Profile | None] = {}
        out: list[Profile | None] = []
        for tid, config in zip(tids, configs, strict=True):
            hit = sigs.get(tid)
            if hit is not None and hit[0] is store and hit[1] is config:
                sig = hit[2]
            else:
                sig = store_signature(store, config, keys)
                sigs[tid] = (store, config, sig)
            if sig is None:
                out.append(None)
                continue
            try:
                prof = got[sig]
            except KeyError:
                prof = got[sig] = get(sig)
            out.append(prof)
        return out


class MeasuredLimits:
    """c and d as profiling measured them for the trials an allocator is deciding about.

    Reads the view's ``hints["profiles"]`` (the runtime's profiler) for the
    signatures of the pending trials (a running trial's were read while it
    waited; reading every running trial on every call would cost O(trials)
    per event) and answers the smallest measured c and d among them, or None
    where no profile measured packing (c), or no measured width failed to pay (d). Signatures are
    remembered per trial while its config object is unchanged.
    """

    def __init__(self, keys: Iterable[str] | None = None) -> None:
        self.keys = None if keys is None else list(keys)
        self._sig: dict[int, tuple[Mapping[str, Any], str]] = {}

    def _signature(self, tid: int, config: Mapping[str, Any]) -> str | None:
        hit = self._sig.get(tid)
        if hit is not None and hit[0] is config:
            return hit[1]
        try:
            sig = model_signature(config, self.keys)
        except KeyError:
            return None
        self._sig[tid] = (config, sig)
        return sig

    def __call__(self, view: Any) -> tuple[int | None, int | None]:
        store = view.hints.get("profiles")
        if store is None or not is_profile_store(store):
            return None, None
        own = getattr(store, "signature", None)
        if callable(own):
            sigs = {own(s.config) for s in view.pending}
        else:
            sigs = {self._signature(s.trial_id, s.config) for s in view.pending}
        c = d = None
        for sig in sigs - {None}:
            prof = store.get(sig)
            if prof is None:
                continue
            if prof.c_measured:
                c = prof.c if c is None else min(c, prof.c)
            if prof.d_bounded:
                d = prof.d if d is None else min(d, prof.d)
        return c, d
