"""Engine state machine: events in, commands out, invariants after every call."""

from __future__ import annotations

import pytest

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator
from nbtune.core import events as ev
from nbtune.core.commands import Finish, Launch, Pause, Stop
from nbtune.core.resources import ClusterSpec
from nbtune.core.space import uniform
from nbtune.core.trial import TrialState
from nbtune.engine import Engine, EngineError, InvariantError
from tests.engine.toy import OneShot

SPACE = {"x": uniform(0, 1)}


def make(n_trials=3, gpus=2, **kw):
    algo = OneShot(SPACE, metric="loss", max_budget=3, num_trials=n_trials, seed=0, **kw)
    eng = Engine(algo, validate=True)
    cmds = eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(gpus)))
    return eng, cmds


def launches(cmds):
    return [c for c in cmds if isinstance(c, Launch)]


def test_fifo_launches_one_trial_per_idle_gpu_in_queue_order():
    eng, cmds = make(n_trials=3, gpus=2)
    ls = launches(cmds)
    assert [c.trial_id for c in ls] == [0, 1]
    assert [c.placement for c in ls] == [((0, 1.0),), ((1, 1.0),)]
    assert [s.trial_id for s in eng.pending] == [2]
    assert eng.trials[2].state is TrialState.PENDING


def test_reports_until_target_complete_the_trial_and_free_the_gpu():
    eng, _ = make(n_trials=3, gpus=2)
    for b in (1, 2):
        assert eng.handle(ev.TrialReported(float(b), 0, b, {"loss": 1.0 / b})) == []
    cmds = eng.handle(ev.TrialReported(3.0, 0, 3, {"loss": 0.2}))
    t = eng.trials[0]
    assert t.state is TrialState.COMPLETED and t.best == 0.2 and t.end_time == 3.0
    assert t.gpu_seconds == pytest.approx(3.0)
    assert [(c.trial_id, c.placement) for c in launches(cmds)] == [(2, ((0, 1.0),))]


def test_unit_time_is_measured_between_reports():
    eng, _ = make(n_trials=1, gpus=1)
    eng.handle(ev.TrialStarted(2.0, 0))
    eng.handle(ev.TrialReported(7.0, 0, 1, {"loss": 1.0}))
    assert eng.unit_time(0) == (5.0, 1.0)


def test_stop_decision_emits_stop_and_experiment_finishes():
    eng, _ = make(n_trials=1, gpus=1, stop_above=0.5)
    eng.handle(ev.TrialReported(1.0, 0, 1, {"loss": 0.9}))
    cmds = eng.handle(ev.TrialReported(2.0, 0, 2, {"loss": 0.9}))
    assert Stop(0) in cmds and any(isinstance(c, Finish) for c in cmds)
    assert eng.trials[0].state is TrialState.STOPPED and eng.done


def test_failed_trial_is_retried_then_marked_error_and_others_go_on():
    algo = OneShot(SPACE, metric="loss", max_budget=2, num_trials=2, seed=0)
    eng = Engine(algo, validate=True, max_failures=1)
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))
    cmds = eng.handle(ev.TrialFailed(1.0, 0, error="boom"))
    # retried first (from checkpoint), ahead of nobody: it goes to the back of the queue
    assert [c.trial_id for c in launches(cmds)] == [1]
    eng.handle(ev.TrialReported(2.0, 1, 1, {"loss": 1}))
    cmds = eng.handle(ev.TrialReported(3.0, 1, 2, {"loss": 1}))
    assert [c.trial_id for c in launches(cmds)] == [0]
    cmds = eng.handle(ev.TrialFailed(4.0, 0, error="boom again"))
    assert eng.trials[0].state is TrialState.ERROR and "boom again" in eng.trials[0].error
    assert any(isinstance(c, Finish) for c in cmds)


def test_worker_loss_requeues_without_counting_a_failure():
    eng, _ = make(n_trials=2, gpus=2)
    cmds = eng.handle(ev.ResourcesChanged(1.0, ClusterSpec.homogeneous(1)))
    assert Pause(1) in cmds
    assert eng.trials[1].state is TrialState.PENDING and eng.trials[1].failures == 0


def test_a_relaunch_from_an_older_checkpoint_records_no_step_twice():
    """A wide trial's worker is retired after it reported step 2, but its newest checkpoint
    is step 1: the relaunch reports step 2 again. That is recomputed work, not a second
    result (the algorithm must not see step 2 twice, the store must not record it twice)."""
    eng, _ = make(n_trials=1, gpus=2)
    eng.handle(ev.TrialReported(1.0, 0, 1, {"loss": 0.9}), ev.TrialReported(2.0, 0, 2, {"loss": 0.5}))
    eng.handle(ev.TrialFailed(2.5, 0, worker_lost=True, error="worker retired"))
    assert eng.trials[0].state is TrialState.RUNNING  # relaunched at once on the other GPU
    eng.handle(ev.TrialReported(3.0, 0, 2, {"loss": 0.7}))  # recomputed from the step-1 checkpoint
    t = eng.trials[0]
    assert [b for _, b, _ in t.results] == [1, 2] and t.best == 0.5 and t.recomputed == 1.0
    eng.handle(ev.TrialReported(4.0, 0, 3, {"loss": 0.4}))
    assert [b for _, b, _ in t.results] == [1, 2, 3] and t.state is TrialState.COMPLETED


def test_out_of_memory_is_reported_as_such():
    algo = OneShot(SPACE, metric="loss", max_budget=2, num_trials=1, seed=0)
    eng = Engine(algo, validate=True)
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))
    eng.handle(ev.TrialFailed(1.0, 0, error="CUDA error", out_of_memory=True))
    assert eng.trials[0].error.startswith("out of memory")


def test_user_controls_stop_trial_pause_resume_and_stop_experiment():
    eng, _ = make(n_trials=3, gpus=2)
    cmds = eng.handle(ev.TrialStopRequested(0.5, 0))
    assert Stop(0) in cmds and [c.trial_id for c in launches(cmds)] == [2]
    cmds = eng.handle(ev.ExperimentPauseRequested(1.0))
    assert {c.trial_id for c in cmds if isinstance(c, Pause)} == {1, 2}
    assert eng.running == {}
    assert eng.handle(ev.TrialReported(1.1, 1, 1, {"loss": 1})) == []  # late report ignored
    cmds = eng.handle(ev.ExperimentResumeRequested(2.0))
    assert {c.trial_id for c in launches(cmds)} == {1, 2}
    cmds = eng.handle(ev.ExperimentStopRequested(3.0))
    assert any(isinstance(c, Finish) for c in cmds)
    assert all(t.state.is_terminal for t in eng.trials.values())


def test_concurrency_cap_pauses_the_newest_and_limits_launches():
    eng, _ = make(n_trials=4, gpus=3)
    cmds = eng.handle(ev.ConcurrencyChanged(1.0, 1))
    assert {c.trial_id for c in cmds if isinstance(c, Pause)} == {1, 2}
    assert list(eng.running) == [0]
    cmds = eng.handle(ev.ConcurrencyChanged(2.0, None))
    assert len(launches(cmds)) == 2


class OverPacker(BaseAllocator):
    """A broken allocator: puts every pending trial on GPU 0 with share 1."""

    name = "overpacker"

    def capacity(self, view):
        return 4

    def allocate(self, view):
        return Allocation(launch={s.trial_id: ((0, 1.0),) for s in view.pending})


def test_validate_catches_an_allocator_that_overfills_a_gpu():
    algo = OneShot(SPACE, metric="loss", max_budget=2, num_trials=2, seed=0)
    eng = Engine(algo, OverPacker(), validate=True)
    with pytest.raises(InvariantError, match="GPU 0 holds 2"):
        eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))


class Stalling(OneShot):
    @property
    def finished(self):
        return False


def test_a_stalled_algorithm_is_an_error_not_a_hang():
    algo = Stalling(SPACE, metric="loss", max_budget=1, num_trials=1, seed=0)
    eng = Engine(algo, validate=True)
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))
    with pytest.raises(EngineError, match="stalled"):
        eng.handle(ev.TrialReported(1.0, 0, 1, {"loss": 1}))


def test_subscribers_see_events_and_commands():
    seen = []
    algo = OneShot(SPACE, metric="loss", max_budget=1, num_trials=1, seed=0)
    eng = Engine(algo)
    eng.subscribe(lambda events, cmds: seen.append((events, cmds)))
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))
    assert isinstance(seen[0][0][0], ev.ExperimentStarted)
    assert isinstance(seen[0][1][0], Launch)


def test_a_function_that_returned_completes_at_its_last_report_and_frees_its_gpu():
    """TrialReturned: the loop was shorter than the budget (Ray: TERMINATED). The trial is
    completed where it is, not failed and retried, and the next trial takes its GPU."""
    eng, _ = make(n_trials=2, gpus=1)
    eng.handle(ev.TrialReported(1.0, 0, 1.0, {"loss": 0.5}))
    cmds = eng.handle(ev.TrialReturned(2.0, 0))
    t = eng.trials[0]
    assert t.state is TrialState.COMPLETED and t.failures == 0 and t.error is None
    assert t.budget_used == 1.0 and t.end_time == 2.0
    assert [c.trial_id for c in launches(cmds)] == [1]
    assert eng.handle(ev.TrialReturned(3.0, 0)) == []  # a second word on it changes nothing


def test_state_version_is_one_stamp_within_a_round_and_moves_between_them():
    """Allocators may reuse what they derived while the stamp holds: it must move whenever a
    trial or a subscriber's profile may have changed, and hold from capacity to allocate."""
    stamps: list[tuple[str, object]] = []

    class Recording(BaseAllocator):
        def capacity(self, view):
            stamps.append(("capacity", view.state_version))
            return len(view.idle_gpus)

        def allocate(self, view):
            stamps.append(("allocate", view.state_version))
            idle = sorted(view.idle_gpus)
            return Allocation(launch={s.trial_id: ((g, 1.0),)
                                      for s, g in zip(view.pending, idle, strict=False)})

    algo = OneShot(SPACE, metric="loss", max_budget=3, num_trials=3, seed=0)
    eng = Engine(algo, allocator=Recording())
    after_sub = []
    eng.subscribe(lambda events, cmds: after_sub.append(eng.state_version))
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    # one round: capacity (asked again once the algorithm answered), then allocate, one stamp
    assert {s for _, s in stamps} == {stamps[0][1]} and stamps[-1][0] == "allocate"
    first = stamps[-1][1]
    assert after_sub[-1][0] == first[0]  # the subscribers see the round's launches ...
    assert eng.state_version != after_sub[-1]  # ... and what they learn gets a new stamp
    before, version = eng.state_version, eng.ledger.version
    eng.handle(ev.TrialReported(1.0, 0, 1, {"loss": 1.0}))
    assert eng.ledger.version == version  # a report that moves nothing on the ledger ...
    assert eng.state_version != before  # ... still changes what allocators read
    before = eng.state_version
    eng.set_hint("profiles", None)
    assert eng.state_version != before
    eng.handle(ev.TrialReported(3.0, 0, 3, {"loss": 0.5}))  # done: its GPU goes to trial 2
    assert stamps[-1][0] == "allocate" and stamps[-1][1] != first
    assert eng.trials[2].state is TrialState.RUNNING
