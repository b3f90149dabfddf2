"""The Dask runtime's driver starts a PBT clone from the donor state the engine cloned.

PBT may clone a trial that is itself a clone still waiting for its own donor's
process: that state is filed as the waiting trial's checkpoint only when it
starts. The driver's commands go to a recorder of the jobs it sends (the worker
links, the one network boundary); checkpoints are real files.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from nbtune.core.commands import Launch
from nbtune.core.trial import TrialState
from nbtune.runtimes.dask import checkpoints as ck
from nbtune.runtimes.dask.driver_side.cluster import Inventory, Slot
from nbtune.runtimes.dask.driver_side.driver import RunDriver
from nbtune.runtimes.dask.driver_side.fused_job import FusedUnits
from nbtune.runtimes.dask.driver_side.jobs import RunSettings
from nbtune.runtimes.dask.driver_side.runs import WallClock
from nbtune.runtimes.dask.protocol import Exit


class SentJobs:
    """The worker links as the driver uses them: what it launched and signalled."""

    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []
        self.controls: list[tuple[str, list[str]]] = []

    def launch(self, run_id: int, jobs: list[tuple[str, dict[str, Any]]]) -> None:
        self.jobs.extend(job for _, job in jobs)

    def control(self, worker: str, keys: list[str], raw: Any) -> None:
        self.controls.append((worker, keys))

    def launched(self, tid: int) -> list[dict[str, Any]]:
        return [j for j in self.jobs if j["trial_id"] == tid]


def driver_for(tmp_path: Path, n: int) -> tuple[RunDriver, SentJobs]:
    running = {tid: ((tid, 1.0),) for tid in range(n)}
    engine = SimpleNamespace(  # what the driver reads of the engine
        trials={tid: SimpleNamespace(state=TrialState.RUNNING) for tid in range(n)},
        running=running, max_budget=6.0, metric="loss", algorithm=None)
    inventory = Inventory(False)
    inventory.slots = {g: Slot(g, "w0", g, "127.0.0.1", None, 1.0) for g in range(n)}
    links = SentJobs()
    settings = RunSettings("topic", b"", tmp_path, True, False, False, False, None, None, 1.0)
    return RunDriver(engine, WallClock(), inventory, links, settings,  # type: ignore[arg-type]
                     itertools.count(), FusedUnits), links


def test_a_clone_of_a_waiting_clone_starts_from_the_state_it_cloned(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):  # trial 1's own lineage before it is exploited
        ck.save_state({"from": 1, "step": step}, ck.checkpoint_path(tmp_path, 1, step))
    ck.save_state({"from": 0, "step": 4}, ck.checkpoint_path(tmp_path, 0, 4))
    driver, links = driver_for(tmp_path, 3)
    driver.execute([Launch(0, {}, 4.0, 5.0, ((0, 1.0),))])
    donor = driver.runs[0]
    donor.last_step = 5.0  # it reported step 5; its process is still writing that checkpoint
    # trial 1 clones trial 0 at 5, and trial 2 clones trial 1 at 5 before trial 1 has started
    driver.execute([Launch(1, {}, 5.0, 6.0, ((1, 1.0),), restore_from=0),
                    Launch(2, {}, 5.0, 6.0, ((2, 1.0),), restore_from=1)])
    assert links.launched(1) == [] and links.launched(2) == []  # both wait for trial 0
    ck.save_state({"from": 0, "step": 5}, ck.checkpoint_path(tmp_path, 0, 5))
    driver.rank_exited(donor, 0, Exit(ok=True), 1.0)
    (one,), (two,) = links.launched(1), links.launched(2)
    assert (one["restore_step"], one["start_step"]) == (5.0, 5.0)
    assert (two["restore_step"], two["start_step"]) == (5.0, 5.0)
    assert ck.load_state(two["restore_path"]) == {"from": 0, "step": 5}


def test_a_clone_of_a_clone_stopped_while_it_waited_takes_what_its_donor_has(
        tmp_path: Path) -> None:
    for step in (1, 2):
        ck.save_state({"from": 1, "step": step}, ck.checkpoint_path(tmp_path, 1, step))
    ck.save_state({"from": 0, "step": 2}, ck.checkpoint_path(tmp_path, 0, 2))
    driver, links = driver_for(tmp_path, 3)
    driver.execute([Launch(0, {}, 2.0, 3.0, ((0, 1.0),))])
    donor = driver.runs[0]
    donor.last_step = 3.0
    driver.execute([Launch(1, {}, 3.0, 4.0, ((1, 1.0),), restore_from=0),
                    Launch(2, {}, 3.0, 4.0, ((2, 1.0),), restore_from=1)])
    driver.engine.trials[1].state = TrialState.PAUSED  # paused before its donor's process exited
    driver.engine.running.pop(1)
    driver.rank_exited(donor, 0, Exit(ok=True), 1.0)
    assert links.launched(1) == []
    (two,) = links.launched(2)  # not left waiting for a launch that will never come
    assert two["restore_step"] == 2.0
