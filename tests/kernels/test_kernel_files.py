"""A kernel's file of experiments: written from real simulated runs, read back, cleaned up.

The writer runs where a Jupyter kernel would (``NBTUNE_KERNEL_FILE=1`` stands
for the kernel check); the reader is what the server extension calls.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import nbtune
from nbtune.algorithms import make_algorithm
from nbtune.build import build_experiment
from nbtune.core.resources import ClusterSpec
from nbtune.core.trial import ended_of_total
from nbtune.engine.engine import Engine
from nbtune.kernels import files, writer
from nbtune.kernels.files import kernel_file, read_kernel_files, write_json
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload

SPACE = {"lr": nbtune.loguniform(1e-4, 1e-1)}


def sim_run(store: Path | None = None, name: str | None = None, seed: int = 1,
            num_trials: int = 12, cluster: int | ClusterSpec = 2) -> nbtune.Experiment:
    return nbtune.tune(SyntheticWorkload(SPACE), algorithm="asha", metric="loss",
                       max_budget=9, num_trials=num_trials, store=store, name=name, seed=seed,
                       runtime=SimRuntime(cluster=cluster))


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kernel's environment: its own runtime dir, the kernel file on, no file left over."""
    rt = tmp_path / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(rt))
    monkeypatch.setenv(writer.ENV, "1")
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "work" / "tuning.ipynb"))
    monkeypatch.setattr(writer, "_current", None)
    yield rt
    if writer._current is not None:
        writer._current.close()


def the_file(rt: Path) -> dict:
    return json.loads(kernel_file(os.getpid(), rt).read_text())


def test_a_memory_only_run_is_listed_with_what_the_experiment_shows(runtime_dir: Path) -> None:
    exp = sim_run()
    path = kernel_file(os.getpid(), runtime_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # private, like a connection file
    data = the_file(runtime_dir)
    assert data["pid"] == os.getpid() and data["notebook"].endswith("tuning.ipynb")
    assert data["stores"] == []
    (entry,) = data["experiments"]
    assert entry["name"] == exp.name and entry["store"] is None
    s, df = entry["summary"], exp.results()
    assert s["state"] == "done" == exp.state
    assert s["trials"] == ended_of_total(df["state"], 12, True) == "12/12"
    assert s["best_trial"] == exp.best["trial_id"] and s["best"] == exp.best["loss"]
    assert (s["metric"], s["mode"]) == ("loss", "min")
    detail = entry["detail"]
    assert [r["trial_id"] for r in detail["trials"]] == list(df["trial_id"])
    assert [r["state"] for r in detail["trials"]] == list(df["state"])
    assert [r["value"] for r in detail["trials"]] == list(df["loss"])
    lc = exp.learning_curves()
    assert sum(map(len, detail["curves"].values())) == len(lc)  # under the cap: every point
    assert detail["summary"] == s


def test_a_memory_only_run_says_what_its_lanes_are(runtime_dir: Path) -> None:
    """Issue #27: GPUs only on GPUs; CPU workers standing in for them are named workers."""
    gpu = sim_run(name="on-gpus")
    cpu = sim_run(name="on-cpus", cluster=ClusterSpec.homogeneous(2, kind="cpu"))
    assert cpu.engine.cluster.cpu_stand_ins and not gpu.engine.cluster.cpu_stand_ins
    rows = {e["name"]: e["summary"] for e in the_file(runtime_dir)["experiments"]}
    assert rows["on-gpus"]["device"] == "GPU" and rows["on-gpus"]["in_use"] == "0 GPUs"
    assert rows["on-cpus"]["device"] == "CPU" and rows["on-cpus"]["in_use"] == "0 CPU workers"
    # while it runs: the lanes its trials hold, in words
    summary, _ = writer.memory_listing(cpu)
    assert summary["device"] == "CPU"
    assert "GPU" not in summary["in_use"]


def test_a_stored_run_is_listed_by_its_store_only(runtime_dir: Path, tmp_path: Path) -> None:
    sim_run(tmp_path / "runs", name="stored")
    mem = sim_run(name="stored")  # the same name in memory is another experiment
    data = the_file(runtime_dir)
    location = str((tmp_path / "runs" / "nbtune.db").resolve())
    assert data["stores"] == [location]
    assert [(e["name"], e["store"], e["summary"] is None) for e in data["experiments"]] == [
        ("stored", location, True), ("stored", None, False)]
    assert data["experiments"][1]["summary"]["best_trial"] == mem.best["trial_id"]


def test_the_file_goes_at_exit_and_never_outside_a_kernel(runtime_dir: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    sim_run()
    assert kernel_file(os.getpid(), runtime_dir).exists()
    writer._current.close()  # what atexit runs
    assert not kernel_file(os.getpid(), runtime_dir).exists()
    monkeypatch.setenv(writer.ENV, "0")
    monkeypatch.setattr(writer, "_current", None)
    sim_run()
    assert not runtime_dir.exists() or not list(runtime_dir.iterdir())
    # a plain script (no env var, no ipykernel running it) writes nothing either
    monkeypatch.delenv(writer.ENV)
    assert writer.in_kernel() is False


def test_writes_are_throttled_while_a_run_goes_on(tmp_path: Path) -> None:
    kf = writer.KernelFile(tmp_path / "k.json", interval=3600.0)
    written = []
    real_write = kf.write

    def counting_write() -> None:  # the real write, counted
        written.append(1)
        real_write()

    kf.write = counting_write  # type: ignore[method-assign]
    algo = make_algorithm("asha", SPACE, metric="loss", mode="min", max_budget=27,
                          num_trials=40, seed=3)
    run = build_experiment("throttled", Engine(algo, None), SimRuntime(cluster=2),
                           SyntheticWorkload(SPACE), start=False)
    kf.track(run)  # written once, before the start
    run.runtime.start(run.engine, run.trainable)  # the whole run, hundreds of handles
    assert run.done and run.engine.events_handled > 100
    # the first handle (an hour has not passed since "never"), then only once it is done
    assert 2 <= len(written) <= 4
    data = json.loads((tmp_path / "k.json").read_text())
    assert data["experiments"][0]["summary"]["state"] == "done"
    assert data["experiments"][0]["summary"]["best_trial"] == run.best["trial_id"]


def test_long_curves_are_thinned_keeping_the_last_point() -> None:
    from nbtune.core.listing import curves

    pts = [(0, float(b), 1.0 / (b + 1)) for b in range(1000)]
    out = curves(pts, max_points=50)["0"]
    assert len(out) == 50 and out[0] == [0.0, 1.0] and out[-1] == [999.0, 1.0 / 1000]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_live_kernel_stays_when_the_boot_time_moves(tmp_path: Path) -> None:
    """Linux recomputes its boot time from the wall clock at every read (whole seconds), so the
    server can read a kernel's epoch start time a second off what the kernel wrote: the kernel
    is alive all the same (the server removed its file, and its rows, mid-run). A pid reused by
    another process is still told apart, by its start since boot."""
    me = files.process_started_since_boot(os.getpid())
    if me is None:
        pytest.skip("no /proc here: the epoch start time within EPOCH_SLACK decides")
    rt = tmp_path / "runtime"
    epoch = files.process_started(os.getpid())
    moved = {"version": 1, "pid": os.getpid(), "started": epoch + 1.0,
             "started_since_boot": me, "stores": [], "experiments": []}
    write_json(kernel_file(os.getpid(), rt), moved)
    assert [d["pid"] for d in read_kernel_files(rt)] == [os.getpid()]
    assert files.alive(os.getpid(), epoch - 1.0)  # a file without it: the epoch, with slack
    # this pid, written by a process that started 5 s before this one: a pid reused
    write_json(kernel_file(os.getpid(), rt), {**moved, "started": epoch,
                                              "started_since_boot": me - 5.0})
    assert read_kernel_files(rt) == []
    assert not kernel_file(os.getpid(), rt).exists()


def test_reader_keeps_live_kernels_and_removes_dead_ones(tmp_path: Path) -> None:
    rt = tmp_path / "runtime"
    me = {"version": 1, "pid": os.getpid(), "started": files.process_started(os.getpid()),
          "stores": [], "experiments": []}
    write_json(kernel_file(os.getpid(), rt), me)
    gone = dead_pid()
    write_json(kernel_file(gone, rt), {**me, "pid": gone})
    # a live pid that is not the process that wrote the file (the pid was reused)
    reused = {**me, "pid": os.getppid(), "started": 12.0}
    write_json(kernel_file(os.getppid(), rt), reused)
    (rt / "nbtune-kernel-garbage.json").write_text("{not json")
    (rt / "kernel-1234.json").write_text("{}")  # a Jupyter connection file: not ours
    assert [d["pid"] for d in read_kernel_files(rt)] == [os.getpid()]
    assert not kernel_file(gone, rt).exists() and not kernel_file(os.getppid(), rt).exists()
    assert (rt / "nbtune-kernel-garbage.json").exists() and (rt / "kernel-1234.json").exists()
    assert read_kernel_files(tmp_path / "nowhere") == []
