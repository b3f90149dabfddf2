"""Every message kind of the Dask runtime survives the trip its wire form makes.

Messages cross pipes and queues (pickled), Dask's comms (msgpack) and the fork
server's socket (JSON) as their wire form: :func:`encode` then :func:`decode` must give
the same message back, for every kind with every field set, and with the optional
fields left out.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import typing

import msgpack
import pytest

from nbtune.runtimes.dask import protocol
from nbtune.runtimes.dask.protocol import (
    KINDS,
    Exit,
    Report,
    StopRequest,
    decode,
    encode,
    kind_of,
)

SAMPLES: dict[str, typing.Any] = {
    "float": 2.5, "int": 7, "str": "text", "bool": True,
    "dict[str, Any]": {"loss": 0.25, "note": "ok"}, "dict[str, str]": {"PATH": "/bin"},
    "list[str]": ["math", "json"], "list[float]": [0.5, 1.0],
    "list[float | None]": [0.5, None],
}


def sample(annotation: str) -> typing.Any:
    """A value of the field's type (an optional field's: of the type it is when set)."""
    return SAMPLES[annotation.removesuffix(" | None")]


def full(cls: type[protocol.Message]) -> protocol.Message:
    return cls(**{f.name: sample(str(f.type)) for f in dataclasses.fields(cls)})


def bare(cls: type[protocol.Message]) -> protocol.Message:
    """Only the fields without a default."""
    return cls(**{f.name: sample(str(f.type)) for f in dataclasses.fields(cls)
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING})


@pytest.mark.parametrize("cls", list(KINDS.values()), ids=list(KINDS))
@pytest.mark.parametrize("make", [full, bare])
def test_every_kind_round_trips(cls, make):
    msg = make(cls)
    raw = encode(msg)
    assert raw["k"] == cls.kind and kind_of(raw) is cls
    assert decode(raw) == msg
    assert decode(pickle.loads(pickle.dumps(raw))) == msg  # a pipe or a queue
    assert decode(msgpack.unpackb(msgpack.packb(raw), strict_map_key=False)) == msg  # Dask
    assert decode(json.loads(json.dumps(raw))) == msg  # the fork server's socket


def test_kinds_are_unique_and_all_listed():
    classes = [c for c in vars(protocol).values() if isinstance(c, type)
               and issubclass(c, protocol.Message) and c.kind]
    assert sorted(c.__name__ for c in classes) == sorted(c.__name__ for c in KINDS.values())
    assert len({c.kind for c in classes}) == len(classes)


def test_the_wire_form_is_what_it_was():
    # the wire form is a small dict: None fields left out, a member under "m", the route
    # the worker adds merged in
    raw = encode(Report(step=3.0, metrics={"loss": 0.5}, member=4), trial=4, run=9, rank=0)
    assert raw == {"k": "report", "step": 3.0, "metrics": {"loss": 0.5}, "m": 4,
                   "trial": 4, "run": 9, "rank": 0}
    assert encode(StopRequest(reason="pause")) == {"k": "stop", "reason": "pause"}
    back = decode({**encode(Exit(ok=False, error="boom")), "extra": 1})  # unknown keys ignored
    assert back == Exit(ok=False, error="boom")
    assert kind_of({"k": "nothing"}) is None and kind_of({}) is None
