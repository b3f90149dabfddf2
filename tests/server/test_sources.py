"""The sidebar's sources: the configured store, the stores of live kernels, kernels' memory-only
experiments; written by real simulated runs and real kernel files (this test process and a
child process stand in for the kernels: what the reader checks is that their pids live)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbtune.kernels import writer
from nbtune.kernels.files import kernel_file, process_started, write_json
from nbtune.server.sources import Sources, kernel_id, store_id
from tests.kernels.test_kernel_files import sim_run
from tests.server.stores import finished_run


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process acts as a notebook kernel writing its file into ``runtime``."""
    rt = tmp_path / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(rt))
    monkeypatch.setenv(writer.ENV, "1")
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "root" / "nb" / "tuning.ipynb"))
    monkeypatch.setattr(writer, "_current", None)
    yield rt
    if writer._current is not None:
        writer._current.close()


def by_source(reply: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in reply["experiments"]:
        out.setdefault(e["source"], []).append(e["name"])
    return out


def test_union_of_configured_store_kernel_stores_and_memory(kernel_env: Path,
                                                            tmp_path: Path) -> None:
    root = tmp_path / "root"
    configured = str(root / "nbtune-store" / "nbtune.db")
    finished_run(root / "nbtune-store", "same", seed=1)
    elsewhere = tmp_path / "elsewhere"  # a temporary folder outside the server's root
    stored = sim_run(elsewhere, name="same", seed=2)
    memory = sim_run(name="in-memory", seed=3)
    sources = Sources(configured, kernel_env, root)
    reply = sources.read()
    other = str((elsewhere / "nbtune.db").resolve())
    assert [s["id"] for s in reply["sources"]] == [
        store_id(configured), store_id(other), kernel_id(os.getpid())]
    assert reply["sources"][1]["used_by"] == ["nb/tuning.ipynb"]  # relative to the root
    assert reply["sources"][0]["shown"] == "nbtune-store/nbtune.db"
    assert reply["sources"][1]["shown"] == other  # outside the root: whole
    assert reply["sources"][2]["notebook"] == "nb/tuning.ipynb"
    assert by_source(reply) == {store_id(configured): ["same"], store_id(other): ["same"],
                                kernel_id(os.getpid()): ["in-memory"]}
    assert reply["store"] == configured and reply["available"] is True
    assert reply["totals"]["experiments"] == 3
    mem = next(e for e in reply["experiments"] if e["name"] == "in-memory")
    assert mem["best_trial"] == memory.best["trial_id"] and mem["trials"] == "12/12"

    # the same name in two stores: the source picks one
    one = sources.read_one("same", store_id(other))
    assert one["summary"]["best_trial"] == stored.best["trial_id"]
    assert one["summary"]["source"] == store_id(other)
    first = sources.read_one("same")  # no source: the configured store first
    assert first["summary"]["source"] == store_id(configured)
    detail = sources.read_one("in-memory", kernel_id(os.getpid()))
    assert [t["trial_id"] for t in detail["trials"]] == list(memory.results()["trial_id"])
    assert detail["curves"] and detail["summary"]["source"] == kernel_id(os.getpid())
    assert sources.read_one("in-memory", store_id(other)) is None
    assert sources.read_one("nowhere") is None

    # the kernel ends: its memory-only experiment goes, its store stays while it exists
    writer._current.close()
    reply = sources.read()
    assert by_source(reply) == {store_id(configured): ["same"], store_id(other): ["same"]}
    assert reply["sources"][1]["used_by"] == []
    (elsewhere / "nbtune.db").unlink()
    reply = sources.read()
    assert [s["id"] for s in reply["sources"]] == [store_id(configured)]
    assert not (elsewhere / "nbtune.db").exists()  # never re-created by the reader


def test_a_dead_kernels_file_and_experiments_go(tmp_path: Path) -> None:
    rt = tmp_path / "runtime"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        summary = {"name": "m", "state": "running", "algorithm": "asha", "metric": "loss",
                   "mode": "min", "trials_total": 1, "trials_running": 1, "trials_ended": 0,
                   "trials": "0/1", "best": None, "best_trial": None, "gpus_in_use": 1,
                   "updated": None}
        started = None
        while started is None:
            started = process_started(child.pid)
        write_json(kernel_file(child.pid, rt), {
            "version": 1, "pid": child.pid, "started": started, "notebook": None,
            "stores": [], "experiments": [{"name": "m", "store": None, "summary": summary,
                                           "detail": {"summary": summary, "trials": [],
                                                      "curves": {}}}]})
        sources = Sources(str(tmp_path / "none.db"), rt, tmp_path)
        reply = sources.read()
        assert by_source(reply) == {kernel_id(child.pid): ["m"]}
        assert reply["sources"][1]["location"] == f"kernel {child.pid}"
        # a kernel file of an older nbtune says nothing of its hardware: "worker", never GPU
        assert reply["totals"] == {"experiments": 1, "trials_running": 1, "gpus_in_use": 1,
                                   "device": None, "in_use_by_device": {"unknown": 1},
                                   "in_use": "1 worker"}
    finally:
        child.kill()
        child.wait()
    assert by_source(sources.read()) == {}
    assert not kernel_file(child.pid, rt).exists()
    assert not (tmp_path / "none.db").exists()


def test_a_database_password_is_never_shown(tmp_path: Path) -> None:
    """A kernel's store on a database server: the server must open it (the kernel file, mode
    0600, has the URL whole) but shows it, and any error opening it, without the password."""
    rt = tmp_path / "runtime"
    url = "postgresql+psycopg://me:s3cret-pw@127.0.0.1:1/nbtune"
    write_json(kernel_file(os.getpid(), rt), {
        "version": 1, "pid": os.getpid(), "started": process_started(os.getpid()),
        "notebook": None, "stores": [url], "experiments": [{"name": "db", "store": url,
                                                            "summary": None, "detail": None}]})
    reply = Sources(str(tmp_path / "none.db"), rt, tmp_path).read()
    source = next(s for s in reply["sources"] if not s["configured"])
    assert source["error"]  # nothing listens there: an error on its own line
    assert "s3cret-pw" not in json.dumps(reply) and "127.0.0.1" in source["location"]
