"""The user-facing Trial object and the checkpoint files, without a cluster.

The Trial talks to the runtime through a two-method channel; here the channel
is an in-memory one (the pipe-backed channel is exercised end to end in
test_dask_runtime.py). The rules checked are the documented ones: steps run
from start_step to exactly the budget, a stop request takes effect at the
next boundary, nothing is ever reported past the budget.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.runtimes.dask import checkpoints as ck
from nbtune.runtimes.dask.protocol import Control, Go, StopRequest, TrialMessage, Verdict, encode
from nbtune.runtimes.dask.trial_side.trial_api import Trial, TrialInterrupted


class MemoryChannel:
    """A Trial's channel in memory: what it sends, in wire form; control to hand it."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.control: list[Control] = []

    def send(self, msg: TrialMessage) -> None:
        self.sent.append(encode(msg))

    def poll_control(self) -> list[Control]:
        out, self.control = self.control, []
        return out


def make(tmp_path, start=0.0, budget=3.0, **kw) -> tuple[Trial, MemoryChannel]:
    ch = MemoryChannel()
    job = {"trial_id": 7, "config": {"lr": 0.1}, "start_step": start, "budget": budget,
           "checkpoint_dir": str(tmp_path), **kw}
    return Trial(job, ch), ch


def reports(ch: MemoryChannel) -> list[float]:
    return [m["step"] for m in ch.sent if m["k"] == "report"]


@given(start=st.integers(0, 20), extra=st.floats(0.25, 12.0))
def test_steps_cover_the_segment_exactly(tmp_path_factory, start, extra):
    budget = start + extra
    trial, ch = make(tmp_path_factory.mktemp("t"), start=float(start), budget=budget)
    for step in trial.steps():
        trial.report(step=step, loss=1.0)
    got = reports(ch)
    assert got == sorted(set(got)) and got[0] > start
    assert got[-1] == pytest.approx(budget)
    assert len(got) == math.ceil(extra - 1e-9)
    assert trial.should_stop() and trial.stop_reason == "budget"


@given(stop_after=st.integers(1, 8))
def test_stop_request_takes_effect_at_the_next_boundary(tmp_path_factory, stop_after):
    trial, ch = make(tmp_path_factory.mktemp("t"), budget=10.0)
    for step in trial.steps():
        if step == stop_after:
            ch.control.append(StopRequest(reason="pause"))
        if trial.report(step=step, loss=0.5):
            break
    assert reports(ch)[-1] == stop_after
    assert trial.stop_reason == "pause"
    with pytest.raises(TrialInterrupted):
        trial.report(step=stop_after + 1, loss=0.5)


def test_report_rejects_bad_steps(tmp_path):
    trial, ch = make(tmp_path, start=2.0, budget=4.0)
    assert trial.report(step=2, loss=1.0) is False  # already done before: recomputed work
    with pytest.raises(ValueError, match="must increase"):
        trial.report(step=2, loss=1.0)
    with pytest.raises(ValueError, match="past the budget"):
        trial.report(step=5, loss=1.0)
    assert trial.report(loss=1.0) is False  # step defaults to the next unit: 3
    assert trial.report(loss=1.0) is True  # 4 is the budget
    assert reports(ch) == [3.0, 4.0] and trial.recomputed == 1


def test_a_relaunch_from_scratch_recomputes_then_goes_on(tmp_path):
    """A Ray-style loop with no checkpoint relaunched at step 3 reports 1.. again: no error."""
    trial, ch = make(tmp_path, start=3.0, budget=5.0, max_budget=5.0)
    for _ in range(5):
        if trial.report({"loss": 0.5}):  # Ray's form: metrics dict, implicit step
            break
    assert [m["step"] for m in ch.sent if m["k"] == "recomputed"] == [1.0, 2.0, 3.0]
    assert reports(ch) == [4.0, 5.0]
    assert trial.stop_reason == "budget"


def test_steps_after_a_relaunch_that_restored_nothing_recompute_from_the_start(tmp_path):
    """A loop keeping its state in memory, relaunched at step 3 (its process was given up):
    it trains again from 1, so its state at 4 is the state a run in one process has."""
    trial, ch = make(tmp_path, start=3.0, budget=5.0, max_budget=5.0)
    w, seen = 0.0, []
    for step in trial.steps():
        w += 1.0
        seen.append((step, w))
        trial.report(step=step, w=w)
    assert seen == [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (4.0, 4.0), (5.0, 5.0)]
    assert [m["step"] for m in ch.sent if m["k"] == "recomputed"] == [1.0, 2.0, 3.0]
    assert [(m["step"], m["metrics"]["w"]) for m in ch.sent if m["k"] == "report"] == [
        (4.0, 4.0), (5.0, 5.0)]
    # restored from a checkpoint at 2: steps 3.. (3 is recomputed, 4 and 5 are new)
    path = ck.save_state({"w": 2.0}, ck.checkpoint_path(tmp_path, 7, 2.0))
    trial, ch = make(tmp_path, start=3.0, budget=5.0, restore_path=str(path), restore_step=2.0)
    state = trial.restore()
    assert state == {"w": 2.0}
    for step in trial.steps():
        state["w"] += 1.0
        trial.report(step=step, w=state["w"])
    assert [m["step"] for m in ch.sent if m["k"] == "recomputed"] == [3.0]
    assert [(m["step"], m["metrics"]["w"]) for m in ch.sent if m["k"] == "report"] == [
        (4.0, 4.0), (5.0, 5.0)]


def test_optuna_and_ray_forms(tmp_path):
    trial, ch = make(tmp_path, budget=9.0, metric="val_loss")
    trial.report(0.7, 1)  # Optuna: report(value, step)
    trial.report(0.6, step=2)
    trial.report({"val_loss": 0.5, "acc": 0.9})  # Ray: dict, step implicit (3)
    trial.report(val_loss=0.4)  # Ray: keywords (4)
    trial.report(5, val_loss=0.3)  # nbtune: report(step, **metrics)
    sent = [(m["step"], m["metrics"]) for m in ch.sent if m["k"] == "report"]
    assert sent == [(1.0, {"val_loss": 0.7}), (2.0, {"val_loss": 0.6}),
                    (3.0, {"val_loss": 0.5, "acc": 0.9}), (4.0, {"val_loss": 0.4}),
                    (5.0, {"val_loss": 0.3})]
    ch.control.append(StopRequest(reason="stop"))
    assert trial.should_prune() is True


def test_a_trial_without_checkpoints_waits_at_its_rung(tmp_path):
    """Below max_budget and no checkpoint: report blocks until go (trains on) or stop (raises)."""
    trial, ch = make(tmp_path, budget=1.0, max_budget=9.0, hold=True)
    ch.control.append(Go(budget=3.0))
    assert trial.report(loss=1.0) is False  # held at 1, then promoted to 3
    assert [m["k"] for m in ch.sent] == ["report", "held"]
    assert trial.report(loss=0.9) is False
    ch.wait_control = lambda timeout: [StopRequest(reason="stop")]  # comes while it waits
    with pytest.raises(TrialInterrupted):
        trial.report(loss=0.8)  # held at 3, then stopped
    early, ch1 = make(tmp_path, budget=1.0, max_budget=9.0, hold=True)
    ch1.control.append(StopRequest(reason="stop"))
    assert early.report(loss=1.0) is True and early.stop_reason == "stop"  # never waits
    ckpt, ch2 = make(tmp_path, budget=1.0, max_budget=9.0, checkpoints=True, hold=True)
    assert ckpt.report(loss=1.0) is True  # a checkpointing loop returns and resumes later
    assert "held" not in [m["k"] for m in ch2.sent]


def test_a_trial_waits_for_the_verdict_after_reporting_a_stop_rung(tmp_path):
    """ASHA may stop a trial at 1 and 3: report waits there for the verdict (a stopped trial
    trains no step past its rung), and nowhere else; a stop while waiting ends the trial."""
    trial, ch = make(tmp_path, budget=9.0, max_budget=9.0, verdicts=[1.0, 3.0])
    waited: list[float] = []

    def wait_control(timeout):
        waited.append(trial.step)
        return [Verdict(step=trial.step)]

    ch.wait_control = wait_control
    assert [trial.report(loss=1.0) for _ in range(3)] == [False, False, False]
    assert waited == [1.0, 3.0]
    assert [m.get("wait", False) for m in ch.sent if m["k"] == "report"] == [True, False, True]
    stopped, ch2 = make(tmp_path, budget=9.0, max_budget=9.0, verdicts=[1.0, 3.0])
    ch2.wait_control = lambda timeout: [StopRequest(reason="stop")]
    assert stopped.report(1, loss=1.0) is True and stopped.stop_reason == "stop"
    ray, ch5 = make(tmp_path, budget=9.0, max_budget=9.0, verdicts=[1.0, 3.0])
    ch5.wait_control = lambda timeout: [StopRequest(reason="stop")]
    with pytest.raises(TrialInterrupted):  # Ray's form: its loops never look at the answer
        ray.report({"loss": 1.0})
    crossed, ch3 = make(tmp_path, budget=9.0, max_budget=9.0, verdicts=[3.0])
    ch3.wait_control = lambda timeout: [Verdict(step=4.0)]
    assert crossed.report(step=2, loss=1.0) is False and crossed.report(step=4, loss=1.0) is False
    assert [m.get("wait", False) for m in ch3.sent] == [False, True]  # 4 passed the rung at 3
    silent, ch4 = make(tmp_path, budget=9.0, max_budget=9.0, verdicts=[1.0])
    assert silent._await_verdict(timeout=0.05) is False  # no answer: trains on after it


def test_uses_checkpoints_reads_the_code():
    from nbtune.runtimes.dask.trial_side.trial_api import uses_checkpoints

    def saves(config, trial):
        def inner():
            trial.checkpoint({})
        inner()

    def plain(config, trial):
        trial.report(loss=1.0)

    assert uses_checkpoints(saves) and not uses_checkpoints(plain)
    assert uses_checkpoints(_wraps_a_checkpointing_loop)  # followed into what it calls


def _checkpointing_loop(config, trial):
    trial.checkpoint({})


def _wraps_a_checkpointing_loop(config, trial):
    _checkpointing_loop(config, trial)


def test_metrics_are_made_serializable(tmp_path):
    import numpy as np
    trial, ch = make(tmp_path)
    trial.report(step=1, a=np.float32(0.5), b=np.int64(3), c=True, d="x", e=None, f=object())
    m = ch.sent[-1]["metrics"]
    assert m["a"] == 0.5 and type(m["a"]) is float
    assert m["b"] == 3 and type(m["b"]) is int
    assert m["c"] is True and m["d"] == "x" and m["e"] is None and isinstance(m["f"], str)


def test_checkpoint_then_restore_round_trip(tmp_path):
    trial, ch = make(tmp_path, budget=2.0)
    trial.report(step=1, loss=1.0)
    path = trial.checkpoint({"w": [1, 2, 3]})
    assert ch.sent[-1] == {"k": "ckpt", "step": 1.0, "path": path}
    found = ck.latest_checkpoint(tmp_path, 7, 1.0)
    assert found is not None and str(found[1]) == path
    resumed, _ = make(tmp_path, start=1.0, restore_path=path, restore_step=1.0)
    assert resumed.restore() == {"w": [1, 2, 3]}
    fresh, _ = make(tmp_path)
    assert fresh.restore() is None


def test_only_rank_zero_reports_and_checkpoints(tmp_path):
    trial, ch = make(tmp_path, rank=1, world_size=1)
    trial.report(step=1, loss=1.0)
    assert trial.checkpoint({"x": 1}) is None
    assert ch.sent == []


@given(steps=st.lists(st.integers(0, 200).map(lambda i: i / 4), min_size=1, max_size=8,
                      unique=True),
       cap=st.floats(0.0, 60.0))
def test_latest_checkpoint_is_the_newest_not_past_the_cap(tmp_path_factory, steps, cap):
    root = tmp_path_factory.mktemp("ck")
    for s in steps:
        ck.save_state({"s": s}, ck.checkpoint_path(root, 3, s))
    found = ck.latest_checkpoint(root, 3, cap)
    below = [s for s in steps if s <= cap + 1e-9]
    if not below:
        assert found is None
    else:
        assert found is not None and found[0] == max(below)
    assert ck.latest_checkpoint(root, 4) is None


def test_adopting_a_donor_checkpoint_replaces_the_old_lineage(tmp_path):
    for s in (1.0, 2.0, 3.0):
        ck.save_state({"who": "mine", "s": s}, ck.checkpoint_path(tmp_path, 1, s))
    ck.save_state({"who": "donor"}, ck.checkpoint_path(tmp_path, 0, 2.0))
    donor = ck.latest_checkpoint(tmp_path, 0, 2.0)
    dst = ck.adopt_checkpoint(donor[1], tmp_path, 1, 2.0)
    assert ck.load_state(dst) == {"who": "donor"}
    assert [s for s, _ in ck.list_checkpoints(tmp_path, 1)] == [1.0, 2.0]  # step 3 was mine
    assert ck.load_state(ck.latest_checkpoint(tmp_path, 1)[1]) == {"who": "donor"}


def test_default_steps_end_exactly_at_a_fractional_budget(tmp_path):
    trial, ch = make(tmp_path, budget=2.5)
    assert [trial.report(loss=1.0) for _ in range(3)] == [False, False, True]
    assert reports(ch) == [1.0, 2.0, 2.5]
