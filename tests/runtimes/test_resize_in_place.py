"""Which Resize needs a relaunch on the Dask runtime (``jobs.resizes_in_place``).

A relaunch sends a loop without checkpoints back to step 1, so a share change
that keeps every rank on its worker is carried out in the books only, where
the share is the books' figure (CPU workers; GPUs without MPS). The real run
that showed it: ``auto``'s packing probe packed a Ray-style trial at 0.5 and
gave it the whole worker back, and the trial trained its first epochs again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtune.runtimes.dask.driver_side.cluster import Slot
from nbtune.runtimes.dask.driver_side.jobs import RunSettings, resizes_in_place
from nbtune.runtimes.dask.driver_side.runs import Run

SLOTS = {g: Slot(g, f"w{g}", 0, "n", None, threads=4.0) for g in range(2)}


def settings(checkpointing: bool, gpus: bool = False, mps: bool = False) -> RunSettings:
    return RunSettings(topic="t", fn=b"", checkpoint_dir=Path("."), checkpointing=checkpointing,
                       gpus=gpus, mps=mps, reuse=True, memory_limit=None, trial_timeout=None,
                       shutdown_grace=1.0)


def run(*placement) -> Run:
    return Run(0, 1, "k", {}, tuple(placement), 0.0, 9.0)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_another_worker_always_needs_a_relaunch(checkpointing):
    assert not resizes_in_place(run((0, 1.0)), ((1, 1.0),), SLOTS, settings(checkpointing))
    assert not resizes_in_place(run((0, 1.0)), ((0, 0.5), (1, 0.5)), SLOTS,
                                settings(checkpointing))


def test_a_loop_without_checkpoints_keeps_its_process_on_the_same_worker():
    assert resizes_in_place(run((0, 0.5)), ((0, 1.0),), SLOTS, settings(False))


def test_a_checkpointing_loop_relaunches_only_when_its_thread_count_changes():
    assert not resizes_in_place(run((0, 0.5)), ((0, 1.0),), SLOTS, settings(True))  # 2 -> 4
    assert resizes_in_place(run((0, 0.5)), ((0, 0.55),), SLOTS, settings(True))  # 2 -> 2


def test_mps_sets_the_share_at_process_start_so_it_relaunches():
    assert not resizes_in_place(run((0, 0.5)), ((0, 1.0),), SLOTS, settings(False, True, True))
    assert resizes_in_place(run((0, 0.5)), ((0, 1.0),), SLOTS, settings(False, True, False))
