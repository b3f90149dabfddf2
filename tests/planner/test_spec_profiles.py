"""spec_from reads the stages off the real algorithm objects; profiles validate and interpolate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.algorithms import ASHA, Hyperband, SuccessiveHalving
from nbtune.core.space import loguniform
from nbtune.planner import (
    CLOUDS,
    CloudProfile,
    ExperimentSpec,
    Latency,
    ProfileError,
    ScalingProfile,
    SpecError,
    spec_from,
)

SPACE = {"lr": loguniform(1e-4, 1e-1)}


def test_sha_spec_matches_the_algorithm_rungs():
    algo = SuccessiveHalving(SPACE, metric="loss", num_trials=32, min_budget=1,
                             max_budget=50, eta=3)
    spec = spec_from(algo)
    assert [s.trials for s in spec.stages] == algo.sizes
    assert [s.end for s in spec.stages] == algo.budgets
    assert spec.get_stage(1) == (10, 2.0) and spec.num_stages() == 5
    assert not algo.brackets  # the algorithm itself was not touched


def test_hyperband_spec_is_its_brackets_one_after_another():
    algo = Hyperband(SPACE, metric="loss", min_budget=1, max_budget=27, eta=3)
    spec = spec_from(algo)
    jobs = sorted({s.job for s in spec.stages})
    assert jobs == [0, 1, 2, 3]
    assert sum(s.trials for s in spec.stages if s.start == 0) == algo.cap
    for j in jobs:
        assert [s for s in spec.stages if s.job == j][-1].end == 27


@given(n=st.integers(1, 60), eta=st.sampled_from([2, 3, 4]), top=st.integers(2, 81))
@settings(max_examples=30, deadline=None)
def test_sha_spec_work_equals_trials_times_budget(n, eta, top):
    algo = SuccessiveHalving(SPACE, metric="loss", num_trials=n, min_budget=1,
                             max_budget=top, eta=eta)
    spec = spec_from(algo)
    # every trial of rung i trains from the previous rung's budget to its own
    expect = sum(k * (b - a) for k, a, b in
                 zip(algo.sizes, [0.0, *algo.budgets[:-1]], algo.budgets, strict=True))
    assert spec.total_iterations == pytest.approx(expect)


def test_asynchronous_algorithms_are_refused():
    with pytest.raises(SpecError, match="synchronous rung algorithm"):
        spec_from(ASHA(SPACE, metric="loss", max_budget=9, num_trials=8))
    with pytest.raises(SpecError):
        ExperimentSpec(())


def test_scaling_profile_interpolates_between_measured_points():
    p = ScalingProfile({1: 100.0, 2: 60.0, 4: 40.0})
    assert p.seconds(1) == 100 and p.seconds(4) == 40
    assert p.seconds(3) == pytest.approx(60 - 20 * (1.5849625007 - 1))
    assert p.seconds(64) == 40  # no speed-up assumed past the last measurement
    assert p.speedup(2) == pytest.approx(100 / 60)
    m = ScalingProfile.from_measurements({1: [10, 12], 2: [6, 6]})
    assert m.seconds(1) == 11 and m.cv > 0


@pytest.mark.parametrize("bad", [{}, {2: 1.0}, {1: 0.0}, {0: 1.0, 1: 1.0}])
def test_bad_scaling_profiles_say_what_to_fix(bad):
    with pytest.raises(ProfileError):
        ScalingProfile(bad)


def test_cloud_profiles_validate_and_ship_sources():
    with pytest.raises(ProfileError, match="billing"):
        CloudProfile("x", 1.0, billing="hourly")
    with pytest.raises(ProfileError, match="gpus_per_instance"):
        CloudProfile("x", 1.0, gpus_per_instance=0)
    p3 = CLOUDS["aws-p3.8xlarge"]
    assert p3.gpus_per_instance == 4 and p3.price_per_hour == 12.24
    assert all(c.source and c.date for c in CLOUDS.values())
    assert p3.instances_for(9) == 3
    assert p3.instance_cost(10) == pytest.approx(60 * 12.24 / 3600)  # 60 s minimum


@given(mean=st.floats(0.1, 100), cv=st.floats(0.0, 1.0))
@settings(max_examples=25, deadline=None)
def test_latency_samples_are_positive_with_the_given_mean(mean, cv):
    import numpy as np

    x = Latency(mean, cv).sample(np.random.default_rng(0), 20000)
    assert (x > 0).all()
    assert x.mean() == pytest.approx(mean, rel=0.05)
