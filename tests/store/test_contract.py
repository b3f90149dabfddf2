"""The storage contract: every backend stores and reads back the same things the same way."""

from __future__ import annotations

import math

import pytest

from nbtune.allocators.profiling import InMemoryProfileStore, Profile
from nbtune.core import events as ev
from nbtune.core.commands import Finish, Launch
from nbtune.core.resources import ClusterSpec, Demand
from nbtune.core.space import choice, loguniform
from nbtune.store import ExperimentExistsError, SqlProfileStore, UnknownExperimentError
from nbtune.store.serialize import dump_event, dump_space
from nbtune.store.store import COMMAND_PREFIX, EMPTY_BATCH, WriteBatch, command_payload

FIELDS = dict(algorithm="random", algorithm_options={}, allocator="fifo", allocator_options={},
              metric="loss", mode="min", max_budget=9.0, min_budget=1.0, num_trials=4, seed=7,
              max_failures=1, space=dump_space({"lr": loguniform(1e-4, 1e-1),
                                                "opt": choice(["sgd", "adam"])}),
              runtime="sim")


def rows(eid, batch, seq, items):
    out = []
    for i, item in enumerate(items):
        if isinstance(item, ev.Event):
            kind, payload = dump_event(item)
        elif item is None:
            kind, payload = EMPTY_BATCH, {}
        else:
            kind, payload = command_payload(item)
            kind = COMMAND_PREFIX + kind
        out.append({"experiment_id": eid, "seq": seq + i, "batch": batch, "time": 0.0,
                    "kind": kind, "payload": payload})
    return out


def trial_row(eid, tid, state, best=None, **kw):
    return {"experiment_id": eid, "trial_id": tid, "config": {"lr": 0.01, "opt": "adam"},
            "state": state, "best": best, "last": best, "budget_used": kw.get("budget", 0.0),
            "target_budget": 9.0, "gpu_seconds": kw.get("gpu_s", 0.0), "start": kw.get("start"),
            "end": kw.get("end"), "failures": 0, "error": None, "group_id": 0}


def test_a_stored_experiment_reads_back(store, uname):
    name = uname()
    store.create_experiment(name, **FIELDS)
    assert name in store.names()
    row = store.experiment(name)
    assert (row.algorithm, row.metric, row.mode, row.max_budget, row.seed, row.state) == (
        "random", "loss", "min", 9.0, 7, "running")
    assert row.space == FIELDS["space"]
    assert name in list(store.experiments()["name"])


def test_unknown_names_list_the_known_ones(store, uname):
    name = uname("known")
    store.create_experiment(name, **FIELDS)
    with pytest.raises(UnknownExperimentError, match=name) as info:
        store.experiment("nope-" + name)
    assert "known experiments" in str(info.value)


def test_a_name_clash_says_how_to_resume(store, uname):
    name = uname()
    store.create_experiment(name, **FIELDS)
    with pytest.raises(ExperimentExistsError, match=r"nbtune\.resume"):
        store.create_experiment(name, **FIELDS)


def test_free_names_skip_taken_ones(store, uname):
    prefix = uname("auto")
    store.create_experiment(f"{prefix}-1", **FIELDS)
    store.create_experiment(f"{prefix}-2", **FIELDS)
    assert store.free_name(prefix) == f"{prefix}-3"


def test_the_event_log_comes_back_batch_by_batch(store, uname):
    name = uname()
    eid = store.create_experiment(name, **FIELDS)
    cluster = ClusterSpec.homogeneous(2)
    launch = Launch(0, {"lr": 0.01, "opt": "adam", "shape": (2, 3)}, 0.0, 9.0, ((0, 1.0),))
    b0 = [ev.ExperimentStarted(0.0, cluster), launch]
    b1 = [ev.TrialReported(5.0, 0, 1.0, {"loss": math.nan}), ev.TrialStarted(5.0, 1)]
    b2 = [None, Finish()]
    batch = WriteBatch(events=rows(eid, 0, 0, b0) + rows(eid, 1, 2, b1))
    store.write(eid, batch)
    store.write(eid, WriteBatch(events=rows(eid, 2, 4, b2)))
    log = store.event_log(name)
    assert len(log) == 3
    assert log[0][0] == [b0[0]]
    assert log[0][1] == [command_payload(launch)]
    assert [type(e) for e in log[1][0]] == [ev.TrialReported, ev.TrialStarted]
    assert math.isnan(log[1][0][0].metrics["loss"])
    assert log[1][1] == []
    assert log[2] == ([], [command_payload(Finish())])
    assert store.last_seq(name) == (5, 2)


def test_a_batch_commits_whole_or_not_at_all(store, uname):
    name = uname()
    eid = store.create_experiment(name, **FIELDS)
    store.write(eid, WriteBatch(events=rows(eid, 0, 0, [ev.TrialStarted(0.0, 1)])))
    clash = rows(eid, 1, 1, [ev.TrialStarted(1.0, 2)]) + rows(eid, 1, 0, [ev.TrialStarted(1.0, 3)])
    with pytest.raises(Exception, match="(?i)unique|duplicate"):
        store.write(eid, WriteBatch(events=clash, metrics=[
            {"experiment_id": eid, "trial_id": 2, "time": 1.0, "budget": 1.0, "metrics": {}}]))
    assert [e.trial_id for e in store.event_log(name)[0][0]] == [1]
    assert len(store.event_log(name)) == 1
    assert store.learning_curves(name).empty


def test_trial_snapshots_upsert_and_read_as_results(store, uname):
    name = uname()
    eid = store.create_experiment(name, **FIELDS)
    store.write(eid, WriteBatch(trials={0: trial_row(eid, 0, "running", 0.9, budget=1.0),
                                        1: trial_row(eid, 1, "pending")}))
    store.write(eid, WriteBatch(trials={0: trial_row(eid, 0, "completed", 0.5, budget=9.0,
                                                     gpu_s=90.0, start=0.0, end=90.0)},
                                experiment={"state": "done", "time": 90.0}))
    df = store.results(name)
    assert list(df["trial_id"]) == [0, 1]
    assert list(df["state"]) == ["completed", "pending"]
    assert df.loc[0, "loss"] == 0.5 and df.loc[0, "budget_used"] == 9.0
    assert df.loc[0, "config/opt"] == "adam"
    assert store.experiment(name).state == "done"


def test_reports_utilization_and_allocations_read_back(store, uname):
    name = uname()
    eid = store.create_experiment(name, **FIELDS)
    store.write(eid, WriteBatch(
        metrics=[{"experiment_id": eid, "trial_id": 0, "time": float(t), "budget": float(t),
                  "metrics": {"loss": 1.0 / t}} for t in (1, 2, 3)],
        utilization=[{"experiment_id": eid, "time": 1.0, "gpu_id": g, "util": 0.5,
                      "memory_gb": 2.0} for g in (0, 1)],
        allocations={0: {"experiment_id": eid, "idx": 0, "trial_id": 0, "gpu_id": 1,
                         "share": 0.5, "start": 0.0, "end": None}}))
    store.write(eid, WriteBatch(allocations={0: {"experiment_id": eid, "idx": 0, "trial_id": 0,
                                                 "gpu_id": 1, "share": 0.5, "start": 0.0,
                                                 "end": 3.0}}))
    lc = store.learning_curves(name)
    assert list(lc["budget"]) == [1.0, 2.0, 3.0] and lc["loss"].iloc[-1] == pytest.approx(1 / 3)
    assert list(store.utilization(name)["gpu_id"]) == [0, 1]
    assert store.allocations(name).to_dict("records") == [
        {"trial_id": 0, "gpu_id": 1, "share": 0.5, "start": 0.0, "end": 3.0}]


def test_checkpoints_are_references_found_by_budget(store, uname):
    name = uname()
    eid = store.create_experiment(name, **FIELDS)
    store.write(eid, WriteBatch(trials={3: trial_row(eid, 3, "running")}))
    root = store.checkpoint_dir(name)
    assert root.endswith(name)
    assert store.checkpoint(name, 3) is None
    for b in (1.0, 3.0, 9.0):
        store.record_checkpoint(name, 3, b, f"{root}/trial-3/budget-{b:g}.pt")
    assert store.checkpoint(name, 3).endswith("budget-9.pt")
    assert store.checkpoint(name, 3, budget=5.0).endswith("budget-3.pt")
    assert store.checkpoint(name, 3, budget=0.5) is None
    assert store.checkpoint(name, 4) is None


def test_profiles_behave_like_the_in_memory_reference(store):
    sql, ref = SqlProfileStore(store), InMemoryProfileStore()
    sig = f'{{"model": "resnet-{id(store)}"}}'
    assert sql.get(sig) is None and ref.get(sig) is None
    p1 = Profile(sig, unit_time=2.5, alpha=1.2, beta=1.1, c=3, d=2, demand=Demand(0.4, 3.0, 2))
    p2 = Profile(sig, unit_time=2.0, c=4)
    for s in (sql, ref):
        s.put(p1)
        assert s.get(sig) == p1
        s.put(p2)  # a rerun's profile replaces the old one
        assert s.get(sig) == p2
        assert sig in s
    with pytest.raises(TypeError):
        sql.put({"signature": sig})


def test_delete_removes_every_row(store, uname):
    name = uname()
    eid = store.create_experiment(name, **FIELDS)
    store.write(eid, WriteBatch(events=rows(eid, 0, 0, [ev.TrialStarted(0.0, 1)]),
                                trials={1: trial_row(eid, 1, "running")}))
    store.delete(name)
    assert name not in store.names()
    with pytest.raises(UnknownExperimentError):
        store.results(name)
    store.create_experiment(name, **FIELDS)  # the name is free again, with nothing attached
    assert store.event_log(name) == [] and store.results(name).empty
