"""JSON round trips of what the store keeps: values, search spaces, events and clusters."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.core import events as ev
from nbtune.core import space as sp
from nbtune.core.resources import GPU, ClusterSpec
from nbtune.store.serialize import (
    SerializationError,
    dump_event,
    dump_space,
    from_jsonable,
    load_event,
    load_space,
    to_jsonable,
)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8),
                    st.floats(allow_nan=False))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=12,
)


def through_json(x):
    return json.loads(json.dumps(x, allow_nan=False))


@given(values)
def test_values_survive_strict_json(x):
    assert from_jsonable(through_json(to_jsonable(x))) == x


@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_survive_strict_json(x):
    back = from_jsonable(through_json(to_jsonable({"loss": x})))["loss"]
    assert (math.isnan(back) and math.isnan(x)) or back == x


def test_numpy_scalars_become_python_numbers():
    out = to_jsonable({"a": np.float32(0.5), "b": np.int64(3), "c": np.bool_(True)})
    assert out == {"a": 0.5, "b": 3, "c": True}
    assert type(out["b"]) is int


def test_unstorable_values_are_named():
    with pytest.raises(SerializationError, match="object"):
        to_jsonable({"f": object()})
    with pytest.raises(SerializationError, match="key 1"):
        to_jsonable({1: 2})


bounds = st.tuples(st.floats(1e-3, 10), st.floats(0.1, 100)).map(lambda t: (t[0], t[0] + t[1]))
domains = st.one_of(
    bounds.map(lambda b: sp.uniform(*b)),
    bounds.map(lambda b: sp.loguniform(*b)),
    bounds.map(lambda b: sp.quniform(b[0], b[1], 0.5)),
    bounds.map(lambda b: sp.qloguniform(b[0], b[1], 0.25)),
    st.tuples(st.integers(-50, 50), st.integers(1, 50)).map(lambda t: sp.randint(t[0], t[0] + t[1])),
    st.lists(scalars, min_size=1, max_size=4).map(sp.choice),
    st.lists(st.tuples(st.integers(1, 512), st.integers(1, 512)), min_size=1, max_size=3)
    .map(sp.grid),
    scalars,  # constants
)


@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), domains,
                       min_size=1, max_size=5))
def test_spaces_round_trip_with_their_types(space):
    back = load_space(through_json(dump_space(space)))
    assert back == space
    assert [type(v) for v in back.values()] == [type(v) for v in space.values()]


def test_custom_domains_are_refused_with_advice():
    class Odd(sp.Domain):
        pass

    with pytest.raises(SerializationError, match="custom domain Odd"):
        dump_space({"x": Odd()})


CLUSTER = ClusterSpec.of([GPU(0, "n0", "a100", 1.5, 40.0), GPU(3, "n1")], {"n0": 8, "n1": 4})
EVENTS = [
    ev.ExperimentStarted(0.0, CLUSTER),
    ev.ResourcesChanged(1.5, ClusterSpec.homogeneous(2)),
    ev.TrialStarted(2.0, 7),
    ev.TrialReported(3.0, 7, 2.0, {"loss": math.inf, "shape": (3, 4), "acc": 0.5}),
    ev.TrialFailed(4.0, 7, "boom", out_of_memory=True, worker_lost=False),
    ev.TrialStopRequested(5.0, 2),
    ev.ExperimentStopRequested(6.0),
    ev.ExperimentPauseRequested(6.5),
    ev.ExperimentResumeRequested(7.0),
    ev.ConcurrencyChanged(8.0, 3),
    ev.ConcurrencyChanged(8.5, None),
    ev.UtilizationSampled(9.0, {0: 0.25, 3: 1.0}, {0: 3.5}),
]


@pytest.mark.parametrize("e", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_kind_round_trips(e):
    kind, payload = dump_event(e)
    assert load_event(kind, through_json(payload)) == e


def test_unknown_event_kinds_list_the_known_ones():
    with pytest.raises(SerializationError, match="TrialReported"):
        load_event("TrialExploded", {"time": 0.0})
