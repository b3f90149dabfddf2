"""The same train(config, trial) (nbtune.examples.fusion_digits) runs unfused (F = 1) and
fused, with per-member stops."""

from __future__ import annotations

import pytest

from nbtune.examples.fusion_digits import train
from nbtune.fusion.fusion_trial import FusionTrial, run_group
from nbtune.runtimes.dask.protocol import encode


class Recorder:
    def __init__(self, stop_at: int | None = None):
        self.rows, self.stop_at = [], stop_at

    def report(self, step, **metrics):
        self.rows.append((step, metrics))

    def should_stop(self):
        return self.stop_at is not None and self.rows[-1][0] >= self.stop_at


CONFIGS = [{"seed": s, "hidden": 16, "batch_size": 128, "lr": lr, "momentum": m}
           for s, (lr, m) in enumerate([(0.3, 0.0), (0.1, 0.9), (0.03, 0.5), (0.01, 0.9)])]


def test_same_loop_unfused_and_fused_gives_the_same_metrics():
    alone = []
    for cfg in CONFIGS:
        rec = Recorder()
        run_group(train, [cfg], [rec], budget=4)
        alone.append(rec.rows)
    recs = [Recorder() for _ in CONFIGS]
    run_group(train, CONFIGS, recs, budget=4)
    for want, rec in zip(alone, recs, strict=True):
        assert [s for s, _ in rec.rows] == [1, 2, 3, 4]
        for (_, a), (_, b) in zip(want, rec.rows, strict=True):
            assert a == pytest.approx(b, abs=1e-4)


def test_stopped_member_is_sliced_out_and_the_others_are_unchanged():
    full = [Recorder() for _ in CONFIGS]
    run_group(train, CONFIGS, full, budget=4)
    recs = [Recorder(stop_at=2 if k == 1 else None) for k in range(len(CONFIGS))]
    trial = run_group(train, CONFIGS, recs, budget=4)
    assert trial.alive == [0, 2, 3]
    assert [s for s, _ in recs[1].rows] == [1, 2]
    for k in (0, 2, 3):
        for (_, a), (_, b) in zip(full[k].rows, recs[k].rows, strict=True):
            assert a == pytest.approx(b, abs=1e-4)


def test_report_checks_lengths():
    trial = FusionTrial(CONFIGS[:2], [Recorder(), Recorder()], budget=1)
    with pytest.raises(ValueError, match="3 values for 2 members"):
        trial.report(1, loss=[1.0, 2.0, 3.0])


@pytest.mark.integration
@pytest.mark.slow
def test_same_loop_runs_unfused_on_dask_with_fused_metrics(tmp_path):
    """On a real LocalCluster the loop runs unfused (F = 1); fused locally, every member ends
    with the metrics its Dask trial reported."""
    import nbtune
    from nbtune.core.space import choice
    from nbtune.runtimes.dask import DaskRuntime

    space = {"seed": choice([0, 1, 2]), "hidden": choice([16]), "batch_size": choice([128]),
             "lr": choice([0.3, 0.1, 0.03]), "momentum": choice([0.0, 0.9])}
    rt = DaskRuntime(n_workers=1, dashboard_address=None, preload=("torch",),
                     warm_processes=1, checkpoint_dir=tmp_path)
    exp = nbtune.tune(train, space, algorithm="random", metric="loss", mode="min",
                      max_budget=3, num_trials=3, runtime=rt, seed=0)
    try:
        exp.wait(300)
    finally:
        rt.close()
    df = exp.results()
    assert (df["state"] == "completed").all(), df
    configs = [{k.split("/", 1)[1]: v for k, v in row.items() if k.startswith("config/")}
               for row in df.to_dict("records")]
    recs = [Recorder() for _ in configs]
    run_group(train, configs, recs, budget=3)
    for rec, last in zip(recs, df["last"], strict=True):
        assert rec.rows[-1][1]["loss"] == pytest.approx(last, abs=1e-4)


class Saver(Recorder):
    """A member that keeps its checkpoints (as the Dask trial does, in memory here)."""

    def __init__(self, restore_state=None):
        super().__init__()
        self.saved, self.restore_state = {}, restore_state

    def checkpoint(self, state, step=None):
        self.saved[step] = state

    def restore(self):
        return self.restore_state


def ckpt_train(config, trial, before_step=None):
    """``train`` plus a checkpoint per step (a loop that pauses and resumes);
    ``before_step(trial, step)`` runs before each step's training."""
    import torch
    import torch.nn.functional as F

    from nbtune.examples.digits import load_data
    from nbtune.examples.fusion_digits import make_model
    from nbtune.fusion.fusion_trial import as_fusion_trial

    torch.set_num_threads(1)
    trial = as_fusion_trial(trial)
    x, y, xv, yv = load_data()
    model = trial.model(make_model)
    opt = trial.optimizer(torch.optim.SGD, model, lr="lr", momentum="momentum")
    for step in trial.steps():
        if before_step is not None:
            before_step(trial, step)
        for i in range(0, 512, 128):
            loss, _ = trial.loss(F.cross_entropy, model(x[i:i + 128]), y[i:i + 128])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            _, per_loss = trial.loss(F.cross_entropy, model(xv), yv)
        trial.report(step, loss=per_loss)
        trial.checkpoint(step)  # after the report that ends the segment: still saved


def test_paused_members_resume_fused_again_like_never_paused():
    """SHA's rung: all members pause at step 2 (checkpoint each), two are promoted and fused
    again in a new unit from their checkpoints; they end where uninterrupted training ends."""
    full = [Recorder() for _ in CONFIGS]
    run_group(ckpt_train, CONFIGS, full, budget=4)
    first = [Saver() for _ in CONFIGS]
    run_group(ckpt_train, CONFIGS, first, budget=2)
    promoted = [3, 1]
    again = [Saver(first[k].saved[2]) for k in promoted]
    trial = FusionTrial([CONFIGS[k] for k in promoted], again, budget=4, start_step=2)
    ckpt_train(trial.config, trial)
    for k, rec in zip(promoted, again, strict=True):
        assert [s for s, _ in rec.rows] == [3, 4]
        for (_, a), (_, b) in zip(full[k].rows[2:], rec.rows, strict=True):
            assert a == pytest.approx(b, abs=1e-5)


@pytest.mark.slow
def test_sha_pauses_and_promotes_through_member_checkpoints_on_dask(tmp_path):
    """On a real LocalCluster, SHA pauses every trial at its rung and resumes the promoted
    ones from the per-member checkpoints FusionTrial saves (F = 1): their final losses equal
    uninterrupted training of the same configs."""
    import nbtune
    from nbtune.core.space import choice
    from nbtune.runtimes.dask import DaskRuntime

    space = {"seed": choice([0, 1, 2, 3]), "hidden": choice([16]), "lr": choice([0.3, 0.03]),
             "momentum": choice([0.0, 0.9])}
    rt = DaskRuntime(n_workers=2, dashboard_address=None, preload=("torch",),
                     warm_processes=1, checkpoint_dir=tmp_path)
    exp = nbtune.tune(ckpt_train, space, algorithm="sha", metric="loss", mode="min",
                      max_budget=4, min_budget=2, eta=2, num_trials=4, runtime=rt, seed=0)
    try:
        exp.wait(300)
    finally:
        rt.close()
    df = exp.results()
    done = df[df["state"] == "completed"]
    assert 1 <= len(done) < len(df), df
    for row in done.to_dict("records"):
        cfg = {k.split("/", 1)[1]: v for k, v in row.items() if k.startswith("config/")}
        rec = Recorder()
        run_group(ckpt_train, [cfg], [rec], budget=4)
        assert rec.rows[-1][1]["loss"] == pytest.approx(row["last"], abs=1e-4)


class Inbox:
    """The channel of a runtime trial, kept in memory (what the trial process would send)."""

    def __init__(self):
        self.sent = []

    def send(self, msg):
        self.sent.append(encode(msg))  # as it goes over the wire

    def poll_control(self):
        return []


def test_a_relaunch_with_no_checkpoint_trains_again_from_the_start():
    """A trial relaunched at step 2 with nothing to restore (its loop keeps no checkpoint:
    paused, resized or requeued) must not train a fresh model from step 3: it recomputes
    steps 1-2 and reports step 3 as an uninterrupted run does."""
    from nbtune.runtimes.dask.trial_side.trial_api import Trial

    full = Recorder()
    run_group(train, [CONFIGS[1]], [full], budget=3)
    inbox = Inbox()
    job = {"trial_id": 7, "config": CONFIGS[1], "start_step": 2.0, "budget": 3.0,
           "checkpoint_dir": "/nonexistent", "max_budget": 3.0, "metric": "loss"}
    train(CONFIGS[1], Trial(job, inbox))
    assert [m["k"] for m in inbox.sent] == ["recomputed", "recomputed", "report"]
    assert inbox.sent[-1]["step"] == 3
    assert inbox.sent[-1]["metrics"]["loss"] == pytest.approx(full.rows[-1][1]["loss"], abs=1e-6)
