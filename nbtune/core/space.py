"""Search-space domains, seeded sampling and validation.

A search space is a plain ``dict`` mapping a hyperparameter name to a
:class:`Domain` or to a constant. Domains know how to sample themselves from a
``numpy.random.Generator`` (so a seed fixes every draw) and how to map a value
to and from the unit interval, which model-based algorithms (BOHB, the Optuna
adapter) need to fit densities over mixed spaces.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbtune.core.tolerance import EPS

__all__ = [
    "Domain",
    "Uniform",
    "LogUniform",
    "RandInt",
    "QUniform",
    "QLogUniform",
    "Choice",
    "Grid",
    "SearchSpaceError",
    "uniform",
    "loguniform",
    "randint",
    "quniform",
    "qloguniform",
    "choice",
    "grid",
    "validate_space",
    "sample_config",
    "grid_configs",
    "has_grid",
    "numeric_domains",
]


class SearchSpaceError(ValueError):
    """Raised early, with the offending name, when a search space is malformed."""


class Domain:
    """Base class of every hyperparameter domain."""

    def sample(self, rng: np.random.Generator) -> Any:
        raise NotImplementedError

    def to_unit(self, value: Any) -> float:
        """Map a value into [0, 1] (used by density models)."""
        raise NotImplementedError

    def from_unit(self, u: float) -> Any:
        """Inverse of :meth:`to_unit`, clipping ``u`` into [0, 1]."""
        raise NotImplementedError

    def contains(self, value: Any) -> bool:
        raise NotImplementedError

    @property
    def is_categorical(self) -> bool:
        return False


def _check_bounds(kind: str, low: float, high: float) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise SearchSpaceError(f"{kind}: bounds must be finite numbers, got low={low}, high={high}")
    if not low < high:
        raise SearchSpaceError(f"{kind}: low must be < high, got low={low}, high={high}")


@dataclass(frozen=True)
class Uniform(Domain):
    low: float
    high: float

    def __post_init__(self) -> None:
        _check_bounds("uniform", self.low, self.high)

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.low, self.high))

    def to_unit(self, value: Any) -> float:
        return (float(value) - self.low) / (self.high - self.low)

    def from_unit(self, u: float) -> float:
        u = min(max(float(u), 0.0), 1.0)
        return self.low + u * (self.high - self.low)

    def contains(self, value: Any) -> bool:
        return self.low <= float(value) <= self.high


@dataclass(frozen=True)
class LogUniform(Domain):
    low: float
    high: float

    def __post_init__(self) -> None:
        _check_bounds("loguniform", self.low, self.high)
        if self.low <= 0:
            raise SearchSpaceError(f"loguniform: low must be > 0, got {self.low}")

    def sample(self, rng: np.random.Generator) -> float:
        return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))

    def to_unit(self, value: Any) -> float:
        lo, hi = math.log(self.low), math.log(self.high)
        return (math.log(float(value)) - lo) / (hi - lo)

    def from_unit(self, u: float) -> float:
        u = min(max(float(u), 0.0), 1.0)
        lo, hi = math.log(self.low), math.log(self.high)
        return float(min(max(math.exp(lo + u * (hi - lo)), self.low), self.high))

    def contains(self, value: Any) -> bool:
        return self.low * (1 - 1e-12) <= float(value) <= self.high * (1 + 1e-12)


@dataclass(frozen=True)
class RandInt(Domain):
    """Integers in ``[low, high)`` like ``numpy``/Ray Tune's ``randint``."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if int(self.low) != self.low or int(self.high) != self.high:
            raise SearchSpaceError(f"randint: bounds must be integers, got {self.low}, {self.high}")
        _check_bounds("randint", self.low, self.high)

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.low, self.high))

    def to_unit(self, value: Any) -> float:
        return (int(value) - self.low + 0.5) / (self.high - self.low)

    def from_unit(self, u: float) -> int:
        u = min(max(float(u), 0.0), 1.0)
        return int(min(self.low + math.floor(u * (self.high - self.low)), self.high - 1))

    def contains(self, value: Any) -> bool:
        return int(value) == value and self.low <= value < self.high


def _quantize(x: float, q: float, low: float, high: float) -> float:
    v = round(x / q) * q
    # keep the grid inside the bounds
    while v < low - 1e-12:
        v += q
    while v > high + 1e-12:
        v -= q
    return float(round(v, 12))


@dataclass(frozen=True)
class QUniform(Domain):
    low: float
    high: float
    q: float

    def __post_init__(self) -> None:
        _check_bounds("quniform", self.low, self.high)
        if not self.q > 0:
            raise SearchSpaceError(f"quniform: q must be > 0, got {self.q}")

    def sample(self, rng: np.random.Generator) -> float:
        return _quantize(rng.uniform(self.low, self.high), self.q, self.low, self.high)

    def to_unit(self, value: Any) -> float:
        return (float(value) - self.low) / (self.high - self.low)

    def from_unit(self, u: float) -> float:
        u = min(max(float(u), 0.0), 1.0)
        return _quantize(self.low + u * (self.high - self.low), self.q, self.low, self.high)

    def contains(self, value: Any) -> bool:
        return self.low - EPS <= float(value) <= self.high + EPS


@dataclass(frozen=True)
class QLogUniform(Domain):
    low: float
    high: float
    q: float

    def __post_init__(self) -> None:
        _check_bounds("qloguniform", self.low, self.high)
        if self.low <= 0:
            raise SearchSpaceError(f"qloguniform: low must be > 0, got {self.low}")
        if not self.q > 0:
            raise SearchSpaceError(f"qloguniform: q must be > 0, got {self.q}")

    def sample(self, rng: np.random.Generator) -> float:
        x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return _quantize(x, self.q, self.low, self.high)

    def to_unit(self, value: Any) -> float:
        lo, hi = math.log(self.low), math.log(self.high)
        return (math.log(max(float(value), self.low)) - lo) / (hi - lo)

    def from_unit(self, u: float) -> float:
        u = min(max(float(u), 0.0), 1.0)
        lo, hi = math.log(self.low), math.log(self.high)
        return _quantize(math.exp(lo + u * (hi - lo)), self.q, self.low, self.high)

    def contains(self, value: Any) -> bool:
        return self.low - EPS <= float(value) <= self.high + EPS


@dataclass(frozen=True)
class Choice(Domain):
    """One of a finite list of values, drawn uniformly."""

    options: tuple[Any, ...]

    def __post_init__(self) -> None:
        if len(self.options) == 0:
            raise SearchSpaceError("choice: needs at least one option")

    def sample(self, rng: np.random.Generator) -> Any:
        return self.options[int(rng.integers(len(self.options)))]

    def index(self, value: Any) -> int:
        for i, o in enumerate(self.options):
            if o == value:
                return i
        raise SearchSpaceError(f"choice: {value!r} is not one of {list(self.options)!r}")

    def to_unit(self, value: Any) -> float:
        return (self.index(value) + 0.5) / len(self.options)

    def from_unit(self, u: float) -> Any:
        u = min(max(float(u), 0.0), 1.0)
        return self.options[min(int(u * len(self.options)), len(self.options) - 1)]

    def contains(self, value: Any) -> bool:
        return any(o == value for o in self.options)

    @property
    def is_categorical(self) -> bool:
        return True


@dataclass(frozen=True)
class Grid(Choice):
    """Values that grid search enumerates exhaustively (random search samples them)."""

    def __post_init__(self) -> None:
        if len(self.options) == 0:
            raise SearchSpaceError("grid: needs at least one value")


def uniform(low: float, high: float) -> Uniform:
    return Uniform(float(low), float(high))


def loguniform(low: float, high: float) -> LogUniform:
    return LogUniform(float(low), float(high))


def randint(low: int, high: int) -> RandInt:
    return RandInt(low, high)


def quniform(low: float, high: float, q: float) -> QUniform:
    return QUniform(float(low), float(high), float(q))


def qloguniform(low: float, high: float, q: float) -> QLogUniform:
    return QLogUniform(float(low), float(high), float(q))


def choice(options: Sequence[Any]) -> Choice:
    if isinstance(options, str | bytes) or not isinstance(options, Sequence):
        raise SearchSpaceError(f"choice: expects a list of options, got {options!r}")
    return Choice(tuple(options))


def grid(values: Sequence[Any]) -> Grid:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise SearchSpaceError(f"grid: expects a list of values, got {values!r}")
    return Grid(tuple(values))


def validate_space(space: Any) -> dict[str, Any]:
    """Check a search space and return it as a dict; raise :class:`SearchSpaceError`."""
    if not isinstance(space, Mapping):
        raise SearchSpaceError(
            f"search space must be a dict of name -> domain, got {type(space).__name__}"
        )
    if not space:
        raise SearchSpaceError("search space is empty: give at least one hyperparameter")
    out: dict[str, Any] = {}
    for name, dom in space.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise SearchSpaceError(f"hyperparameter name {name!r} must be a valid identifier")
        if isinstance(dom, type) and issubclass(dom, Domain):
            raise SearchSpaceError(f"{name!r}: pass a domain instance, e.g. uniform(0, 1)")
        if isinstance(dom, list | set):
            raise SearchSpaceError(
                f"{name!r}: a bare list is ambiguous; wrap it as choice([...]) or grid([...])"
            )
        out[name] = dom
    return out


def has_grid(space: Mapping[str, Any]) -> bool:
    return any(isinstance(d, Grid) for d in space.values())


def numeric_domains(space: Mapping[str, Any]) -> dict[str, Domain]:
    """The non-constant domains, in a stable order (for vector encodings)."""
    return {k: v for k, v in space.items() if isinstance(v, Domain)}


def sample_config(space: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """Draw one configuration; constants are copied as they are."""
    return {k: (v.sample(rng) if isinstance(v, Domain) else v) for k, v in space.items()}


def grid_configs(space: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Cartesian product of every :class:`Grid` domain, in declaration order.

    Non-grid domains are left as domains for the caller to sample.
    """
    names = [k for k, v in space.items() if isinstance(v, Grid)]
    values = [space[k].options for k in names]
    for combo in itertools.product(*values):
        cfg = dict(space)
        cfg.update(zip(names, combo, strict=True))
        yield cfg
