"""Search-space domains: sampling stays in the domain, encodings round-trip, bad input fails early."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.core.space import (
    Grid,
    SearchSpaceError,
    choice,
    grid,
    grid_configs,
    loguniform,
    qloguniform,
    quniform,
    randint,
    sample_config,
    uniform,
    validate_space,
)

bounds = st.tuples(
    st.floats(-1e3, 1e3, allow_nan=False), st.floats(1e-3, 1e3, allow_nan=False)
).map(lambda t: (t[0], t[0] + t[1]))
pos_bounds = st.tuples(st.floats(1e-6, 1e2), st.floats(1.01, 1e3)).map(lambda t: (t[0], t[0] * t[1]))


@given(bounds, st.integers(0, 2**32 - 1))
def test_uniform_samples_inside_and_round_trips(b, seed):
    d = uniform(*b)
    x = d.sample(np.random.default_rng(seed))
    assert d.contains(x)
    assert d.from_unit(d.to_unit(x)) == pytest.approx(x, rel=1e-9, abs=1e-9)


@given(pos_bounds, st.integers(0, 2**32 - 1))
def test_loguniform_samples_inside_and_round_trips(b, seed):
    d = loguniform(*b)
    x = d.sample(np.random.default_rng(seed))
    assert d.contains(x)
    assert d.from_unit(d.to_unit(x)) == pytest.approx(x, rel=1e-9)


@given(st.integers(-100, 100), st.integers(1, 50), st.integers(0, 2**32 - 1))
def test_randint_is_half_open_and_round_trips(lo, span, seed):
    d = randint(lo, lo + span)
    x = d.sample(np.random.default_rng(seed))
    assert lo <= x < lo + span and d.from_unit(d.to_unit(x)) == x


@given(st.floats(0.01, 10), st.integers(0, 2**32 - 1))
def test_quantized_domains_stay_on_their_grid(q, seed):
    rng = np.random.default_rng(seed)
    d = quniform(0, 100, q)
    x = d.sample(rng)
    assert d.contains(x) and abs(x / q - round(x / q)) < 1e-6
    dl = qloguniform(1, 1000, q)
    y = dl.sample(rng)
    assert dl.contains(y) and abs(y / q - round(y / q)) < 1e-6


def test_choice_round_trip_and_membership():
    d = choice(["sgd", "adam", "lamb"])
    for o in d.options:
        assert d.from_unit(d.to_unit(o)) == o
    assert d.contains("adam") and not d.contains("rmsprop")
    with pytest.raises(SearchSpaceError, match="rmsprop"):
        d.index("rmsprop")


def test_sampling_is_deterministic_under_a_seed():
    space = {"lr": loguniform(1e-4, 1), "bs": choice([32, 64]), "layers": randint(1, 5), "k": 3}
    a = [sample_config(space, np.random.default_rng(5)) for _ in range(3)]
    b = [sample_config(space, np.random.default_rng(5)) for _ in range(3)]
    assert a == b and all(c["k"] == 3 for c in a)


def test_grid_configs_enumerate_the_cartesian_product():
    space = {"a": grid([1, 2]), "b": grid(["x", "y", "z"]), "c": uniform(0, 1)}
    cfgs = list(grid_configs(space))
    assert len(cfgs) == 6 and {(c["a"], c["b"]) for c in cfgs} == {
        (a, b) for a in (1, 2) for b in "xyz"}
    assert all(c["c"] == space["c"] for c in cfgs)
    assert isinstance(space["a"], Grid)


@pytest.mark.parametrize(
    "space, message",
    [
        ([1, 2], "must be a dict"),
        ({}, "empty"),
        ({"lr": [0.1, 0.01]}, "wrap it as choice"),
        ({"1lr": uniform(0, 1)}, "valid identifier"),
    ],
)
def test_bad_spaces_fail_early_with_what_to_fix(space, message):
    with pytest.raises(SearchSpaceError, match=message):
        validate_space(space)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: uniform(1, 1), "low must be < high"),
        (lambda: loguniform(0, 1), "low must be > 0"),
        (lambda: randint(0.5, 3), "integers"),
        (lambda: quniform(0, 1, 0), "q must be > 0"),
        (lambda: choice([]), "at least one"),
        (lambda: choice("abc"), "list of options"),
        (lambda: uniform(0, float("inf")), "finite"),
    ],
)
def test_bad_domains_fail_early(make, message):
    with pytest.raises(SearchSpaceError, match=message):
        make()
