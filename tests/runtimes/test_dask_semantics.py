"""Training loops as Ray Tune and Optuna users write them, on a real LocalCluster.

No checkpoint, training from epoch 1, reporting every epoch: under ASHA and
BOHB (stopping mode) trials train on past the rungs until stopped; under
Hyperband and successive halving (synchronous) a trial waits at its rung in
its own process and trains on when promoted. None of it is an error.
"""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

from nbtune.core.space import uniform

SPACE = {"lr": uniform(0.0, 1.0)}
EPOCHS = 9
pytestmark = pytest.mark.integration
distributed = pytest.importorskip("distributed")
cloudpickle.register_pickle_by_value(sys.modules[__name__])

from nbtune.runtimes.dask import DaskRuntime  # noqa: E402
from tests.dask_cluster import client, local_client  # noqa: E402, F401 (client: a fixture)


def ray_style(config):
    """Ray Tune's function API with ``from ray.train import report`` swapped for nbtune's."""
    from nbtune import report

    for epoch in range(1, EPOCHS + 1):
        time.sleep(0.01)
        report({"loss": config["lr"] + 1.0 / epoch, "epoch": epoch})


class TrialPruned(Exception):
    """Stands for ``optuna.TrialPruned`` (matched by name, so importing optuna is not needed)."""


def optuna_style(config, trial):
    """Optuna's loop: ``trial.report(value, step)``, ``should_prune()``, raise TrialPruned."""
    for epoch in range(1, EPOCHS + 1):
        time.sleep(0.01)
        trial.report(config["lr"] + 1.0 / epoch, epoch)
        if trial.should_prune():
            raise TrialPruned()


def tune(client, tmp_path, fn, algorithm, **kw):  # noqa: F811
    import nbtune

    rt = DaskRuntime(client, checkpoint_dir=tmp_path / "ckpt", preload=(), warm_processes=1,
                     sample_interval=0.5)
    try:
        exp = nbtune.tune(fn, SPACE, algorithm=algorithm, metric="loss", max_budget=EPOCHS,
                          num_trials=kw.pop("num_trials", 9), runtime=rt, validate=True,
                          seed=3, eta=3, **kw)
        exp.wait(180)
        assert exp.done
    finally:
        rt.close()
    return exp


@pytest.mark.parametrize("algorithm", ["asha", "hyperband", "bohb"])
def test_ray_style_loop_without_checkpoints(client, tmp_path, algorithm):  # noqa: F811
    exp = tune(client, tmp_path, ray_style, algorithm)
    trials = exp.engine.trials.values()
    assert [t.error for t in trials if t.state.value == "error"] == []
    assert all(t.state.is_terminal for t in trials)
    assert max(t.budget_used for t in trials) == EPOCHS  # trained past the first rung
    assert any(1 < t.budget_used < EPOCHS for t in trials) or algorithm != "hyperband"
    # the runtime told the allocators that moving such a trial sends it back to step 1
    assert exp.engine.hints["resize_restarts"] == "moves"
    if algorithm in ("asha", "bohb"):  # stopping mode: never paused, never relaunched
        # one process per trial: on one worker throughout with no gap (a share change on
        # that worker, e.g. auto's packing probe ending, is a new row but no relaunch)
        for _, rows in exp.allocations().sort_values("start").groupby("trial_id"):
            assert rows["gpu_id"].nunique() == 1, rows
            assert (rows["start"].to_numpy()[1:] == rows["end"].to_numpy()[:-1]).all(), rows
        assert sum(t.recomputed for t in trials) == 0
    # every reported budget is new: recomputed steps never reach the results
    for t in trials:
        budgets = [b for _, b, _ in t.results]
        assert budgets == sorted(set(budgets))


def ray_style_short(config):
    """Ray's loop with its own epoch count, shorter than the experiment's ``max_budget``."""
    from nbtune import report

    for epoch in range(1, 4):
        time.sleep(0.01)
        report({"loss": config["lr"] + 1.0 / epoch})


def test_a_loop_shorter_than_the_budget_completes_as_in_ray(client, tmp_path):  # noqa: F811
    """``for epoch in range(3)`` under ``max_budget=9``: Ray Tune ends such trials TERMINATED,
    Optuna COMPLETE. Here too: completed at their last report, none failed or retried."""
    with pytest.warns(UserWarning, match="lower max_budget"):
        exp = tune(client, tmp_path, ray_style_short, "asha", max_failures=3)
    trials = exp.engine.trials.values()
    assert {t.state.value for t in trials} <= {"completed", "stopped"}, [t.error for t in trials]
    ran_out = [t for t in trials if t.state.value == "completed"]
    assert ran_out and all(t.budget_used == 3 for t in ran_out)  # their loops' own end
    assert sum(t.failures + t.recomputed for t in trials) == 0
    assert "on 2 CPU workers" in exp.summary()  # CPU stand-ins are not called GPUs


def counting(config, trial):
    """Ray's loop that notes every epoch it trains (a stop that arrives late costs epochs)."""
    import os

    from nbtune import report

    for epoch in range(1, EPOCHS + 1):
        time.sleep(0.01)
        with open(os.path.join(trial.checkpoint_dir, "epochs.log"), "a") as f:
            f.write(f"{trial.trial_id} {epoch}\n")
        report({"loss": config["lr"] + 1.0 / epoch})


def test_asha_stops_a_trial_before_it_trains_past_its_rung(client, tmp_path):  # noqa: F811
    """The trial waits in report for the verdict at ASHA's rungs (as Ray's function trainables
    do): every stopped trial trained exactly the epochs it reported, none more."""
    exp = tune(client, tmp_path, counting, "asha", num_trials=12)
    trained: dict[int, int] = {}
    for line in (tmp_path / "ckpt" / "epochs.log").read_text().split("\n"):
        if line:
            tid, epoch = map(int, line.split())
            trained[tid] = max(trained.get(tid, 0), epoch)
    trials = exp.engine.trials.values()
    stopped = [t for t in trials if t.state.value == "stopped"]
    assert stopped and [t.error for t in trials if t.state.value == "error"] == []
    assert {t.trial_id: trained[t.trial_id] for t in trials} == {
        t.trial_id: t.budget_used for t in trials}
    assert {t.budget_used for t in stopped} <= {1.0, 3.0}


def test_optuna_style_loop_under_successive_halving(client, tmp_path):  # noqa: F811
    exp = tune(client, tmp_path, optuna_style, "sha")
    trials = list(exp.engine.trials.values())
    assert all(t.state.value in ("completed", "stopped") for t in trials)
    top = [t for t in trials if t.budget_used == EPOCHS]
    assert len(top) == 1 and top[0].state.value == "completed"
    # the winner waited at rungs 1 and 3 in its own process: promoted there, nothing redone
    assert exp.engine.held == {}
    assert top[0].recomputed == 0


def plain_train(config, trial):
    for epoch in range(1, 4):
        trial.report(epoch, loss=config["lr"] / epoch)


def test_the_first_call_a_user_writes_just_works():
    """Defaults only: runtime='auto' starts a local cluster for a function and keeps it, so a
    second experiment in the same process runs on the same cluster and warm processes."""
    import nbtune

    exp = nbtune.tune(plain_train, SPACE, metric="loss", max_budget=3)
    try:
        exp.wait(120)
        assert exp.done and type(exp.runtime).__name__ == "DaskRuntime"
        df = exp.results()
        assert len(df) == 3 and set(df["state"]) <= {"completed", "stopped"}
        assert exp.best is not None and exp.best["budget_used"] == 3
        cluster = exp.runtime._cluster
        again = nbtune.tune(ray_style, SPACE, metric="loss", max_budget=EPOCHS, seed=1)
        again.wait(120)
        assert again.runtime is exp.runtime and again.runtime._cluster is cluster
        assert again.done and len(again.results()) == 9
        assert not [t for t in again.engine.trials.values() if t.state.value == "error"]
    finally:
        exp.runtime.close()


def gated_train(config, trial):
    """``plain_train`` whose first report waits for the file ``config["gate"]``."""
    import os

    while not os.path.exists(config["gate"]):
        time.sleep(0.05)
    plain_train(config, trial)


def test_one_runtime_runs_experiments_one_after_another(client, tmp_path):  # noqa: F811
    """The controls of a finished experiment do not reach the next one on the same runtime."""
    import nbtune

    rt = DaskRuntime(client, checkpoint_dir=tmp_path, preload=(), warm_processes=1)
    gate = tmp_path / "go"
    try:
        first = nbtune.tune(plain_train, SPACE, algorithm="random", metric="loss",
                            max_budget=3, num_trials=2, runtime=rt, seed=0)
        with pytest.raises(RuntimeError, match="wait"):
            nbtune.tune(plain_train, SPACE, algorithm="random", metric="loss", max_budget=3,
                        num_trials=2, runtime=rt, seed=0)
        first.wait(120)
        second = nbtune.tune(gated_train, {**SPACE, "gate": str(gate)}, algorithm="random",
                             metric="loss", max_budget=3, num_trials=2, runtime=rt, seed=0)
        first.pause()
        first.stop_trial(0)
        first.stop()
        gate.touch()
        second.wait(120)
    finally:
        rt.close()
    for exp in (first, second):
        assert [t.state.value for t in exp.engine.trials.values()] == ["completed"] * 2
    assert rt.checkpoint_dir == tmp_path / "experiment-1"  # trial ids restart: own directory


def test_the_mps_daemon_plugin_runs_before_the_warm_pool_fills():
    rt = DaskRuntime(gpus=True, mps=True)
    names = [p.name for p in rt._worker_plugins()]
    assert names == ["nbtune-mps", "nbtune-warm-pool"]
    assert [p.name for p in DaskRuntime(gpus=False)._worker_plugins()] == ["nbtune-warm-pool"]


class ExportEnv(distributed.WorkerPlugin):
    """Exports a variable into the worker's environment, as the MPS plugin does on GPUs."""

    name = "test-export-env"

    def setup(self, worker):
        import os

        os.environ["CUDA_MPS_PIPE_DIRECTORY"] = f"/tmp/mps-{worker.name}"


def report_env(config, trial):
    import os

    with open(f"/proc/{os.getpid()}/environ", "rb") as f:  # what the process was started with
        born = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    trial.report(1, loss=0.0, worker=os.environ["NBTUNE_WORKER"],
                 pipe=os.environ.get("CUDA_MPS_PIPE_DIRECTORY", ""),
                 born_pipe=born.get(b"CUDA_MPS_PIPE_DIRECTORY", b"").decode(),
                 omp=os.environ["OMP_NUM_THREADS"], trial_env=os.environ["NBTUNE_TRIAL_ID"])


def test_a_trial_process_sees_its_workers_environment_from_birth(tmp_path):
    """Warm processes are spawned after the worker's plugins ran: they are born with its env."""

    with local_client() as c:
        c.register_plugin(ExportEnv(), name=ExportEnv.name)
        exp, _ = one_epoch_each(c, tmp_path, report_env, num_trials=4)
        addr = {a: w["name"] for a, w in c.scheduler_info()["workers"].items()}
    for t in exp.engine.trials.values():
        (_, _, m), = t.results
        assert m["pipe"] == m["born_pipe"] == f"/tmp/mps-{addr[m['worker']]}"
        assert m["omp"] == "1" and m["trial_env"] == str(t.trial_id)


def one_epoch_each(client, tmp_path, fn, *, num_trials=2, preload=(), **kw):  # noqa: F811
    """Random search, one budget unit per trial, on a fresh runtime: ``(experiment, runtime)``."""
    import nbtune

    rt = DaskRuntime(client, checkpoint_dir=tmp_path / "ckpt", preload=preload,
                     warm_processes=1, sample_interval=0.5)
    try:
        exp = nbtune.tune(fn, SPACE, algorithm="random", metric="loss", max_budget=1,
                          num_trials=num_trials, runtime=rt, seed=0, **kw)
        exp.wait(180)
    finally:
        rt.close()
    return exp, rt


def lazy_imports_seen(config, trial):
    """Reports whether torch's lazily imported ``torch._dynamo`` was there before any step."""
    warm = float("torch._dynamo" in sys.modules)
    trial.report(1, loss=config["lr"], dynamo_warm=warm)


def test_warm_processes_import_what_torch_imports_lazily(client, tmp_path):  # noqa: F811
    """``torch.optim.Optimizer()`` imports torch._dynamo on first use (1.3-2.4 s here): the
    warm processes do it with the preload, so a trial's first epoch does not pay it."""
    exp, _ = one_epoch_each(client, tmp_path, lazy_imports_seen, preload=("torch",))
    warm = [r.get("dynamo_warm") for t in exp.engine.trials.values() for _, _, r in t.results]
    assert warm == [1.0, 1.0]


def wave_seen(config, trial):
    """Imports ``wave`` only in a branch that never runs: reports whether it was there."""
    if config["lr"] > 2.0:
        import wave  # noqa: F401
    trial.report(1, loss=config["lr"], wave=float("wave" in sys.modules))


def test_warm_processes_import_the_trainables_modules(client, tmp_path):  # noqa: F811
    """When an experiment starts, the warm processes import what its function imports (its
    first epoch then does not): by the next experiment on the runtime they have."""
    import nbtune

    rt = DaskRuntime(client, checkpoint_dir=tmp_path / "ckpt", preload=(), warm_processes=1,
                     keep=True)
    try:
        for seed in (0, 1):
            exp = nbtune.tune(wave_seen, SPACE, algorithm="random", metric="loss",
                              max_budget=1, num_trials=2, runtime=rt, seed=seed)
            exp.wait(180)
    finally:
        rt.close()
    assert [r["wave"] for t in exp.engine.trials.values() for _, _, r in t.results] == [1.0, 1.0]


def report_cores(config, trial):
    import os

    trial.report(1, loss=config["lr"], cores=",".join(map(str, sorted(os.sched_getaffinity(0)))))


@pytest.mark.skipif(len(getattr(__import__("os"), "sched_getaffinity", lambda _: ())(0)) < 2,
                    reason="needs two cores to pin two single-core workers apart")
def test_cpu_stand_in_workers_pin_their_trials_to_their_own_cores(client, tmp_path):  # noqa: F811
    """Two 1-thread CPU workers stand for two GPUs: each one's trials run on its own core, so a
    trial packed on one worker cannot borrow the other worker's core."""
    exp, rt = one_epoch_each(client, tmp_path, report_cores, num_trials=4, allocator="fifo")
    slots = rt.inventory.slots
    by_gpu = {g: s.cores for g, s in slots.items()}
    assert sorted(len(c) for c in by_gpu.values()) == [1, 1]
    assert len(set(by_gpu.values())) == 2  # disjoint
    al = exp.allocations()
    for t in exp.engine.trials.values():
        gpu = int(al[al.trial_id == t.trial_id].gpu_id.iloc[0])
        assert t.results[0][2]["cores"] == ",".join(map(str, by_gpu[gpu]))


def test_a_run_too_short_to_sample_says_so_not_zero(client, tmp_path):  # noqa: F811
    """No utilization sample (the run ended within its first interval) is not 0 % busy."""
    import nbtune

    rt = DaskRuntime(client, checkpoint_dir=tmp_path / "ckpt", preload=(), warm_processes=1,
                     sample_interval=60.0)
    try:
        exp = nbtune.tune(plain_train, SPACE, algorithm="random", metric="loss", max_budget=3,
                          num_trials=2, runtime=rt, seed=0)
        assert exp.wait(120) and exp.utilization().empty
        assert "utilization not sampled" in exp.summary(), exp.summary()
    finally:
        rt.close()
