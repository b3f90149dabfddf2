"""JSON (de)serializers for what the store keeps: search spaces, events and metric values.

The store writes JSON so that SQLite and PostgreSQL hold the same text and a
person can read it. Three things plain ``json`` gets wrong are handled here:
tuples (a ``choice`` over layer shapes) come back as tuples, non-finite floats
(a diverged loss is ``nan``) survive PostgreSQL's strict JSON, and numpy
scalars become Python numbers. Events are tagged with their class name so the
replay in :mod:`nbtune.store.resume` feeds the engine exactly what it saw.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Mapping
from typing import Any

from nbtune.core import events as ev
from nbtune.core import space as sp
from nbtune.core.resources import GPU, ClusterSpec

__all__ = [
    "import_ref",
    "SerializationError",
    "to_jsonable",
    "from_jsonable",
    "dump_space",
    "load_space",
    "dump_event",
    "load_event",
    "dump_cluster",
    "load_cluster",
    "field_names",
]


class SerializationError(TypeError):
    """A value cannot be stored as JSON; the message names it and says what to do."""


_FLOAT_TAG, _TUPLE_TAG = "__float__", "__tuple__"


def to_jsonable(x: Any) -> Any:
    """A JSON-safe copy of ``x``: tuples and non-finite floats are tagged, numpy unwrapped."""
    t = type(x)  # exact-type fast paths first: this runs for every report the engine sees
    if t is float:
        return x if math.isfinite(x) else {_FLOAT_TAG: repr(x)}
    if t is str or t is int or t is bool or x is None:
        return x
    if t is dict and all(type(k) is str for k in x):
        return {k: to_jsonable(v) for k, v in x.items()}
    if isinstance(x, bool | str):
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return x if math.isfinite(x) else {_FLOAT_TAG: repr(x)}
    if hasattr(x, "item") and callable(x.item) and getattr(x, "shape", None) == ():
        return to_jsonable(x.item())  # a numpy scalar (or 0-d array)
    if isinstance(x, tuple):
        return {_TUPLE_TAG: [to_jsonable(v) for v in x]}
    if isinstance(x, list):
        return [to_jsonable(v) for v in x]
    if isinstance(x, Mapping):
        out = {}
        for k, v in x.items():
            if not isinstance(k, str):
                raise SerializationError(f"dict key {k!r} is not a string; JSON keys must be")
            out[k] = to_jsonable(v)
        return out
    raise SerializationError(
        f"cannot store {type(x).__name__} value {x!r} as JSON; use numbers, strings, "
        "booleans, None, lists, tuples or dicts"
    )


def from_jsonable(x: Any) -> Any:
    """Inverse of :func:`to_jsonable`."""
    if isinstance(x, list):
        return [from_jsonable(v) for v in x]
    if isinstance(x, dict):
        if len(x) == 1 and _FLOAT_TAG in x:
            return float(x[_FLOAT_TAG])
        if len(x) == 1 and _TUPLE_TAG in x:
            return tuple(from_jsonable(v) for v in x[_TUPLE_TAG])
        return {k: from_jsonable(v) for k, v in x.items()}
    return x


# ---------------------------------------------------------------- search spaces
_BOUNDED: dict[str, type[sp.Domain]] = {
    "uniform": sp.Uniform,
    "loguniform": sp.LogUniform,
    "randint": sp.RandInt,
    "quniform": sp.QUniform,
    "qloguniform": sp.QLogUniform,
}
_KIND = {cls: kind for kind, cls in _BOUNDED.items()}


def dump_space(space: Mapping[str, Any]) -> dict[str, Any]:
    """A search space as JSON: each domain becomes ``{"type": ..., its parameters}``."""
    out: dict[str, Any] = {}
    for name, dom in space.items():
        if type(dom) in _KIND:
            out[name] = {"type": _KIND[type(dom)],
                         **{f.name: to_jsonable(getattr(dom, f.name))
                            for f in dataclasses.fields(dom)}}
        elif type(dom) in (sp.Choice, sp.Grid):
            kind = "grid" if isinstance(dom, sp.Grid) else "choice"
            out[name] = {"type": kind, "options": [to_jsonable(o) for o in dom.options]}
        elif isinstance(dom, sp.Domain):
            raise SerializationError(
                f"{name!r}: custom domain {type(dom).__name__} cannot be stored; use the "
                "domains of nbtune.core.space or run without store="
            )
        else:
            out[name] = {"type": "const", "value": to_jsonable(dom)}
    return out


def load_space(data: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`dump_space`."""
    out: dict[str, Any] = {}
    for name, d in data.items():
        kind = d.get("type")
        if kind in _BOUNDED:
            params = {k: v for k, v in d.items() if k != "type"}
            out[name] = _BOUNDED[kind](**params)
        elif kind == "choice":
            out[name] = sp.Choice(tuple(from_jsonable(o) for o in d["options"]))
        elif kind == "grid":
            out[name] = sp.Grid(tuple(from_jsonable(o) for o in d["options"]))
        elif kind == "const":
            out[name] = from_jsonable(d["value"])
        else:
            raise SerializationError(f"{name!r}: stored domain has unknown type {kind!r}")
    return out


# ---------------------------------------------------------------------- events
def dump_cluster(cluster: ClusterSpec) -> dict[str, Any]:
    return {
        "gpus": [dataclasses.asdict(g) for g in cluster.gpus],
        "node_cpus": dict(cluster.node_cpus),
    }


def load_cluster(data: Mapping[str, Any]) -> ClusterSpec:
    return ClusterSpec(tuple(GPU(**g) for g in data["gpus"]), dict(data["node_cpus"]))


_EVENTS: dict[str, type[ev.Event]] = {
    name: getattr(ev, name) for name in ev.__all__ if name != "Event"
}


_FIELDS: dict[type, tuple[str, ...]] = {}


def field_names(obj: Any) -> tuple[str, ...]:
    """A dataclass's field names, cached per class (``dataclasses.fields`` is slow)."""
    cls = type(obj)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def dump_event(e: ev.Event) -> tuple[str, dict[str, Any]]:
    """``(kind, payload)``: the event's class name and its fields as JSON (time included)."""
    cls = type(e)
    if cls is ev.TrialReported:  # the common case, kept short
        return "TrialReported", {"time": float(e.time), "trial_id": e.trial_id,
                                 "budget": float(e.budget), "metrics": to_jsonable(e.metrics)}
    kind = cls.__name__
    if _EVENTS.get(kind) is not cls:
        raise SerializationError(f"event {kind} is not one of nbtune.core.events")
    payload: dict[str, Any] = {}
    for name in field_names(e):
        v = getattr(e, name)
        if isinstance(v, ClusterSpec):
            payload[name] = dump_cluster(v)
        elif cls is ev.UtilizationSampled and name != "time":
            payload[name] = {str(g): float(u) for g, u in v.items()}  # int GPU ids as keys
        else:
            payload[name] = to_jsonable(v)
    return kind, payload


def load_event(kind: str, payload: Mapping[str, Any]) -> ev.Event:
    """Inverse of :func:`dump_event`."""
    try:
        cls = _EVENTS[kind]
    except KeyError:
        raise SerializationError(
            f"stored event kind {kind!r} is unknown; known: {sorted(_EVENTS)}"
        ) from None
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in payload:
            continue
        v = payload[f.name]
        if f.name == "cluster":
            fields[f.name] = load_cluster(v)
        elif cls is ev.UtilizationSampled and f.name != "time":
            fields[f.name] = {int(g): float(u) for g, u in v.items()}
        else:
            fields[f.name] = from_jsonable(v)
    return cls(**fields)


def import_ref(ref: str) -> Any:
    """The object a ``"MODULE:NAME"`` reference names (``NAME`` may be dotted).

    How a stored trainable, algorithm class or ``--trainable`` is found again.
    Raises ValueError for a malformed reference, ImportError or AttributeError
    when it does not resolve.
    """
    module, sep, qual = ref.partition(":")
    if not sep or not module or not qual:
        raise ValueError(f"{ref!r} must be MODULE:NAME (e.g. mypkg.train:train)")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj
