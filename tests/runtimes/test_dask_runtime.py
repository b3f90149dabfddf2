"""The Dask runtime on a real two-worker LocalCluster (no mocks standing in for Dask).

One cluster serves the whole module; each test builds its own DaskRuntime
on it (the runtime leaves a client it was given open). Training functions are
pickled by value so trial processes need not import this test module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator
from nbtune.core import events as ev
from nbtune.core.space import uniform
from nbtune.core.trial import TrialState
from nbtune.engine.engine import Engine
from nbtune.runtimes.dask import DaskRuntime, DaskRuntimeError  # noqa: E402
from nbtune.runtimes.dask import checkpoints as ck  # noqa: E402
from tests.dask_cluster import local_client, wait_for_budget  # noqa: E402
from tests.engine.toy import OneShot

pytestmark = pytest.mark.integration
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SPACE = {"lr": uniform(0.1, 1.0)}
WAIT = 120


@pytest.fixture(scope="module")
def client():
    with local_client() as c:
        yield c


def runtime(client, tmp_path, **kw):
    kw.setdefault("preload", ())
    kw.setdefault("sample_interval", 0.25)
    kw.setdefault("warm_processes", 1)
    return DaskRuntime(client, checkpoint_dir=tmp_path / "ckpt", **kw)


def run(rt, engine, fn, timeout=WAIT):
    rt.start(engine, fn)
    try:
        assert rt.wait(timeout), "the experiment did not finish in time"
    finally:
        rt.close()
    return engine


# ------------------------------------------------------------- train functions
def train_simple(config, trial, boundary_sleep=0.0):
    """Checkpoints every step; ``boundary_sleep`` delays the checkpoint of even steps."""
    state = trial.restore() or {"w": 0.0, "steps": [], "ids": []}
    for step in trial.steps():
        time.sleep(0.05)
        state["w"] += config["lr"]
        state["steps"].append(step)
        state["ids"].append(trial.trial_id)
        trial.report(step=step, loss=1.0 / (1.0 + state["w"]), restored=trial.restore_step or 0.0,
                     world=trial.world_size, start=trial.start_step)
        if boundary_sleep and step % 2 == 0:
            time.sleep(boundary_sleep)
        trial.checkpoint(state)


def train_packed(config, trial):
    """Both trials wait for each other: they finish only if they really run side by side."""
    here = Path(trial.checkpoint_dir)
    (here / f"started-{trial.trial_id}").touch()
    deadline = time.monotonic() + WAIT
    while len(list(here.glob("started-*"))) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError("the other packed trial never started alongside this one")
        time.sleep(0.02)
    for step in trial.steps():
        time.sleep(0.3)
        trial.report(step=step, loss=config["lr"], worker=os.environ["NBTUNE_WORKER"],
                     omp=int(os.environ["OMP_NUM_THREADS"]), pid=os.getpid())


def train_raises(config, trial):
    state = trial.restore() or {"n": 0}
    marker = Path(trial.checkpoint_dir) / f"failed-{trial.trial_id}"
    for step in trial.steps():
        if trial.trial_id == 1 and step == 2 and not marker.exists():
            marker.touch()
            raise ValueError("boom at step 2")
        state["n"] += 1
        trial.report(step=step, loss=1.0 / step, restored=trial.restore_step or 0.0)
        trial.checkpoint(state)


def train_slow(config, trial):
    for step in trial.steps():
        time.sleep(0.1)
        trial.report(step=step, loss=1.0)
        trial.checkpoint({"step": step})


def train_hog(config, trial):
    blob = b"x" * 600_000_000  # touches every page: resident, not just reserved
    time.sleep(3600)  # holds it past run()'s wait: only the memory limit can end it in time
    trial.report(step=1, loss=float(len(blob)))


def train_quits_early(config, trial):
    trial.report(step=1, loss=1.0)


# ------------------------------------------------------------------ allocators
class PackOnGpu0(BaseAllocator):
    """Every trial gets half of GPU 0: two trials share one worker."""

    name = "pack-gpu0"

    def capacity(self, view):
        return int((1.0 - view.gpu_load.get(0, 0.0)) / 0.5 + 1e-9)

    def allocate(self, view):
        room = self.capacity(view)
        return Allocation(launch={s.trial_id: ((0, 0.5),) for s in list(view.pending)[:room]})


class Gang(BaseAllocator):
    """One trial at a time on every GPU of the cluster (a 2-rank DDP trial here)."""

    name = "gang"

    def capacity(self, view):
        return 0 if view.running else 1

    def allocate(self, view):
        if view.running or not view.pending:
            return Allocation()
        gpus = sorted(g.gpu_id for g in view.cluster.gpus)
        return Allocation(launch={view.pending[0].trial_id: tuple((g, 1.0) for g in gpus)})


class GrowIntoFreedGpu(BaseAllocator):
    """FIFO, except that a GPU freed while a trial waits goes to the oldest one-GPU trial.

    Contrived on purpose: it makes the engine resize a running trial from one
    worker to two (a DDP relaunch from its checkpoint).
    """

    name = "grow"

    def __init__(self):
        self.grown = set()

    def capacity(self, view):
        return len(view.idle_gpus)

    def allocate(self, view):
        idle = sorted(view.idle_gpus)
        resize = {}
        for tid, pl in sorted(view.running.items()):
            if idle and len(pl) == 1 and tid not in self.grown and self.grown == set() \
                    and len(view.running) == 1:
                self.grown.add(tid)
                resize[tid] = tuple(sorted([pl[0], (idle.pop(0), 1.0)]))
        launch = {s.trial_id: ((g, 1.0),) for s, g in zip(list(view.pending), idle, strict=False)}
        return Allocation(launch=launch, resize=resize)


def train_ddp(config, trial, narrow_until_resized=False, gate=None):
    """``narrow_until_resized``: on one worker, after step 3's checkpoint, train no further
    until the engine asks the run to stop (a resize widens it from that checkpoint).
    ``gate``: a path; steps past 2 wait until it exists."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    model = trial.ddp(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    state = trial.restore()
    if state is not None:
        getattr(model, "module", model).load_state_dict(state["model"])
    for step in trial.steps():
        deadline = time.monotonic() + 10 * WAIT  # never outlive the test by much
        while step > 2 and gate is not None and not os.path.exists(gate):
            assert time.monotonic() < deadline, "the test never opened the gate"
            time.sleep(0.02)
        g = torch.Generator().manual_seed(int(step) * 10 + trial.rank)  # each rank its own batch
        x = torch.randn(16, 4, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        agree = 1.0
        if trial.world_size > 1:
            hi, lo = flat.clone(), flat.clone()
            dist.all_reduce(hi, op=dist.ReduceOp.MAX)
            dist.all_reduce(lo, op=dist.ReduceOp.MIN)
            agree = float(torch.allclose(hi, lo))
        time.sleep(0.3)  # a step's work
        trial.report(step=step, loss=loss.item(), world=trial.world_size, agree=agree,
                     restored=trial.restore_step or 0.0)
        trial.checkpoint({"model": getattr(model, "module", model).state_dict()})
        if narrow_until_resized and trial.world_size == 1 and step >= 3:
            deadline = time.monotonic() + 10 * WAIT  # never outlive the test by much
            while not trial.should_stop() and time.monotonic() < deadline:
                time.sleep(0.05)


# ----------------------------------------------------------------------- tests
def test_tune_end_to_end(client, tmp_path):
    import nbtune

    rt = runtime(client, tmp_path)
    exp = nbtune.tune(train_simple, SPACE, algorithm="asha", metric="loss", mode="min",
                      max_budget=4, num_trials=4, runtime=rt, validate=True, seed=1, eta=2)
    try:
        exp.wait(WAIT)
        assert exp.done
    finally:
        rt.close()
    df = exp.results()
    assert len(df) == 4
    assert set(df["state"]) <= {"completed", "stopped"}
    assert "completed" in set(df["state"])
    curves = exp.learning_curves()
    for _tid, g in curves.groupby("trial_id"):
        assert list(g["budget"]) == sorted(g["budget"]) and g["budget"].is_unique
    # promoted trials resumed from their own checkpoint at the budget they had reached
    resumed = curves[curves["restored"] > 0]
    assert (resumed["budget"] > resumed["restored"]).all()
    best = exp.best
    assert best is not None and best["budget_used"] == 4
    step, path = rt.latest_checkpoint(best["trial_id"])
    assert step == 4 and Path(path).exists()
    assert ck.load_state(path)["steps"][-1] == 4
    util = exp.utilization()
    assert list(util.columns) == ["time", "gpu_id", "util", "memory_gb"]
    assert not util.empty and set(util["gpu_id"]) <= {0, 1}
    assert util["util"].between(0, 1).all()
    assert rt.clock.now() > 0


def test_packed_trials_share_one_worker(client, tmp_path):
    algo = OneShot(SPACE, metric="loss", max_budget=4, num_trials=2, seed=0)
    eng = run(runtime(client, tmp_path), Engine(algo, PackOnGpu0(), validate=True),
              train_packed)
    a, b = (eng.trials[i] for i in (0, 1))
    assert a.state is b.state is TrialState.COMPLETED
    workers = {m["worker"] for t in (a, b) for _, _, m in t.results}
    assert len(workers) == 1  # both on GPU 0's worker
    assert {m["omp"] for t in (a, b) for _, _, m in t.results} == {1}
    assert {m["pid"] for _, _, m in a.results}.isdisjoint({m["pid"] for _, _, m in b.results})
    # they ran at the same time, not one after the other
    assert a.results[0][0] < b.results[-1][0] and b.results[0][0] < a.results[-1][0]


def test_raising_trial_fails_and_others_go_on(client, tmp_path):
    algo = OneShot(SPACE, metric="loss", max_budget=3, num_trials=3, seed=0)
    eng = run(runtime(client, tmp_path), Engine(algo, validate=True), train_raises)
    assert eng.trials[1].state is TrialState.ERROR
    assert "ValueError: boom at step 2" in eng.trials[1].error
    assert "Traceback" in eng.trials[1].error
    assert eng.trials[1].budget_used == 1
    assert {eng.trials[i].state for i in (0, 2)} == {TrialState.COMPLETED}


def test_failed_trial_retries_from_its_checkpoint(client, tmp_path):
    algo = OneShot(SPACE, metric="loss", max_budget=4, num_trials=2, seed=0)
    eng = run(runtime(client, tmp_path), Engine(algo, validate=True, max_failures=1),
              train_raises)
    t = eng.trials[1]
    assert t.state is TrialState.COMPLETED and t.failures == 1
    budgets = [b for _, b, _ in t.results]
    assert budgets == [1.0, 2.0, 3.0, 4.0]  # no unit trained twice: resumed after step 1
    assert t.results[1][2]["restored"] == 1.0


def test_stop_request_ends_trial_at_a_boundary(client, tmp_path):
    # 0.1 s a step: the whole budget is a day's training, never reached in the test
    algo = OneShot(SPACE, metric="loss", max_budget=10**6, num_trials=1, seed=0)
    eng = Engine(algo, validate=True)
    rt = runtime(client, tmp_path)
    rt.start(eng, train_slow)
    try:
        wait_for_budget(eng, 0, 3, WAIT)
        rt.submit(ev.TrialStopRequested(rt.clock.now(), 0))
        assert rt.wait(WAIT)
    finally:
        rt.close()
    assert eng.trials[0].state is TrialState.STOPPED
    assert 3 <= eng.trials[0].budget_used < 10**6
    # the process itself left at a boundary after the request, not at the budget's end (how
    # many steps it trained meanwhile depends on how fast the stop travels on a loaded box)
    last, _ = rt.latest_checkpoint(0)
    assert eng.trials[0].budget_used <= last < 10**6


def test_experiment_stop_ends_every_trial(client, tmp_path):
    algo = OneShot(SPACE, metric="loss", max_budget=500, num_trials=3, seed=0)
    eng = Engine(algo, validate=True)
    rt = runtime(client, tmp_path)
    rt.start(eng, train_slow)
    try:
        deadline = time.monotonic() + WAIT
        while sum(t.budget_used >= 2 for t in eng.trials.values()) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        rt.submit(ev.ExperimentStopRequested(rt.clock.now()))
        assert rt.wait(WAIT)
    finally:
        rt.close()
    assert eng.done and eng.stopped
    assert {t.state for t in eng.trials.values()} == {TrialState.STOPPED}
    assert all(t.budget_used < 500 for t in eng.trials.values())


def test_memory_hog_is_out_of_memory(client, tmp_path):
    algo = OneShot(SPACE, metric="loss", max_budget=1, num_trials=1, seed=0)
    eng = run(runtime(client, tmp_path, trial_memory_limit="300MB"), Engine(algo), train_hog)
    t = eng.trials[0]
    assert t.state is TrialState.ERROR
    assert t.error.startswith("out of memory") and "trial_memory_limit" in t.error


def test_function_returning_early_completes_at_its_last_report(client, tmp_path):
    """A loop shorter than the budget (``for epoch in range(9)`` under ``max_budget=27``) ends
    as Ray Tune (TERMINATED) and Optuna (COMPLETE) end it: completed, not failed and retried."""
    algo = OneShot(SPACE, metric="loss", max_budget=3, num_trials=1, seed=0)
    eng = Engine(algo, max_failures=2)
    with (pytest.warns(UserWarning, match="returned before its trial's budget"),
          runtime(client, tmp_path) as rt):  # the context manager connects and closes
        rt.start(eng, train_quits_early)
        assert rt.wait(WAIT)
    assert rt.done and client.status == "running"  # a client it was given stays open
    t = eng.trials[0]
    assert t.state is TrialState.COMPLETED and t.error is None
    assert t.failures == 0 and t.budget_used == 1.0 and t.recomputed == 0  # run once


def test_ddp_trial_on_two_workers(client, tmp_path):
    algo = OneShot(SPACE, metric="loss", max_budget=3, num_trials=1, seed=0)
    eng = run(runtime(client, tmp_path, preload=("torch",)),
              Engine(algo, Gang(), validate=True), train_ddp)
    t = eng.trials[0]
    assert t.state is TrialState.COMPLETED, t.error
    assert [m["world"] for _, _, m in t.results] == [2, 2, 2]
    assert all(m["agree"] == 1.0 for _, _, m in t.results)  # gradients were all-reduced


def train_grow(config, trial):
    """Trial 1 gives its GPU up (fails) once trial 0 has checkpointed step 2."""
    if trial.trial_id == 1:
        deadline = time.monotonic() + 60
        while not ck.checkpoint_path(trial.checkpoint_dir, 0, 2).exists():
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        raise RuntimeError("giving my GPU away")
    if trial.trial_id == 2:
        return train_simple(config, trial)  # only there to keep the queue non-empty
    train_ddp(config, trial, narrow_until_resized=True)  # the resize lands mid-run


def test_resize_relaunches_with_new_world_size(client, tmp_path):
    algo = OneShot(SPACE, metric="loss", max_budget=6, num_trials=3, seed=0)
    eng = run(runtime(client, tmp_path, preload=("torch",)),
              Engine(algo, GrowIntoFreedGpu(), validate=True), train_grow)
    t = eng.trials[0]
    assert t.state is TrialState.COMPLETED, t.error
    assert eng.trials[1].state is TrialState.ERROR
    assert eng.trials[2].state is TrialState.COMPLETED, eng.trials[2].error
    budgets = [b for _, b, _ in t.results]
    assert budgets == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    worlds = [m["world"] for _, _, m in t.results]
    assert worlds[0] == 1 and worlds[-1] == 2 and worlds == sorted(worlds)
    first_wide = next(m for _, _, m in t.results if m["world"] == 2)
    assert first_wide["restored"] >= 2  # resumed from the checkpoint taken before the resize
    assert all(m["agree"] == 1.0 for _, _, m in t.results)
    assert sorted({r.gpu_id for r in eng.ledger.log if r.trial_id == 0}) == [0, 1]


# ------------------------------------------------------------ no cluster needed
def test_bad_arguments_fail_early():
    with pytest.raises(ValueError, match="threads_per_worker"):
        DaskRuntime(threads_per_worker=0)
    with pytest.raises(ValueError, match="sample_interval"):
        DaskRuntime(sample_interval=0)
    rt = DaskRuntime(cluster=42)
    algo = OneShot(SPACE, metric="loss", max_budget=1, num_trials=1, seed=0)
    with pytest.raises(TypeError, match=r"train\(config, trial\)"):
        rt.start(Engine(algo), lambda: None)
    from nbtune.workloads import SyntheticWorkload

    with pytest.raises(TypeError, match="runtime='sim'"):
        rt.start(Engine(algo), SyntheticWorkload(SPACE))
    with pytest.raises(TypeError, match="cluster must be"):
        rt.start(Engine(algo), train_simple)
    with pytest.raises(RuntimeError, match="not started"):
        DaskRuntime().wait(0)
    assert DaskRuntimeError.__mro__[1] is RuntimeError


def test_importing_nbtune_does_not_import_distributed():
    code = ("import sys, nbtune; assert 'distributed' not in sys.modules; "
            "from nbtune.runtimes import DaskRuntime; assert nbtune.DaskRuntime is DaskRuntime; "
            "assert 'distributed' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_pbt_clones_resume_from_the_donor_checkpoint(client, tmp_path):
    import nbtune

    rt = runtime(client, tmp_path)
    exp = nbtune.tune(train_simple, SPACE, algorithm="pbt", metric="loss", mode="min",
                      max_budget=6, num_trials=4, runtime=rt, validate=True, seed=3,
                      perturbation_interval=2, quantile_fraction=0.5,
                      allocator="fifo")  # the seed was chosen for FIFO's timing, not auto's probe
    try:
        exp.wait(WAIT)
        assert exp.done
    finally:
        rt.close()
    eng = exp.engine
    assert all(t.budget_used == 6 for t in eng.trials.values())
    clones = [t for t in eng.trials.values() if t.restore_from not in (None, t.trial_id)]
    assert clones, "PBT exploited no trial: the test needs a different seed"
    for t in clones:
        steps = [b for _, b, _ in t.results]
        assert steps == sorted(steps)
        # the clone carried on from the donor's state, not from its own earlier one
        state = ck.load_state(ck.latest_checkpoint(rt.checkpoint_dir, t.trial_id)[1])
        assert state["steps"] == [1, 2, 3, 4, 5, 6]
        assert state["ids"][-1] == t.trial_id and set(state["ids"]) != {t.trial_id}


def train_slow_boundary_checkpoint(config, trial):
    """train_simple, but a PBT boundary's checkpoint is written a second after its report."""
    train_simple(config, trial, boundary_sleep=1.0)


def test_pbt_clone_waits_for_the_donor_checkpoint_it_clones(client, tmp_path):
    """The engine exploits a donor as soon as it reports the boundary; the clone must not start
    from the donor's previous checkpoint while the boundary's one is still being written."""
    import nbtune

    rt = runtime(client, tmp_path)
    exp = nbtune.tune(train_slow_boundary_checkpoint, SPACE, algorithm="pbt", metric="loss",
                      mode="min", max_budget=6, num_trials=4, runtime=rt, validate=True,
                      seed=3, perturbation_interval=2, quantile_fraction=0.5,
                      allocator="fifo")  # the seed was chosen for FIFO's timing
    try:
        exp.wait(WAIT)
        assert exp.done
    finally:
        rt.close()
    eng = exp.engine
    clones = [t for t in eng.trials.values() if t.restore_from not in (None, t.trial_id)]
    assert clones, "PBT exploited no trial: the test needs a different seed"
    for t in clones:
        for _, _, m in t.results:
            if m["start"] > 0:  # every segment went on from the step it was launched at
                assert m["restored"] == m["start"], (t.trial_id, t.results)
        state = ck.load_state(ck.latest_checkpoint(rt.checkpoint_dir, t.trial_id)[1])
        assert state["steps"] == [1, 2, 3, 4, 5, 6]
