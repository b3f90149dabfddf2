"""A runtime's hints ride in ``ExperimentStarted``, so a replay decides as the run did.

The Dask runtime tells Fluid which resizes restart a loop with no checkpoint
(``"resize_restarts"``), and Fluid's moves depend on it. Set beside the event
stream, the hint was missing when ``resume`` replayed the stored log, and the
replayed allocator could answer differently from the stored run (a ResumeError
on a run that was fine). In the event, it is stored and replayed like any fact.
"""

from __future__ import annotations

from nbtune.allocators import FifoAllocator
from nbtune.allocators.allocator_protocol import Allocation
from nbtune.core import events as ev
from nbtune.core.commands import Launch
from nbtune.core.resources import ClusterSpec
from nbtune.store import RestartableEngine, ResumeError, replay
from nbtune.store.serialize import dump_event, load_event
from nbtune.store.store import command_payload
from tests.engine.toy import OneShot
from tests.store.test_resume import SPACE


class HintReader(FifoAllocator):
    """FIFO, except that where resizes restart anything it launches onto the last idle GPU."""

    def allocate(self, view):
        alloc = super().allocate(view)
        if view.hints.get("resize_restarts") != "any":
            return alloc
        idle = sorted(view.idle_gpus, reverse=True)
        launch = {tid: ((idle.pop(0), share),) for tid, ((_, share),) in alloc.launch.items()}
        return Allocation(launch=launch, resize=dict(alloc.resize))


def engine():
    return RestartableEngine(OneShot(SPACE, metric="loss", max_budget=3, num_trials=1, seed=0),
                             HintReader(), validate=True)


def recorded_run(hints):
    """Each batch as the store keeps it: events through the JSON codec, command payloads."""
    eng, log = engine(), []
    for events in ([ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2), hints)],
                   [ev.TrialReported(1.0, 0, 1.0, {"loss": 0.5})]):
        cmds = eng.handle(*events)
        log.append(([load_event(*dump_event(e)) for e in events],
                    [command_payload(c) for c in cmds]))
    return eng, log


def test_the_hint_reaches_the_allocator_and_a_replay_decides_alike():
    eng, log = recorded_run({"resize_restarts": "any"})
    assert eng.hints["resize_restarts"] == "any"
    first = [p for kind, p in log[0][1] if kind == "Launch"]
    assert first[0]["placement"] == {"__tuple__": [{"__tuple__": [1, 1.0]}]}  # not FIFO's 0
    fresh = engine()
    assert replay(fresh, log) == 2  # check=True: every batch answered as stored
    assert fresh.hints["resize_restarts"] == "any"


def test_the_same_log_without_its_hint_is_a_different_run():
    _, log = recorded_run({"resize_restarts": "any"})
    for events, _ in log:
        for e in events:
            if isinstance(e, ev.ExperimentStarted):
                e.hints = {}
    try:
        replay(engine(), log)
    except ResumeError:
        return
    raise AssertionError("a replay without the hint answered as the run with it")


def test_a_restart_replaces_the_runtimes_hints():
    eng = engine()
    eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2), {"resize_restarts": "any"}))
    cmds = eng.handle(ev.ExperimentStarted(5.0, ClusterSpec.homogeneous(2)))  # a runtime that has none
    assert "resize_restarts" not in eng.hints
    assert [c.placement[0][0] for c in cmds if isinstance(c, Launch)] == [0]  # FIFO's again
