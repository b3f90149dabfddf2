"""The options of a run, grouped: what is searched, on which resources, how it runs, where
it is recorded.

``tune`` takes each option as a keyword and, beside them, these frozen dataclasses
(``tune(train, space, options=SearchOptions(metric="loss", max_budget=27))``), so that a
notebook can keep a set of options in one value and the docs can show them together. Their
defaults are ``tune``'s (its signature reads them from here), so there is one set.
:class:`RunSpec` is a run's full description, the groups merged with the keywords, which
:func:`nbtune.build.build_run` assembles.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SearchOptions", "ResourceOptions", "ExecutionOptions", "RecordingOptions",
           "RunSpec", "OPTION_GROUPS", "OptionGroup", "merge_options"]


@dataclass(frozen=True)
class SearchOptions:
    """What is searched: the algorithm and its budgets, the metric, the seed, surrogates.

    ``metric`` and ``max_budget`` have no default: a run needs both, from here or as keywords.
    ``algorithm_options`` go to the algorithm (``{"eta": 3}``), as ``tune``'s extra keywords do.
    ``scaling``/``eager_fraction`` tune Hydro surrogates (docs/surrogates.rst).
    """

    algorithm: Any = "asha"
    metric: str | None = None
    mode: str = "min"
    max_budget: float | None = None
    min_budget: float = 1.0
    num_trials: int | None = None
    seed: int | None = None
    algorithm_options: Mapping[str, Any] = field(default_factory=dict)
    scaling: float | None = None
    eager_fraction: float = 0.5


@dataclass(frozen=True)
class ResourceOptions:
    """Which GPUs a trial gets: the allocator (a registry name or an instance) and its
    options, Ray Tune's fixed ``gpus_per_trial``, or a RubberBand ``plan``."""

    allocator: Any = "auto"
    allocator_options: Mapping[str, Any] | None = None
    gpus_per_trial: float | None = None
    plan: Any = None


@dataclass(frozen=True)
class ExecutionOptions:
    """How trials run: the runtime, the per-trial time limit, where a trial runs on its
    worker (``execution``), fusion, retries of a failing trial and the engine's checks."""

    runtime: Any = "auto"
    trial_timeout: float | None = None
    execution: str | None = None
    fusion: bool | int = False
    shape_keys: Sequence[str] | None = None
    max_failures: int = 0
    validate: bool = False


@dataclass(frozen=True)
class RecordingOptions:
    """Where the run is kept: the ``store`` (None: in memory) and the experiment's ``name``."""

    store: Any = None
    name: str | None = None


#: the option groups, in the order ``RunSpec`` holds them
OPTION_GROUPS: tuple[type, ...] = (SearchOptions, ResourceOptions, ExecutionOptions,
                                   RecordingOptions)
#: any one of them (what ``tune(options=...)`` takes, alone or in a sequence)
OptionGroup = SearchOptions | ResourceOptions | ExecutionOptions | RecordingOptions


@dataclass(frozen=True)
class RunSpec:
    """A run's full description: the trainable, the space and the four option groups."""

    trainable: Any
    space: Mapping[str, Any] | None
    search: SearchOptions = SearchOptions()
    resources: ResourceOptions = ResourceOptions()
    execution: ExecutionOptions = ExecutionOptions()
    recording: RecordingOptions = RecordingOptions()


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # a value whose == is not a truth value (an array)
        return False


def merge_options(trainable: Any, space: Mapping[str, Any] | None,
                  objects: OptionGroup | Iterable[OptionGroup] | None,
                  keywords: Mapping[str, Any], extra: Mapping[str, Any]) -> RunSpec:
    """The :class:`RunSpec` of ``tune``'s keywords (``extra``: its algorithm options) and
    option ``objects`` (one, a sequence of them, or None).

    A setting is given when it differs from its default; one given both as a keyword and
    in an option object, or two objects of one group, is a TypeError, as Python's own
    "got multiple values" is.
    """
    given = _objects(objects)
    groups = []
    for cls in OPTION_GROUPS:
        obj, default = given.get(cls), cls()
        values = {}
        for f in dataclasses.fields(cls):
            if f.name == "algorithm_options":
                values[f.name] = _merge_algorithm_options(extra, obj)
                continue
            kw = keywords[f.name]
            if obj is None or _same(getattr(obj, f.name), getattr(default, f.name)):
                values[f.name] = kw
            elif _same(kw, getattr(default, f.name)):
                values[f.name] = getattr(obj, f.name)
            else:
                raise TypeError(f"tune() got {f.name} twice: as the keyword {f.name}={kw!r} "
                                f"and in {cls.__name__}({f.name}={getattr(obj, f.name)!r}); "
                                "give it once")
        groups.append(cls(**values))
    return RunSpec(trainable, space, *groups)


def _objects(objects: Any) -> dict[type, Any]:
    if objects is None:
        return {}
    seq: Iterable[Any] = (objects,) if isinstance(objects, OPTION_GROUPS) else objects
    try:
        items = list(seq)
    except TypeError:
        items = [objects]
    out: dict[type, Any] = {}
    for obj in items:
        if not isinstance(obj, OPTION_GROUPS):
            raise TypeError(f"options= takes SearchOptions, ResourceOptions, ExecutionOptions "
                            f"or RecordingOptions (one, or a sequence of them), got {obj!r}")
        group = next(c for c in OPTION_GROUPS if isinstance(obj, c))
        if group in out:
            raise TypeError(f"options= got two {group.__name__}; merge them into one")
        out[group] = obj
    return out


def _merge_algorithm_options(extra: Mapping[str, Any], obj: Any) -> dict[str, Any]:
    inner = dict(obj.algorithm_options) if obj is not None else {}
    twice = sorted(set(inner) & set(extra))
    if twice:
        raise TypeError(f"tune() got the algorithm option(s) {twice} twice: as keywords and in "
                        "SearchOptions(algorithm_options=...); give each once")
    return {**inner, **extra}
