"""``nbtune ls``, ``nbtune show`` and ``nbtune resume`` on real simulated experiments in SQLite.

Every expectation comes from the experiment objects ``nbtune.tune`` returned or
from the store read directly, never from the command's own code. The workload
is a module global, so ``--trainable tests.test_cli_store:WL`` imports it.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

import nbtune
from nbtune.cli import main
from nbtune.core import events as ev
from nbtune.core.resources import ClusterSpec
from nbtune.core.space import loguniform, uniform
from nbtune.runtimes.sim import SimRuntime, SimulationError
from nbtune.store import Store
from nbtune.workloads import SyntheticWorkload

SPACE = {"lr": loguniform(1e-4, 1e-1), "m": uniform(0, 1)}
WL = SyntheticWorkload(SPACE, unit_time=10.0)
WL_REF = f"{__name__}:WL"
STABLE = ["trial_id", "config/lr", "config/m", "state", "loss", "last", "budget_used",
          "failures", "error"]


def train(config, trial):  # a training function: the simulator cannot run it
    trial.report(step=1, loss=config["lr"])


def tune(name, store, algorithm="asha", cluster=2, **kw):
    kw = {"num_trials": 12, "max_budget": 9, **kw}
    return nbtune.tune(WL, algorithm=algorithm, metric="loss", seed=5, store=store, name=name,
                       runtime=SimRuntime(cluster=cluster), **kw)


def crash(name, store, n, algorithm="asha", cluster=2, **kw):
    kw = {"num_trials": 12, "max_budget": 9, **kw}
    with pytest.raises(SimulationError):
        nbtune.tune(WL, algorithm=algorithm, metric="loss", seed=5, store=store, name=name,
                    runtime=SimRuntime(cluster=cluster, max_events=n), **kw)


#: two CPU workers standing in for GPUs, as the Dask runtime has them on a machine without one
CPU_WORKERS = ClusterSpec.homogeneous(2, kind="cpu")


def run(capsys, *argv):
    """``nbtune argv`` in-process: exit code, stdout, stderr."""
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def table(out: str, header: str) -> list[list[str]]:
    """The rows under the header line starting with ``header``, split on 2+ spaces."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 1:]:
        if not re.match(r"^\s*\S+\s{2,}", line):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


# ------------------------------------------------------------------------ ls
def test_ls_lists_each_experiment_with_state_trials_and_best(tmp_path, capsys):
    path = tmp_path / "st.db"
    done = tune("done", path)
    hb = tune("hb", path, algorithm="hyperband", num_trials=None, allocator="waterfill")
    crash("half", path, 20)
    code, out, err = run(capsys, "ls", "--store", path)
    assert code == 0 and err == ""
    assert out.splitlines()[0] == f"3 experiments in {path}"
    rows = {r[0]: r for r in table(out, "NAME")}
    assert list(rows) == ["done", "hb", "half"]
    assert rows["done"][1:4] == ["done", "12/12", f"loss {done.best['loss']:.4f}"]
    assert rows["done"][4:6] == ["asha", "auto"]
    assert rows["hb"][1:4] == ["done", f"{len(hb.results())}/{len(hb.results())}",
                               f"loss {hb.best['loss']:.4f}"]
    assert rows["hb"][4:6] == ["hyperband", "waterfill"]
    half = Store(path).results("half")
    ended = int(half["state"].isin(["completed", "stopped", "error"]).sum())
    assert rows["half"][1:3] == ["running", f"{ended}/12"]
    for r in rows.values():
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", r[6])
    assert "nbtune resume NAME --store" in out  # how to continue the unfinished one


def test_ls_finds_the_default_store_a_folder_and_a_url(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "ls")
    assert code == 2 and "nbtune-store/nbtune.db" in err and "pass --store" in err
    tune("mine", True)  # nbtune.tune(store=True): ./nbtune-store/nbtune.db
    db = tmp_path / "nbtune-store" / "nbtune.db"
    for argv in (["ls"], ["ls", "--store", "nbtune-store"], ["ls", "--store", f"sqlite:///{db}"]):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and [r[0] for r in table(out, "NAME")] == ["mine"], argv
    code, out, _ = run(capsys, "ls", "--store", Store(tmp_path / "empty.db").path)
    assert code == 0 and out.startswith("no experiments in ")


# ---------------------------------------------------------------------- show
@pytest.mark.parametrize("mode", ["min", "max"])
def test_show_sorts_trials_by_the_metric_and_names_the_best(tmp_path, capsys, mode):
    path = tmp_path / "st.db"
    exp = tune("x", path, algorithm="random", mode=mode, num_trials=7, max_budget=4)
    code, out, err = run(capsys, "show", "x", "--store", path, "--top", 4)
    assert code == 0 and err == ""
    assert re.search(r"^algorithm\s+random$", out, re.M)
    assert re.search(rf"^metric\s+loss \(({'lower' if mode == 'min' else 'higher'}) is better\)$",
                     out, re.M)
    assert re.search(r"^trials\s+7 of 7 \(7 completed\)$", out, re.M)
    assert re.search(r"^seed\s+5$", out, re.M)
    assert re.search(r"^space\s+lr=loguniform\(0\.0001, 0\.1\); m=uniform\(0, 1\)$", out, re.M)
    assert "trials by loss, best first (top 4 of 7):" in out
    rows = table(out, "TRIAL")
    res = exp.results()
    want = res.sort_values("loss", ascending=mode == "min").head(4)
    assert [int(r[0]) for r in rows] == list(want["trial_id"])
    assert [r[3] for r in rows] == [f"{v:.4f}" for v in want["loss"]]
    assert all(r[1] == "completed" and r[2] == "4" for r in rows)
    best = exp.best
    assert re.search(rf"^best trial {best['trial_id']}: loss {best['loss']:.4f} at budget 4 ",
                     out, re.M)
    code, out, _ = run(capsys, "show", "x", "--store", path, "--top", 0)
    assert len(table(out, "TRIAL")) == 7 and "best first (all)" in out


def test_show_says_what_the_trials_ran_on_gpus_only_on_gpus(tmp_path, capsys):
    """Issue #27: words that fit the hardware; CPU workers standing in for GPUs are workers."""
    path = tmp_path / "st.db"
    tune("gpus", path, algorithm="random", num_trials=3, max_budget=2)
    tune("cpus", path, algorithm="random", num_trials=3, max_budget=2, cluster=CPU_WORKERS)
    _, out, _ = run(capsys, "show", "gpus", "--store", path)
    assert re.search(r"^runs on\s+2 GPUs$", out, re.M), out
    _, out, _ = run(capsys, "show", "cpus", "--store", path)
    assert re.search(r"^runs on\s+2 CPU workers \(standing in for GPUs\)$", out, re.M), out


def test_utilization_row_says_gpu_only_on_gpus():
    from types import SimpleNamespace

    from nbtune.cli.format import utilization_row

    def exp(cluster):
        return SimpleNamespace(engine=SimpleNamespace(cluster=cluster), makespan=10.0,
                               mean_utilization=lambda: 0.5,
                               busy_seconds=lambda: {0: 5.0, 1: 10.0})

    # measured on a Dask cluster: GPUs by NVML, CPU workers by their CPU share
    assert utilization_row(exp(ClusterSpec.homogeneous(2)), "dask") == (
        "GPU utilization", "mean 50.0% (measured on the GPUs)")
    assert utilization_row(exp(CPU_WORKERS), "dask") == (
        "utilization", "mean 50.0% (measured CPU of the workers)")
    # simulated: per GPU, or per worker when the cluster simulated is CPU workers
    assert utilization_row(exp(ClusterSpec.homogeneous(2)), "sim") == (
        "GPU utilization", "mean 75.0%; per GPU 0:50% 1:100%")
    assert utilization_row(exp(CPU_WORKERS), "sim") == (
        "worker utilization", "mean 75.0%; per worker 0:50% 1:100%")


def test_show_writes_every_trial_as_csv(tmp_path, capsys):
    path = tmp_path / "st.db"
    exp = tune("x", path)
    csv = tmp_path / "x.csv"
    code, out, _ = run(capsys, "show", "x", "--store", path, "--csv", csv)
    assert code == 0 and f"wrote 12 trials to {csv}" in out
    got = pd.read_csv(csv)
    pd.testing.assert_frame_equal(got[STABLE[:-1]], exp.results()[STABLE[:-1]],
                                  check_dtype=False)
    code, out, _ = run(capsys, "show", "x", "--store", path, "--csv", "-")
    assert code == 0 and out.splitlines()[0].startswith("trial_id,config/lr,config/m,state")
    assert len(out.splitlines()) == 13  # only the CSV: a header and 12 trials


# -------------------------------------------------------------------- resume
def launches_after_restart(st, name):
    log = st.event_log(name)
    starts = [i for i, (events, _) in enumerate(log)
              if any(isinstance(e, ev.ExperimentStarted) for e in events)]
    assert len(starts) == 2, "one start and one restart"
    return [(p["trial_id"], p["start_budget"]) for _, cmds in log[starts[-1]:]
            for kind, p in cmds if kind == "Launch"]


@pytest.mark.parametrize("algorithm,n", [("asha", 10), ("asha", 25), ("random", 40)])
def test_resume_continues_a_crashed_experiment_to_the_same_end(tmp_path, capsys, algorithm, n):
    path = tmp_path / "st.db"
    # FIFO: a packing allocator's resumed run reaches the same results but not always the same
    # makespan (already so for fluid+knapsack on main), and "auto" may switch to packing
    crash("run", path, n, algorithm, allocator="fifo")
    st = Store(path)
    before = st.results("run")
    ended = set(before.loc[before["state"].isin(["completed", "stopped"]), "trial_id"])
    used = dict(zip(before["trial_id"], before["budget_used"], strict=True))

    code, out, err = run(capsys, "resume", "run", "--store", path, "--trainable", WL_REF)
    assert code == 0, err
    full = tune("full", tmp_path / "other.db", algorithm, allocator="fifo")  # never interrupted
    pd.testing.assert_frame_equal(st.results("run")[STABLE], full.results()[STABLE],
                                  check_dtype=False)
    row = st.experiment("run")
    assert row.state == "done" and row.restarts == 1
    relaunched = launches_after_restart(st, "run")
    assert relaunched and not ended & {t for t, _ in relaunched}, "an ended trial ran again"
    first: dict[int, float] = {}
    for t, start in relaunched:
        first.setdefault(t, start)
    for t, start in first.items():  # each continues from its last recorded budget
        assert start == used.get(t, 0.0), t

    lines = out.splitlines()
    assert lines[0].startswith("nbtune resume: experiment 'run' from ")
    assert re.search(rf"; {len(ended)} trials? ended, ", lines[0])
    crashed_at = float(re.search(r"to t=([\d,.]+) s", lines[0]).group(1).replace(",", ""))
    progress = [line for line in lines if line.startswith("[")]
    for line in progress:  # launches and results only: the dead run's trials are not listed
        assert re.search(r"\] trial +\d+ (start|promote|reached|stopped)", line), line
    times = [float(line[1:line.index("s]")]) for line in progress]
    assert times == sorted(times) and times[0] >= crashed_at  # the simulator's clock goes on
    assert times[-1] == pytest.approx(full.makespan)
    launched = {int(m.group(1)) for line in progress
                for m in [re.search(r"trial +(\d+) (start|promote) ", line)] if m}
    assert launched == {t for t, _ in relaunched}  # one progress line per launch, live
    assert re.search(r"\| running \d+, started \d+/12, done 12, best ", progress[-1])
    best = full.best
    assert re.search(rf"^best loss\s+{best['loss']:.4f} \(trial {best['trial_id']}, budget 9\)",
                     out, re.M), out
    assert re.search(r"^job\s+\S+ resumed on 2 simulated GPUs, allocator fifo$", out, re.M)
    assert re.search(r"^store\s+.*\(experiment 'run', restart 1\)$", out, re.M)


def test_resume_takes_another_cluster_size(tmp_path, capsys):
    path = tmp_path / "st.db"
    crash("run", path, 20)
    code, out, _ = run(capsys, "resume", "run", "--store", path, "--trainable", WL_REF,
                       "--workers", 3)
    assert code == 0
    assert re.search(r"^job\s+asha resumed on 3 simulated GPUs", out, re.M)
    assert "slot 2" in out  # the third GPU was used
    assert set(Store(path).results("run")["state"]) <= {"completed", "stopped"}


def test_resume_of_a_cpu_workers_run_never_says_gpus(tmp_path, capsys):
    """A run on CPU workers resumed on the simulator simulates those workers: named so."""
    path = tmp_path / "st.db"
    crash("run", path, 20, cluster=CPU_WORKERS)
    code, out, _ = run(capsys, "resume", "run", "--store", path, "--trainable", WL_REF)
    assert code == 0
    assert re.search(r"^job\s+asha resumed on 2 simulated CPU workers, allocator", out, re.M), out
    assert re.search(r"^worker utilization\s+mean \d+\.\d%; per worker 0:", out, re.M), out
    assert "GPU" not in out


# -------------------------------------------------------------------- errors
def one_line_error(capsys, *argv) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "", (out, err)
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_an_unknown_store_path_is_reported_and_not_created(tmp_path, capsys):
    ghost = tmp_path / "nothing" / "here.db"
    for cmd in (["ls"], ["show", "x"], ["resume", "x"]):
        err = one_line_error(capsys, *cmd, "--store", ghost)
        assert f"no nbtune store at {ghost}" in err and err.startswith(f"nbtune {cmd[0]}: error:")
    err = one_line_error(capsys, "ls", "--store", f"sqlite:///{ghost}")
    assert "no such file" in err
    assert not ghost.parent.exists()
    text = tmp_path / "notes.txt"
    text.write_text("not a database")
    assert "cannot open the store" in one_line_error(capsys, "ls", "--store", text)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert "is not an nbtune store" in one_line_error(capsys, "ls", "--store", other)
    with sqlite3.connect(other) as conn:  # and it was left as it was
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["t"]


def test_an_unknown_name_lists_the_known_ones(tmp_path, capsys):
    path = tmp_path / "st.db"
    tune("alpha", path)
    crash("beta", path, 10)
    for cmd in ("show", "resume"):
        err = one_line_error(capsys, cmd, "gamma", "--store", path)
        assert "no experiment named 'gamma'" in err and "known experiments: alpha, beta" in err


def test_a_finished_experiment_says_how_to_read_it(tmp_path, capsys):
    path = tmp_path / "st.db"
    tune("done", path)
    err = one_line_error(capsys, "resume", "done", "--store", path, "--trainable", WL_REF)
    assert "already finished" in err and f"nbtune show done --store {path}" in err
    assert Store(path).experiment("done").restarts == 0


def test_trainables_that_cannot_be_used_fail_before_anything_runs(tmp_path, capsys):
    path = tmp_path / "st.db"
    crash("run", path, 15)
    st = Store(path)
    log = len(st.event_log("run"))
    base = ["resume", "run", "--store", path]
    assert "pass --trainable MODULE:NAME" in one_line_error(capsys, *base)  # a workload model
    err = one_line_error(capsys, *base, "--trainable", "no_such_module_xyz:WL")
    assert "cannot import --trainable 'no_such_module_xyz:WL'" in err
    assert "no attribute" in one_line_error(capsys, *base, "--trainable", f"{__name__}:nope")
    assert "MODULE:NAME" in one_line_error(capsys, *base, "--trainable", "just_a_name")
    err = one_line_error(capsys, *base, "--trainable", f"{__name__}:train")
    assert "simulator runs workload models" in err and "--runtime dask" in err
    err = one_line_error(capsys, *base, "--trainable", WL_REF, "--runtime", "dask")
    assert "--runtime sim" in err
    with st.engine.begin() as conn:  # a recorded function that is gone from its module
        conn.exec_driver_sql("UPDATE experiments SET trainable = 'gone_module_xyz:train' "
                             "WHERE name = 'run'")
    err = one_line_error(capsys, *base)
    assert "cannot import the recorded trainable 'gone_module_xyz:train'" in err
    assert len(st.event_log("run")) == log and st.experiment("run").restarts == 0


def test_an_algorithm_that_replays_differently_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "st.db"
    crash("drift", path, 15, "random", num_trials=5, max_budget=4)
    st = Store(path)
    with st.engine.begin() as conn:  # someone edits the stored seed
        conn.exec_driver_sql("UPDATE experiments SET seed = seed + 1 WHERE name = 'drift'")
    err = one_line_error(capsys, "resume", "drift", "--store", path, "--trainable", WL_REF)
    assert "diverged" in err
    assert st.experiment("drift").restarts == 0


def test_help_lists_the_store_commands(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    for cmd in ("ls", "show", "resume"):
        assert re.search(rf"^\s+{cmd}\s+\S", out, re.M), out


def test_store_paths_in_messages_are_quoted_for_the_shell(tmp_path, capsys):
    path = tmp_path / "a folder" / "st.db"
    path.parent.mkdir()
    tune("done", path)
    err = one_line_error(capsys, "resume", "done", "--store", path)
    assert f"--store '{path}'" in err
    assert Path(path).is_file()
