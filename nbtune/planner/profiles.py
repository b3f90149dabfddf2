"""Modeling variables of RubberBand §4.1: how training scales and what the cloud charges.

:class:`ScalingProfile` gives a trial's latency per iteration as a function of
the workers (GPUs) it holds, interpolated between measured points: real data
parallel training scales sub-linearly (Fig. 4), and that shape is what makes a
smaller, longer-lived allocation cheaper. :class:`CloudProfile` holds the
price and the overheads of one instance type: billing granularity, the
provider's queuing delay before an instance exists (SCALE) and the time to
initialise it (INIT_INSTANCE). Every latency is a :class:`Latency`
distribution so the simulator can sample stragglers.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "CLOUDS",
    "CloudProfile",
    "Latency",
    "ProfileError",
    "ScalingProfile",
    "ZERO_LATENCY",
    "cloud",
]

BILLING_MODES = ("instance", "function")


class ProfileError(ValueError):
    """A scaling or cloud profile is malformed; the message says which value to fix."""


@dataclass(frozen=True)
class Latency:
    """A latency distribution: mean seconds and coefficient of variation (std / mean).

    ``cv=0`` is a constant. Otherwise it is log-normal with that mean and cv:
    positive and right-skewed, the shape of stragglers (a few slow samples,
    none faster than physics allows).
    """

    mean: float
    cv: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean) and self.mean >= 0):
            raise ProfileError(f"a latency mean must be a finite number >= 0, got {self.mean!r}")
        if not (math.isfinite(self.cv) and self.cv >= 0):
            raise ProfileError(f"a latency cv must be a finite number >= 0, got {self.cv!r}")

    def factors(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Multiplicative noise with mean 1 (all ones when ``cv == 0``)."""
        if self.cv == 0 or size == 0:
            return np.ones(size)
        sigma2 = math.log1p(self.cv**2)
        return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), size)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return self.mean * self.factors(rng, size)


#: no wait at all (a default: instances ready at once)
ZERO_LATENCY = Latency(0.0)


def _sharing_factors(name: str, factors: Mapping[int, float]) -> dict[int, float]:
    """``{count: factor}`` checked (counts whole and >= 2, factors > 0), sorted by count:
    how much slower something gets while ``count`` of its kind share one host."""
    for k, f in factors.items():
        if isinstance(k, bool) or int(k) != k or k < 2:
            raise ProfileError(f"{name}: counts must be whole numbers >= 2, got {k!r}")
        if not (math.isfinite(f) and f > 0):
            raise ProfileError(f"{name}: factors must be > 0, got {f!r} at {k}")
    return {int(k): float(f) for k, f in sorted(factors.items())}


def _factor_at(factors: Mapping[int, float], count: int) -> float:
    """The factor at the largest count measured up to ``count`` (no guess beyond what was
    measured); 1.0 below the smallest. ``factors`` sorted by count."""
    factor = 1.0
    for k, f in factors.items():
        if k > count:
            break
        factor = f
    return factor


@dataclass(frozen=True)
class ScalingProfile:
    """Seconds per iteration of one trial on ``w`` workers, from measured points.

    Between measured worker counts the latency is interpolated linearly in
    ``log2(workers)`` (measurements come at 1, 2, 4, ... workers); beyond the
    largest point no further speed-up is assumed, which never flatters a big
    allocation. ``cv`` is the relative spread of a TRAIN task (stragglers),
    ``startup_s`` the fixed cost of (re)starting a trial on new workers
    (loading its checkpoint, connecting peers), ``cold_start_s`` the extra cost
    the *first* trial on a freshly started worker pays once (its processes'
    first touch of the model code, the data and the allocator: several times a
    later launch on the same worker, so charging it to every launch would
    overstate a plan's JCT),
    ``data_gb_per_iteration`` the ingress one trial reads per iteration.
    ``shared`` is for workers that share one host (a local cluster's worker
    processes on one machine's cores and memory): ``{k: factor}``, an
    iteration's seconds while ``k`` workers train at once as a multiple of one
    training alone (``points`` are then the alone figures); empty where
    instances share nothing, RubberBand's setting.
    """

    points: Mapping[int, float]
    cv: float = 0.0
    startup_s: float = 0.0
    data_gb_per_iteration: float = 0.0
    source: str = ""
    cold_start_s: float = 0.0
    shared: Mapping[int, float] = field(default_factory=dict)
    _keys: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.points:
            raise ProfileError("a scaling profile needs at least one (workers, seconds) point")
        for w, s in self.points.items():
            if isinstance(w, bool) or int(w) != w or w < 1:
                raise ProfileError(f"worker counts must be whole numbers >= 1, got {w!r}")
            if not (math.isfinite(s) and s > 0):
                raise ProfileError(f"seconds per iteration must be > 0, got {s!r} at {w} workers")
        if 1 not in self.points:
            raise ProfileError("a scaling profile needs the 1-worker latency (its baseline)")
        Latency(1.0, self.cv)  # validates cv
        if min(self.startup_s, self.cold_start_s, self.data_gb_per_iteration) < 0:
            raise ProfileError("startup_s, cold_start_s and data_gb_per_iteration must be >= 0")
        object.__setattr__(self, "points", {int(w): float(s) for w, s in self.points.items()})
        object.__setattr__(self, "shared", _sharing_factors("shared", self.shared))
        object.__setattr__(self, "_keys", tuple(sorted(self.points)))

    @classmethod
    def from_speedup(
        cls, seconds_at_one: float, speedup: Mapping[int, float], **kwargs: object
    ) -> ScalingProfile:
        """From a throughput-vs-workers table normalised to one worker (as in Fig. 4)."""
        if 1 not in speedup:
            speedup = {1: 1.0, **speedup}
        return cls({w: seconds_at_one / s for w, s in speedup.items()}, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def from_measurements(
        cls, samples: Mapping[int, Sequence[float]], **kwargs: object
    ) -> ScalingProfile:
        """From per-iteration seconds measured at several worker counts.

        The mean at each count becomes a point and the pooled relative spread
        becomes ``cv``, as the paper's profiler fits latency distributions.
        """
        pts, rel = {}, []
        for w, xs in samples.items():
            arr = np.asarray(list(xs), dtype=float)
            if arr.size == 0:
                raise ProfileError(f"no measurement at {w} workers")
            pts[w] = float(arr.mean())
            rel.extend(arr / arr.mean())
        cv = float(np.std(rel)) if len(rel) > 1 else 0.0
        return cls(pts, cv=kwargs.pop("cv", cv), **kwargs)  # type: ignore[arg-type]

    def seconds(self, workers: float) -> float:
        """Mean seconds per iteration of a trial holding ``workers`` workers (>= 1)."""
        if workers < 1:
            raise ProfileError(f"a trial needs at least one worker, got {workers}")
        keys = self._keys
        if workers >= keys[-1]:
            return self.points[keys[-1]]
        i = bisect.bisect_right(keys, workers)
        lo, hi = keys[i - 1], keys[i]
        if lo == workers:
            return self.points[lo]
        t = (math.log2(workers) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        return self.points[lo] + t * (self.points[hi] - self.points[lo])

    def speedup(self, workers: float) -> float:
        return self.points[1] / self.seconds(workers)

    def sharing(self, workers: int) -> float:
        """How many times slower an iteration is while ``workers`` workers of one host train
        at once: :attr:`shared` at the largest count measured up to ``workers`` (no guess
        beyond what was measured), 1.0 alone or where nothing is shared."""
        return _factor_at(self.shared, workers)


@dataclass(frozen=True)
class CloudProfile:
    """One instance type and how it is billed (RubberBand §4.1's cost variables).

    ``billing="instance"``: every instance held is charged per second from the
    moment it is provisioned until released, at least ``min_billed_s`` each
    (60 s on AWS, GCP and Azure), idle or not. ``billing="function"``: only the
    GPU-seconds a task uses are charged, at ``price_per_hour /
    gpus_per_instance`` per GPU (the per-function model of §4.1).
    ``shared_init`` is for instances that share one host (a local cluster's
    workers): ``{k: factor}``, how many times longer an instance takes to become
    ready (``init``, or a held instance's own set-up) while ``k`` of them set up
    at once; empty where instances share nothing, RubberBand's setting.
    """

    name: str
    price_per_hour: float
    gpus_per_instance: int = 1
    billing: str = "instance"
    min_billed_s: float = 60.0
    provision: Latency = Latency(0.0)
    init: Latency = Latency(0.0)
    ingress_price_per_gb: float = 0.0
    source: str = ""
    date: str = ""
    shared_init: Mapping[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.price_per_hour) and self.price_per_hour >= 0):
            raise ProfileError(f"price_per_hour must be >= 0, got {self.price_per_hour!r}")
        g = self.gpus_per_instance
        if isinstance(g, bool) or int(g) != g or g < 1:
            raise ProfileError(f"gpus_per_instance must be a whole number >= 1, got {g!r}")
        if self.billing not in BILLING_MODES:
            raise ProfileError(f"billing must be one of {BILLING_MODES}, got {self.billing!r}")
        if self.min_billed_s < 0 or self.ingress_price_per_gb < 0:
            raise ProfileError("min_billed_s and ingress_price_per_gb must be >= 0")
        for name in ("provision", "init"):
            if not isinstance(getattr(self, name), Latency):
                raise ProfileError(f"{name} must be a Latency, e.g. Latency(15.0)")
        object.__setattr__(self, "shared_init", _sharing_factors("shared_init", self.shared_init))

    @property
    def price_per_gpu_second(self) -> float:
        return self.price_per_hour / self.gpus_per_instance / 3600.0

    def init_sharing(self, instances: int) -> float:
        """How many times longer an instance's set-up takes while ``instances`` set up at
        once on one host: :attr:`shared_init` at the largest count measured up to
        ``instances`` (no guess beyond what was measured), 1.0 otherwise."""
        return _factor_at(self.shared_init, instances)

    def instances_for(self, gpus: int) -> int:
        """Instances needed to hold ``gpus`` GPUs."""
        return -(-int(gpus) // self.gpus_per_instance)

    def instance_cost(self, seconds: float) -> float:
        """What one instance held ``seconds`` costs under per-instance billing."""
        return max(seconds, self.min_billed_s) * self.price_per_hour / 3600.0

    def with_(self, **changes: object) -> CloudProfile:
        """A copy with some fields changed (e.g. the paper's 15 s warm-pool start)."""
        from dataclasses import replace

        return replace(self, **changes)  # type: ignore[arg-type]


_AWS_SRC = (
    "AWS EC2 On-Demand pricing page (aws.amazon.com/ec2/pricing/on-demand), us-east-1, Linux; "
    "list prices unchanged for this family from 2017 through the RubberBand paper (2021), "
    "which quotes p3.2xlarge ~$3/h and p3.16xlarge ~$24/h (§4.1). Not re-checked online "
    "in this session: verify before trusting a bill"
)
_AWS_START = dict(provision=Latency(15.0), init=Latency(15.0))

#: shipped on-demand instance types (name -> profile); start latencies are the
#: paper's warm-pool 15 s + 15 s (§6.3.1): pass ``with_(provision=..., init=...)``
#: for a cold start (minutes)
CLOUDS: dict[str, CloudProfile] = {
    c.name: c
    for c in (
        CloudProfile("aws-p3.2xlarge", 3.06, 1, source=_AWS_SRC, date="2021", **_AWS_START),
        CloudProfile("aws-p3.8xlarge", 12.24, 4, source=_AWS_SRC, date="2021", **_AWS_START),
        CloudProfile("aws-p3.16xlarge", 24.48, 8, source=_AWS_SRC, date="2021", **_AWS_START),
        CloudProfile("aws-g4dn.xlarge", 0.526, 1, source=_AWS_SRC.replace(
            "this family from 2017", "g4dn from its 2019 launch"), date="2021", **_AWS_START),
    )
}


def cloud(name: str | CloudProfile) -> CloudProfile:
    """A shipped profile by name (or a profile passed through)."""
    if isinstance(name, CloudProfile):
        return name
    try:
        return CLOUDS[name]
    except KeyError:
        raise ProfileError(f"unknown cloud profile {name!r}; shipped: {sorted(CLOUDS)}") from None
