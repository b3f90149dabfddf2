"""PBT: the bottom quantile exploits the top quantile, then explores within the space."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.algorithms import PBT, AlgorithmError
from nbtune.algorithms.pbt import perturb
from nbtune.core.space import choice, loguniform, quniform, randint, uniform
from nbtune.core.trial import TrialState

from .driver import Driver, fail_every

SPACE = {
    "lr": loguniform(1e-4, 1e-1),
    "mom": uniform(0.0, 1.0),
    "layers": randint(1, 8),
    "act": choice(["relu", "gelu", "tanh"]),
    "drop": quniform(0.0, 0.5, 0.1),
    "const": "x",
}


class CheckedPBT(PBT):
    """Re-derives, independently, the quantiles behind every exploit made in ``ask``."""

    checked = 0

    def ask(self, max_trials: int):
        score = dict(self.score)
        ckpt = dict(self.checkpoint)
        used = dict(self.used)
        groups = super().ask(max_trials)
        for spec in (s for g in groups for s in g.specs):
            if spec.restore_from is None:
                continue
            pop = sorted(
                (t for t in score if self.ended.get(t) != TrialState.ERROR),
                key=lambda t: (score[t], t),
            )
            k = min(math.ceil(len(pop) * self.quantile_fraction), len(pop) // 2)
            assert spec.restore_from in pop[:k], "donor not in the top quantile"
            assert spec.trial_id in pop[-k:], "exploiting trial not in the bottom quantile"
            assert ckpt[spec.restore_from] >= ckpt[spec.trial_id]
            assert used[spec.restore_from] < self.max_budget
            assert spec.budget == self.next_boundary(used[spec.restore_from])
            score[spec.trial_id] = score[spec.restore_from]
            used[spec.trial_id] = used[spec.restore_from]
            self.checked += 1
        return groups


@pytest.mark.parametrize("slots", [1, 3, 16])
def test_exploit_copies_from_top_quantile(slots: int) -> None:
    algo = CheckedPBT(
        SPACE, metric="loss", max_budget=20, num_trials=8, perturbation_interval=2, seed=0
    )
    res = Driver(algo, slots=slots, fail=fail_every(8)).run()
    assert algo.checked > 0 and algo.checked == len(algo.exploits)
    for e in algo.exploits:
        donor, cfg = e["donor_config"], e["config"]
        assert cfg["const"] == "x"
        assert all(SPACE[k].contains(cfg[k]) for k in ("lr", "mom", "layers", "act", "drop"))
        for k in ("lr", "mom"):  # continuous: x0.8 or x1.2 of the donor's value, clipped
            lo, hi = SPACE[k].low, SPACE[k].high
            assert any(
                math.isclose(cfg[k], min(max(donor[k] * f, lo), hi), rel_tol=1e-9)
                for f in (0.8, 1.2)
            )
    restores = [s for s in res.specs if s[3] is not None]
    assert len(restores) == len(algo.exploits)


def test_explore_perturbs_donor_values() -> None:
    algo = PBT(
        {"a": uniform(0, 100)}, metric="loss", max_budget=10, num_trials=4,
        perturbation_interval=1, seed=0,
    )

    def metric(space, cfg, budget):
        return cfg["a"]

    Driver(algo, slots=4, metric_fn=metric).run()
    assert algo.exploits
    for e in algo.exploits:
        a, d = e["config"]["a"], e["donor_config"]["a"]
        assert math.isclose(a, min(d * 0.8, 100)) or math.isclose(a, min(d * 1.2, 100))
        assert e["donor"] in e["top"] and e["trial_id"] in e["bottom"]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_perturb_stays_in_space(seed: int) -> None:
    rng = np.random.default_rng(seed)
    from nbtune.core.space import sample_config

    cfg = sample_config(SPACE, rng)
    out = perturb(cfg, SPACE, rng, resample_probability=0.5)
    for k, dom in SPACE.items():
        if k == "const":
            assert out[k] == "x"
        else:
            assert dom.contains(out[k]), (k, out[k])
    assert isinstance(out["layers"], int)
    ratio = out["mom"] / cfg["mom"] if cfg["mom"] else None
    if ratio is not None and 0 < out["mom"] < 1:
        assert math.isclose(ratio, 0.8) or math.isclose(ratio, 1.2)


def test_perturb_keys_and_categorical_probability() -> None:
    rng = np.random.default_rng(0)
    cfg = {"lr": 0.01, "mom": 0.5, "layers": 4, "act": "relu", "drop": 0.2, "const": "x"}
    assert perturb(cfg, SPACE, rng, keys=["act"], resample_probability=0.0) == cfg
    moved = [perturb(cfg, SPACE, rng, resample_probability=0.25)["act"] for _ in range(900)]
    # resampled with p=0.25, and a resample hits another value 2/3 of the time
    frac_changed = np.mean([m != "relu" for m in moved])
    assert 0.1 < frac_changed < 0.25


def test_population_lockstep_and_completion() -> None:
    algo = PBT(SPACE, metric="loss", max_budget=9, num_trials=5, seed=0)
    assert algo.interval == 1.0
    res = Driver(algo, slots=2).run()
    assert all(t.used == 9 for t in res.trials.values())
    assert all(s == TrialState.COMPLETED for s in res.states.values())


def test_bad_options() -> None:
    with pytest.raises(AlgorithmError, match="num_trials"):
        PBT(SPACE, metric="loss", max_budget=9)
    with pytest.raises(AlgorithmError):
        PBT(SPACE, metric="loss", max_budget=9, num_trials=4, quantile_fraction=0.7)
    with pytest.raises(AlgorithmError):
        PBT(SPACE, metric="loss", max_budget=9, num_trials=4, hyperparam_mutations=["nope"])
