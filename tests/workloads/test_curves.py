"""The learning curve's value is its formula: the per-report path spells out hashed_normal."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from nbtune.workloads.curves import PowerLawCurve, hashed_normal


def formula(c: PowerLawCurve, trial_id: int, q: float, kappa: float, budget: float) -> float:
    base = q + (c.l0 - q) * (1.0 + budget / c.tau) ** (-kappa)
    if c.noise <= 0:
        return base
    z = hashed_normal(c.seed, trial_id, int(budget * 1000 + 0.5))
    return base + c.noise * z / math.sqrt(1.0 + budget)


@given(
    seed=st.integers(-(2**40), 2**40),
    trial_id=st.integers(-5, 10**7),
    q=st.floats(0.0, 2.0),
    kappa=st.floats(0.1, 3.0),
    budget=st.floats(0.0, 1e4),
    noise=st.sampled_from([0.0, 0.01, 0.5]),
    tau=st.floats(0.5, 100.0),
)
def test_value_is_the_formula_bit_for_bit(seed: int, trial_id: int, q: float, kappa: float,
                                          budget: float, noise: float, tau: float) -> None:
    c = PowerLawCurve(noise=noise, seed=seed, tau=tau)
    assert c.value(trial_id, q, kappa, budget) == formula(c, trial_id, q, kappa, budget)
