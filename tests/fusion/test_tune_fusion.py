"""``nbtune.tune(..., fusion=F)`` on a real LocalCluster: fused units through the engine.

The same training function (nbtune.examples.fusion_digits) and the same seed give the same
trials with fusion on and off; fused, the members of a unit train as one model in one
process and report as ordinary trials, each with its unit's id in ``group``.
"""

from __future__ import annotations

import pytest

from nbtune.core.space import choice, loguniform
from tests.dask_cluster import client  # noqa: F401  (the module's LocalCluster)

pytestmark = pytest.mark.integration

SPACE = {"lr": loguniform(1e-3, 0.3), "momentum": choice([0.0, 0.9]), "seed": choice([0, 1, 2])}


@pytest.fixture(scope="module")
def runtime(client, tmp_path_factory):  # noqa: F811
    """One runtime for the module: its warm trial processes serve every experiment."""
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(client, preload=("torch",), warm_processes=1, dashboard_address=None,
                     checkpoint_dir=tmp_path_factory.mktemp("ckpt"))
    yield rt
    rt.close()


def _tune(rt, fusion, train=None, space=SPACE, max_budget=3, **kw):
    import nbtune
    from nbtune.examples import fusion_digits

    exp = nbtune.tune(train or fusion_digits.train, space, metric="loss", mode="min",
                      max_budget=max_budget, runtime=rt, seed=0, fusion=fusion, validate=True,
                      **kw)
    assert exp.wait(120)
    return exp


@pytest.fixture(scope="module")
def unfused(runtime):
    """The reference: 8 trials of random search, each alone (fusion off)."""
    return _tune(runtime, False, algorithm="random", num_trials=8)


def _configs(df):
    return [{k.split("/", 1)[1]: v for k, v in r.items() if k.startswith("config/")}
            for r in df.to_dict("records")]


def _curves(exp):
    return {(r["trial_id"], r["budget"]): r["loss"]
            for r in exp.learning_curves().to_dict("records")}


def test_fused_and_unfused_random_search_give_the_same_trials(runtime, unfused, tmp_path):
    on = _tune(runtime, 4, algorithm="random", num_trials=8, store=tmp_path / "s.db")
    a, b = unfused.results(), on.results()
    assert list(on.store.results(on.name)["group"]) == list(b["group"])  # stored too
    assert _configs(a) == _configs(b)
    assert (a["state"] == "completed").all() and (b["state"] == "completed").all(), b
    assert (a["last"] - b["last"]).abs().max() <= 1e-4
    assert "group" not in a.columns
    groups = b.groupby("group")["trial_id"].apply(list)
    assert len(groups) >= 2 and all(1 <= len(g) <= 4 for g in groups)  # one unit per worker
    assert sorted(t for g in groups for t in g) == list(range(8))
    # every step each member reported is the step it reports alone
    ca, cb = _curves(unfused), _curves(on)
    assert set(ca) == set(cb) and max(abs(ca[k] - cb[k]) for k in ca) <= 1e-4


def test_asha_stops_members_one_by_one_and_the_others_train_on(runtime, unfused):
    on = _tune(runtime, 8, algorithm="asha", num_trials=8, eta=2, min_budget=1)
    df = on.results()
    assert _configs(unfused.results()) == _configs(df)
    assert df["group"].notna().all()
    stopped = df[df["state"] == "stopped"]
    done = df[df["state"] == "completed"]
    assert len(stopped) >= 1 and len(done) >= 1, df
    assert (stopped["budget_used"] < 3).all() and (done["budget_used"] == 3).all()
    # a unit lost members to ASHA and its other members went on to the end
    mixed = [g for g, rows in df.groupby("group")
             if set(rows["state"]) >= {"stopped", "completed"}]
    assert mixed, df
    # what every member reported is what it reports trained alone (fusion changes nothing)
    ca, cb = _curves(unfused), _curves(on)
    assert cb and all(abs(ca[k] - v) <= 1e-4 for k, v in cb.items())


def test_sha_pauses_members_and_fuses_the_promoted_again_from_their_checkpoints(runtime):
    """SHA pauses every member at its rung (each saves its own checkpoint); the promoted
    ones come back as a new unit, restored slot by slot, and end where uninterrupted
    training of the same configs ends."""
    from nbtune.fusion.fusion_trial import run_group
    from tests.fusion.test_trial import Recorder, ckpt_train

    space = {"seed": choice([0, 1, 2, 3]), "hidden": choice([16]), "lr": choice([0.3, 0.03]),
             "momentum": choice([0.0, 0.9])}
    on = _tune(runtime, 4, train=ckpt_train, space=space, max_budget=4, algorithm="sha",
               min_budget=2, eta=2, num_trials=4)
    df = on.results()
    done = df[df["state"] == "completed"]
    assert 1 <= len(done) < len(df), df
    first = set(df["group"])  # the last unit each trial ran in
    assert all(g is not None for g in first) and len(set(done["group"])) <= len(done)
    assert set(done["group"]).isdisjoint(df[df["state"] != "completed"]["group"])
    for row, cfg in zip(done.to_dict("records"), _configs(done), strict=True):
        rec = Recorder()
        run_group(ckpt_train, [cfg], [rec], budget=4)
        assert rec.rows[-1][1]["loss"] == pytest.approx(row["last"], abs=1e-4)


def test_an_idle_worker_takes_half_of_a_running_unit_from_its_checkpoints(runtime):
    """Elastic split (Hydro §5.3): both members of one unit are stopped, its worker falls
    idle, and the other unit's second member moves there, resuming from its checkpoint;
    every trial that completes ends where uninterrupted training ends."""
    import nbtune
    from nbtune.core.commands import Launch
    from nbtune.fusion.fusion_trial import run_group
    from tests.dask_cluster import wait_for_budget
    from tests.fusion.test_trial import Recorder, ckpt_train

    space = {"seed": choice([0, 1, 2, 3]), "hidden": choice([16]), "lr": choice([0.3, 0.03]),
             "momentum": choice([0.0, 0.9])}
    exp = nbtune.tune(ckpt_train, space, algorithm="random", metric="loss", mode="min",
                      max_budget=20, num_trials=4, runtime=runtime, seed=0, fusion=4,
                      validate=True)
    launches: list[Launch] = []
    exp.engine.subscribe(lambda events, cmds: launches.extend(
        c for c in cmds if isinstance(c, Launch)))
    for tid in range(4):  # every member has a checkpoint to move with
        wait_for_budget(exp.engine, tid, 1, timeout=60)
    stopped = exp.engine.fusion.members[exp.engine.trials[0].unit]
    for tid in stopped:
        exp.stop_trial(tid)
    assert exp.wait(120)
    df = exp.results()
    moved = [c for c in launches if c.unit is not None and c.start_budget > 0]
    assert moved and all(c.trial_id not in stopped for c in moved), launches
    done = df[df["state"] == "completed"]
    assert sorted(done["trial_id"]) == sorted(set(range(4)) - set(stopped)), df
    for row, cfg in zip(done.to_dict("records"), _configs(done), strict=True):
        rec = Recorder()
        run_group(ckpt_train, [cfg], [rec], budget=20)
        assert rec.rows[-1][1]["loss"] == pytest.approx(row["last"], abs=1e-4)


def test_fusion_arguments_are_checked_before_anything_runs():
    import nbtune
    from nbtune.examples.digits import train as plain_train
    from nbtune.examples.fusion_digits import train

    kw = dict(metric="loss", max_budget=3, num_trials=2, runtime="dask")
    for bad in (0, -2, 2.5, "yes"):
        with pytest.raises(ValueError, match="fusion must be"):
            nbtune.tune(train, SPACE, fusion=bad, **kw)
    with pytest.raises(ValueError, match="does not use the fusion trial API"):
        nbtune.tune(plain_train, SPACE, fusion=True, **kw)
    with pytest.raises(ValueError, match="shape_keys"):
        nbtune.tune(train, SPACE, fusion=2, shape_keys=["width"], **kw)


def _launched_units(exp):
    """unit -> its members, for every fused unit the run launched (the engine's record:
    subscribing after ``tune`` returned missed the first launches)."""
    return {u: set(m) for u, m in exp.engine.fusion.members.items()}


CKPT_SPACE = {"seed": choice([0, 1, 2, 3]), "hidden": choice([16]), "lr": choice([0.3, 0.03]),
              "momentum": choice([0.0, 0.9])}


def _fates_per_member(df, units):
    """Some unit's members went different ways: one stopped at a rung, another promoted."""
    state = dict(zip(df["trial_id"], df["state"], strict=True))
    used = dict(zip(df["trial_id"], df["budget_used"], strict=True))
    return [m for m in units.values() if len({(state[t], used[t]) for t in m}) > 1]


def test_hyperband_stops_and_promotes_fused_members_by_its_rungs(runtime):
    """Hyperband (eta 2, budgets 1..4: brackets of 4, 3 and 3 trials) with fused units:
    each bracket keeps exactly as many members per rung as unfused Hyperband does."""
    import nbtune
    from tests.fusion.test_trial import ckpt_train

    exp = nbtune.tune(ckpt_train, CKPT_SPACE, algorithm="hyperband", metric="loss", mode="min",
                      max_budget=4, min_budget=1, eta=2, runtime=runtime, seed=0, fusion=4,
                      validate=True)
    assert exp.wait(180)
    units = _launched_units(exp)
    df = exp.results()
    assert len(df) == 10 and not (df["state"] == "error").any(), df
    done = df[df["state"] == "completed"]
    assert len(done) == 5 and (done["budget_used"] == 4).all(), df  # 1 + 1 + 3
    assert sorted(df[df["state"] == "stopped"]["budget_used"]) == [1, 1, 2, 2, 2], df
    assert any(len(m) > 1 for m in units.values()) and _fates_per_member(df, units), units


def test_bohb_stops_and_promotes_fused_members_one_by_one(runtime):
    import nbtune
    from tests.fusion.test_trial import ckpt_train

    exp = nbtune.tune(ckpt_train, CKPT_SPACE, algorithm="bohb", metric="loss", mode="min",
                      max_budget=4, min_budget=1, eta=2, num_trials=8, runtime=runtime,
                      seed=0, fusion=4, validate=True)
    assert exp.wait(180)
    units = _launched_units(exp)
    df = exp.results()
    assert len(df) == 8 and not (df["state"] == "error").any(), df
    assert set(df["state"]) == {"stopped", "completed"}, df
    assert set(df["budget_used"]) <= {1, 2, 4} and (df[df["state"] == "completed"]
                                                     ["budget_used"] == 4).all(), df
    assert any(len(m) > 1 for m in units.values()) and _fates_per_member(df, units), units
