"""``nbtune.resume`` of a ``tune(scaling=S)`` run: the store keeps ``scaling`` and the
eager-transfer fraction, and the resumed run wraps its algorithm and allocator again,
so it trains the same target trials as a run that never crashed."""

from __future__ import annotations

import pandas as pd
import pytest

import nbtune
from nbtune import SimRuntime, SyntheticWorkload, uniform
from nbtune.allocators import HeterogeneityAware
from nbtune.runtimes.sim import SimulationError
from nbtune.store import Store
from nbtune.surrogate import TARGET_ID_BASE, EagerTransfer

WL = SyntheticWorkload({"lr": uniform(0, 1), "m": uniform(0, 1)}, unit_time=5.0)
KW = {"algorithm": "random", "metric": "loss", "max_budget": 4, "num_trials": 10, "seed": 3,
      "scaling": 4, "eager_fraction": 0.3}
STABLE = ["trial_id", "config/lr", "config/m", "config/scaling", "state", "loss",
          "budget_used", "role"]
#: a crash at 8 events comes before any target trial, at 60 after two have started


@pytest.mark.parametrize("n", [8, 60])
def test_a_resumed_scaling_run_ends_as_if_nothing_happened(tmp_path, n):
    st = Store(tmp_path / "s.db")
    with pytest.raises(SimulationError):
        nbtune.tune(WL, store=st, name="hydro", runtime=SimRuntime(cluster=2, max_events=n),
                    **KW)
    assert st.experiment("hydro").run_options == {"scaling": 4, "eager_fraction": 0.3}
    before = st.results("hydro")
    exp = nbtune.resume("hydro", store=st, trainable=WL, runtime=SimRuntime(cluster=2),
                        validate=True)
    assert exp.done
    algo = exp.engine.algorithm
    assert isinstance(algo, EagerTransfer) and (algo.scaling, algo.fraction) == (4.0, 0.3)
    assert isinstance(exp.engine.allocator, HeterogeneityAware)
    full = nbtune.tune(WL, runtime=SimRuntime(cluster=2), **KW)
    got, want = exp.results(), full.results()
    # the surrogates are the uninterrupted run's (random search's draws do not depend on time)
    sur = got["trial_id"] < TARGET_ID_BASE
    pd.testing.assert_frame_equal(got[sur][STABLE], want[want["trial_id"] < TARGET_ID_BASE][STABLE])
    assert set(got[sur]["role"]) == {"surrogate"}
    # when a target starts depends on the timing, which a restart changes; but the final best
    # configuration was trained on the target, as in the uninterrupted run, and the targets
    # recorded before the crash are kept
    targets = got[~sur].sort_values("trial_id")
    assert set(targets["role"]) == {"target"} and (targets["config/scaling"] == 1).all()
    final = targets[targets["state"] == "completed"].iloc[-1]
    best = want[want["trial_id"] >= TARGET_ID_BASE].query("state == 'completed'").iloc[-1]
    assert (final["config/lr"], final["config/m"]) == (best["config/lr"], best["config/m"])
    assert final["budget_used"] == KW["max_budget"]
    assert set(before[before["trial_id"] >= TARGET_ID_BASE]["trial_id"]) <= set(targets["trial_id"])
    pd.testing.assert_frame_equal(st.results("hydro")[STABLE], got[STABLE], check_dtype=False)


def test_a_plain_run_stores_no_run_options(tmp_path):
    st = Store(tmp_path / "p.db")
    nbtune.tune(WL, store=st, name="plain", runtime=SimRuntime(cluster=2),
                **{k: v for k, v in KW.items() if k not in ("scaling", "eager_fraction")})
    assert st.experiment("plain").run_options is None
    assert "role" not in st.results("plain").columns
