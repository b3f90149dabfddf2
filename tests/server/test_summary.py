"""The JSON the sidebar shows, computed from real stores written by simulated runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nbtune.server.summary import display_location, resolve_location, summarize
from nbtune.store import Store
from nbtune.store.batch import WriteBatch
from tests.server.stores import cpu_workers, finished_run, interrupted_run


def test_resolve_location_follows_tune_store_rules(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    assert resolve_location("", root) == str(root / "nbtune-store" / "nbtune.db")
    assert resolve_location("runs.db", root) == str(root / "runs.db")
    assert resolve_location("elsewhere", root) == str(root / "elsewhere" / "nbtune.db")
    (root / "existing.d").mkdir()
    assert resolve_location("existing.d", root) == str(root / "existing.d" / "nbtune.db")
    assert resolve_location(str(tmp_path / "abs.db"), root) == str(tmp_path / "abs.db")
    url = "postgresql+psycopg://me:secret@db.example/nbtune"
    assert resolve_location(url, root) == url


def test_display_location_hides_the_password() -> None:
    shown = display_location("postgresql+psycopg://me:secret@db.example/nbtune")
    assert "secret" not in shown and "db.example" in shown
    assert display_location("/a/b/nbtune.db") == "/a/b/nbtune.db"


@pytest.mark.parametrize("mode", ["min", "max"])
def test_finished_experiment_matches_the_experiment_object(tmp_path: Path, mode: str) -> None:
    exp = finished_run(tmp_path, f"done-{mode}", mode=mode)
    store = Store(tmp_path / "nbtune.db")
    reply = summarize(store, str(tmp_path / "nbtune.db"))
    assert reply["available"] is True
    (row,) = reply["experiments"]
    assert row["name"] == f"done-{mode}" and row["state"] == "done"
    assert row["algorithm"] == "asha" and row["metric"] == "loss" and row["mode"] == mode
    assert row["trials_total"] == len(exp.results()) == 8
    assert row["trials_running"] == 0 and row["gpus_in_use"] == 0
    assert exp.best is not None
    assert row["best_trial"] == exp.best["trial_id"]
    assert math.isclose(row["best"], exp.best["loss"])
    assert reply["totals"] == {"experiments": 1, "trials_running": 0, "gpus_in_use": 0,
                               "device": "GPU", "in_use_by_device": {"GPU": 0},
                               "in_use": "0 GPUs"}


def test_interrupted_run_counts_running_trials_and_busy_gpus(tmp_path: Path) -> None:
    interrupted_run(tmp_path, "live", gpus=3)
    finished_run(tmp_path, "other", gpus=2)
    reply = summarize(Store(tmp_path / "nbtune.db"), str(tmp_path))
    by_name = {e["name"]: e for e in reply["experiments"]}
    assert list(by_name) == ["live", "other"]  # store order: oldest first
    live = by_name["live"]
    assert live["state"] == "running"
    # ASHA always has a trial to launch here, so every one of the 3 whole GPUs is busy.
    assert live["trials_running"] == 3 and live["gpus_in_use"] == 3
    assert live["trials_total"] > live["trials_running"]
    assert reply["totals"] == {"experiments": 2, "trials_running": 3, "gpus_in_use": 3,
                               "device": "GPU", "in_use_by_device": {"GPU": 3},
                               "in_use": "3 GPUs"}


def test_empty_store_lists_nothing(tmp_path: Path) -> None:
    reply = summarize(Store(tmp_path / "nbtune.db"), str(tmp_path / "nbtune.db"))
    assert reply["experiments"] == [] and reply["totals"]["experiments"] == 0


def test_cache_keeps_only_finished_experiments_and_never_serves_stale(tmp_path: Path) -> None:
    interrupted_run(tmp_path, "live", gpus=3)
    finished_run(tmp_path, "again", seed=1)
    store, cache = Store(tmp_path / "nbtune.db"), {}
    first = summarize(store, "loc", cache)
    # the running one is re-read every poll (all but its device, which a run keeps)
    assert [key[0] for key in cache if key[0] != ("device",)] == ["again"]
    assert summarize(store, "loc", cache) == first
    # the same name re-created with another run: its summary must be the new one
    store.delete("again")
    exp = finished_run(tmp_path, "again", seed=5, num_trials=5)
    rows = {e["name"]: e for e in summarize(store, "loc", cache)["experiments"]}
    assert rows["again"]["trials_total"] == len(exp.results()) == 5
    assert rows["again"]["best_trial"] == exp.best["trial_id"]
    assert [key[1] for key in cache if key[0] == ("device",)] == ["live"]
    assert len(cache) == 2  # the deleted run's entry is gone


def test_a_diverged_trial_is_never_best_and_the_reply_is_strict_json(tmp_path: Path) -> None:
    exp = finished_run(tmp_path, "nan")
    store = Store(tmp_path / "nbtune.db")
    # the best trial and the first one diverge (NaN), as the recorder would write it
    diverged = {exp.best["trial_id"], 0}
    eid = store.experiment_id("nan")
    store.write(eid, WriteBatch(trials={tid: {
        "experiment_id": eid, "trial_id": tid, "config": exp.engine.trials[tid].config,
        "state": exp.engine.trials[tid].state.value, "best": float("nan")} for tid in diverged}))
    reply = summarize(store, "loc")
    json.dumps(reply, allow_nan=False)  # what the browser's JSON.parse accepts
    (row,) = reply["experiments"]
    others = exp.results().query("trial_id not in @diverged")
    assert row["best_trial"] not in diverged
    assert math.isclose(row["best"], others["loss"].min())


def test_trials_are_counted_ended_over_total_as_nbtune_ls_does(tmp_path: Path) -> None:
    """The sidebar once showed running/total ("0/24") where `nbtune ls` shows ended/total."""
    from nbtune.cli.store_commands import _trial_counts
    from nbtune.core.trial import TrialState

    finished_run(tmp_path, "done")
    interrupted_run(tmp_path, "live", gpus=3)
    store = Store(tmp_path / "nbtune.db")
    reply = {e["name"]: e for e in summarize(store, str(tmp_path / "nbtune.db"))["experiments"]}
    for name in ("done", "live"):
        df = store.results(name)
        assert reply[name]["trials"] == _trial_counts(df, store.experiment(name))
        ended = sum(TrialState(s).is_terminal for s in df["state"])
        assert reply[name]["trials_ended"] == ended
        assert reply[name]["trials"].startswith(f"{ended}/")
    assert reply["live"]["trials_running"] == 3 and not reply["live"]["trials"].startswith("3/")


def test_detail_has_every_trial_its_curve_and_the_same_best(tmp_path: Path) -> None:
    from nbtune.server.summary import detail

    exp = finished_run(tmp_path, "done")
    store = Store(tmp_path / "nbtune.db")
    d = detail(store, "done")
    assert [t["trial_id"] for t in d["trials"]] == sorted(exp.engine.trials)
    assert {t["trial_id"]: t["state"] for t in d["trials"]} == {
        t.trial_id: t.state.value for t in exp.engine.trials.values()}
    assert d["summary"]["best_trial"] == exp.best["trial_id"]
    for tid, points in d["curves"].items():
        want = [v for _, b, m in exp.engine.trials[int(tid)].results for v in (b, m["loss"])]
        assert [v for p in points for v in p] == pytest.approx(want)
    with pytest.raises(KeyError):
        detail(store, "nope")


def test_words_fit_the_hardware_gpus_only_on_gpus(tmp_path: Path) -> None:
    """Issue #27: the status bar said "2 GPUs" where CPU workers stand in for GPUs. Each
    summary says what its lanes are; the totals say GPUs only for GPUs."""
    interrupted_run(tmp_path, "on-gpus", gpus=3)
    interrupted_run(tmp_path, "on-cpus", gpus=cpu_workers(2), events=30)
    finished_run(tmp_path, "cpu-done", gpus=cpu_workers(2))
    store = Store(tmp_path / "nbtune.db")
    reply = summarize(store, "loc")
    rows = {e["name"]: e for e in reply["experiments"]}
    assert rows["on-gpus"]["device"] == "GPU" and rows["on-gpus"]["in_use"] == "3 GPUs"
    cpus = rows["on-cpus"]
    assert cpus["device"] == "CPU" and cpus["gpus_in_use"] == 2  # the old field still counts
    assert cpus["in_use"] == "2 CPU workers"
    assert rows["cpu-done"]["device"] == "CPU" and rows["cpu-done"]["in_use"] == "0 CPU workers"
    t = reply["totals"]
    assert t["gpus_in_use"] == 5 and t["device"] == "mixed"
    assert t["in_use_by_device"] == {"GPU": 3, "CPU": 2}
    assert t["in_use"] == "3 GPUs · 2 CPU workers"
    json.dumps(reply, allow_nan=False)
    # a store of CPU workers only never says GPU
    store.delete("on-gpus")
    t = summarize(store, "loc", {})["totals"]
    assert t["device"] == "CPU" and t["in_use"] == "2 CPU workers" and "GPU" not in t["in_use"]
    store.delete("on-cpus")
    assert summarize(store, "loc")["totals"]["in_use"] == "0 CPU workers"
    store.delete("cpu-done")
    empty = summarize(store, "loc")["totals"]  # nothing says what the hardware is: neutral
    assert empty["device"] is None and empty["in_use"] == "0 workers"


def test_a_store_that_cannot_say_its_hardware_reads_neutral(tmp_path: Path) -> None:
    """An experiment whose cluster the store does not hold (created, not started) is
    counted under "workers", never GPUs."""
    from nbtune.server.summary import totals

    store = Store(tmp_path / "nbtune.db")
    finished_run(tmp_path, "done", gpus=cpu_workers(2))
    assert store.cluster("done").cpu_stand_ins
    old = {"trials_running": 1, "gpus_in_use": 1}  # a summary from an older kernel file
    t = totals([old])
    assert t["device"] is None and t["in_use"] == "1 worker"
    assert t["in_use_by_device"] == {"unknown": 1}


def test_a_runs_device_is_read_once_per_run_not_per_poll(tmp_path: Path, monkeypatch) -> None:
    """The device comes from the events (a scan of a long run's log): the server reads it
    once per run, for the list and an open panel alike, and again after a resume."""
    from nbtune.server.summary import detail

    interrupted_run(tmp_path, "live", gpus=cpu_workers(2), events=30)
    store, cache = Store(tmp_path / "nbtune.db"), {}
    reads = []
    real = store.cluster
    monkeypatch.setattr(store, "cluster", lambda name: reads.append(name) or real(name))
    for _ in range(3):
        assert summarize(store, "loc", cache)["experiments"][0]["device"] == "CPU"
        assert detail(store, "live", cache)["summary"]["in_use"] == "2 CPU workers"
    assert reads == ["live"]
    store.mark_restart("live")  # a resume may run on other hardware: read again
    summarize(store, "loc", cache)
    assert reads == ["live", "live"]


def test_detail_has_the_allocation_timeline_of_the_store(tmp_path: Path) -> None:
    """The panel's allocation timeline: every placement the engine made (its ledger's log,
    as the store recorded it) on the lane it was on, the cluster's lanes named as the
    hardware is, and trials packed on one lane stacked, never over each other."""
    from nbtune.kernels.writer import memory_listing
    from nbtune.server.summary import detail

    exp = finished_run(tmp_path, "gpus", gpus=3)
    finished_run(tmp_path, "cpus", gpus=cpu_workers(2))
    interrupted_run(tmp_path, "cut", gpus=2)
    store = Store(tmp_path / "nbtune.db")
    t = detail(store, "gpus")["allocations"]
    log = [(r.trial_id, r.gpu_id, r.share, r.start, r.end) for r in exp.engine.ledger.log
           if r.end > r.start]
    assert [(r["trial_id"], r["lane"], r["share"], r["start"], r["end"])
            for r in t["rects"]] == log
    assert t["device"] == "GPU" and [x["label"] for x in t["lanes"]] == ["GPU 0", "GPU 1",
                                                                        "GPU 2"]
    assert memory_listing(exp)[1]["allocations"] == t  # a kernel's memory says the same
    for rects in ([r for r in t["rects"] if r["lane"] == g] for g in range(3)):
        for i, a in enumerate(rects):
            assert a["offset"] >= 0 and a["offset"] + a["share"] <= 1 + 1e-9
            for b in rects[i + 1:]:
                overlap = a["start"] < b["end"] and b["start"] < a["end"]
                apart = (a["offset"] + a["share"] <= b["offset"] + 1e-9
                         or b["offset"] + b["share"] <= a["offset"] + 1e-9)
                assert not overlap or apart
    cpus = detail(store, "cpus")["allocations"]
    assert cpus["device"] == "CPU" and [x["label"] for x in cpus["lanes"]] == [
        "worker 0", "worker 1"]
    cut = detail(store, "cut")["allocations"]
    held = [r for r in cut["rects"] if r["end"] is None]
    assert held and all(r["start"] < cut["now"] for r in held)  # drawn up to "now"
