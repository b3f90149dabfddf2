"""The run driver sends a batch's launches of fresh trials before its stops (driver.execute)."""

from __future__ import annotations

from nbtune.core.commands import Finish, Launch, Pause, Stop
from nbtune.runtimes.dask.driver_side.driver import launches_first


def _launch(tid: int, restore_from: int | None = None) -> Launch:
    return Launch(tid, {}, 0.0, 1.0, ((0, 1.0),), restore_from=restore_from)


def test_a_fresh_launch_goes_before_the_stop_that_freed_its_worker() -> None:
    cmds = [Stop(1), _launch(2)]
    assert launches_first(cmds, {1}) == [_launch(2), Stop(1)]


def test_the_rest_keeps_its_order() -> None:
    cmds = [Stop(1), Pause(3), _launch(2), Stop(4), _launch(5), Finish()]
    assert launches_first(cmds, {1, 3, 4}) == [_launch(2), _launch(5), Stop(1), Pause(3),
                                                 Stop(4), Finish()]


def test_launches_that_touch_another_command_or_a_live_run_stay_in_place() -> None:
    relaunch = _launch(1)  # trial 1 still has a run (or a deferred launch): it waits for it
    clone = _launch(6, restore_from=2)  # clones trial 2, launched in the same batch
    named_twice = _launch(7)
    cmds = [Stop(1), relaunch, _launch(2), clone, Pause(7), named_twice]
    assert launches_first(cmds, {1}) == cmds
    assert launches_first([Stop(9), _launch(8, restore_from=9)], {9}) == [
        Stop(9), _launch(8, restore_from=9)]


def test_nothing_to_move_returns_the_batch_as_it_is() -> None:
    cmds = [Stop(1), Finish()]
    assert launches_first(cmds, {1}) is cmds
